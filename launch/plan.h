/* plan.h: the performance model as the command line uses it: `ringattn
 * plan` (cmd_plan.c) and `--strategy auto` of run and bench (plan_pick.c),
 * with its warnings and lines; the predictions and the pick are
 * comm/perf/plan_run.c's. */
#ifndef RA_LAUNCH_PLAN_H
#define RA_LAUNCH_PLAN_H

#include "cli.h"
#include "plan_run.h"
#include "profile_json.h"

/* The job of ctx as the model sees it. */
plan_job plan_job_of(const cli_ctx *ctx);

/* `--strategy auto` for the job of ctx (plan_job_pick); a profile that
 * cannot predict it: rank 0 warns on stderr in one line and the ring runs
 * (pick->applies 0). Collective. */
ra_status plan_pick(const cli_ctx *ctx, const ra_shape *s, ra_params *p,
                    const model_masks *masks, const char *profile,
                    model_result *pick);

/* plan_job_predict for the job of ctx. Collective. */
ra_status plan_predict(const cli_ctx *ctx, const ra_shape *s,
                       const ra_params *p, const model_masks *masks,
                       const char *profile, model_result *out);

/* Rank 0: the parameter table's lines of a pick. */
void plan_pick_print(const cli_ctx *ctx, const model_result *pick,
                     const char *profile);

#endif /* RA_LAUNCH_PLAN_H */
