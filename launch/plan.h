/* plan.h: the performance model as the command line uses it: `ringattn
 * plan` (cmd_plan.c) and `--strategy auto` of run and bench (plan_pick.c).
 * The arithmetic is comm/perf/model.c's, the pick over strategies and
 * layouts comm/perf/model_pick.c's. */
#ifndef RA_LAUNCH_PLAN_H
#define RA_LAUNCH_PLAN_H

#include "cli.h"
#include "model.h"
#include "profile_json.h"

/* Rank 0: one warning line on stderr when the profile read from path was
 * probed oversubscribed (nothing for the built-in one). */
void plan_profile_warn(const cli_ctx *ctx, const char *path,
                       const ra_profile *pf);

/* The allocation of the running job (ring order, nodes, threads) for the
 * model; node_of (ctx->nranks entries) is filled. Collective. */
ra_status plan_job_alloc(const cli_ctx *ctx, const ra_params *p,
                         const ra_profile *pf, const ra_shape *s,
                         int *node_of, model_alloc *al);

/* `--strategy auto`: the fastest applicable strategy for this job under the
 * resolved layout of p (masks: the padding lengths, or NULL), into
 * p->strategy, and its prediction into *pick (compute only: no I/O).
 * profile: a file, or NULL. A profile that cannot predict this job (see
 * model_profile_check): rank 0 warns on stderr in one line, the ring is
 * chosen and *pick is zero with pick->applies 0 (no prediction). Collective;
 * well under a second. */
ra_status plan_pick(const cli_ctx *ctx, const ra_shape *s, ra_params *p,
                    const model_masks *masks, const char *profile,
                    model_result *pick);

/* The prediction of p->strategy itself for this job (compute only), as
 * plan_pick makes it; RA_ERR_ARG (no message) when the model says the
 * strategy does not apply. Collective. */
ra_status plan_predict(const cli_ctx *ctx, const ra_shape *s,
                       const ra_params *p, const model_masks *masks,
                       const char *profile, model_result *out);

/* Rank 0: the parameter table's lines of a pick. */
void plan_pick_print(const cli_ctx *ctx, const model_result *pick,
                     const char *profile);

#endif /* RA_LAUNCH_PLAN_H */
