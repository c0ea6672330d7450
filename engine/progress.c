/* progress.c: the progress callback of a forward or backward pass
 * (ra_params.on_step), called by the strategies after each step. */
#include "internal.h"

void ra_step_report(const ra_params *params, int done, int total)
{
    if (params && params->exec.on_step)
        params->exec.on_step(params->exec.on_step_ctx, done, total);
}
