/* plan_pick.c: `--strategy auto` and the predictions of the running job
 * (comm/perf/plan_run.c) as the command line states them. */
#include <stdio.h>

#include "placement.h"
#include "plan.h"

void plan_profile_warn(const cli_ctx *ctx, const char *path,
                       const ra_profile *pf)
{
    if (ctx->rank != 0 || !path || !pf->oversubscribed)
        return;
    fprintf(stderr, "ringattn: warning: %s: probed oversubscribed (more ranks "
            "x threads than cores on a machine): its rates are shares of a "
            "core, so the predictions run slow; probe again with a rank per "
            "core\n", path);
    fflush(stderr);
}

/* The job of ctx as the model sees it. */
static plan_job job_of(const cli_ctx *ctx)
{
    return (plan_job){ctx->comm, ctx->nodes.node, ctx->nodes.nodes,
                      cli_machine_id()};
}

ra_status plan_pick(const cli_ctx *ctx, const ra_shape *s, ra_params *p,
                    const model_masks *masks, const char *profile,
                    model_result *pick)
{
    const plan_job j = job_of(ctx);
    int unusable;
    const ra_status st = plan_job_pick(&j, s, p, masks, profile, pick,
                                       &unusable);
    if (unusable && ctx->rank == 0) /* run on the ring, never on a NaN */
        fprintf(stderr, "ringattn: warning: --strategy auto: %s; running "
                "the ring\n", ra_error_message());
    return st;
}

ra_status plan_predict(const cli_ctx *ctx, const ra_shape *s,
                       const ra_params *p, const model_masks *masks,
                       const char *profile, model_result *out)
{
    const plan_job j = job_of(ctx);
    return plan_job_predict(&j, s, p, masks, profile, out);
}

void plan_pick_print(const cli_ctx *ctx, const model_result *pick,
                     const char *profile)
{
    if (ctx->rank != 0)
        return;
    printf("# %-10s %s, chosen by the plan (--strategy auto)\n", "auto",
           ra_strategy_name(pick->strategy));
    printf("# %-10s %.3f s (compute %.3f, comm %.3f, imbalance %.3f), "
           "%s\n", "predicted", pick->t_total, pick->t_compute, pick->t_comm,
           pick->t_imbalance,
           profile ? profile : "built-in profile of this machine, not probed");
    fflush(stdout);
}
