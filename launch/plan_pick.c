/* plan_pick.c: `--strategy auto` and the predictions of the running job
 * (comm/perf/plan_run.c) as the command line states them. */
#include <stdio.h>

#include "placement.h"
#include "plan.h"

plan_job plan_job_of(const cli_ctx *ctx)
{
    return (plan_job){ctx->comm, ctx->nodes.node, ctx->nodes.nodes,
                      cli_machine_id()};
}

ra_status plan_pick(const cli_ctx *ctx, const ra_shape *s, ra_params *p,
                    const model_masks *masks, const char *profile,
                    model_result *pick)
{
    const plan_job j = plan_job_of(ctx);
    int unusable;
    const ra_status st = plan_job_pick(&j, s, p, masks, profile, pick,
                                       &unusable);
    if (unusable && ctx->rank == 0) /* run on the ring, never on a NaN */
        plan_auto_warning(stderr);
    return st;
}

ra_status plan_predict(const cli_ctx *ctx, const ra_shape *s,
                       const ra_params *p, const model_masks *masks,
                       const char *profile, model_result *out)
{
    const plan_job j = plan_job_of(ctx);
    return plan_job_predict(&j, s, p, masks, profile, out);
}

void plan_pick_print(const cli_ctx *ctx, const model_result *pick,
                     const char *profile)
{
    if (ctx->rank == 0)
        plan_pick_write(stdout, pick, profile);
}
