/* gemm_env.c: the engine of RA_GEMM_AUTO from RINGATTN_GEMM (gemm_env.h),
 * so that one build runs either engine without a rebuild (the test suite
 * runs once on each: .ci/run). */
#include <stdlib.h>

#include "gemm.h"
#include "gemm_env.h"
#include "internal.h"

ra_status ra_gemm_env(ra_gemm *out)
{
    const char *env = getenv(RA_GEMM_ENV);
    ra_gemm g = RA_GEMM_AUTO;
    *out = ra_gemm_resolve(RA_GEMM_AUTO);
    if (!env || !env[0])
        return RA_OK;
    if (ra_gemm_parse(env, &g) != RA_OK || !ra_gemm_available(g))
        return ra_error_set(RA_ERR_ARG, "%s=%s: not an engine this build "
                            "has (auto, openblas%s)", RA_GEMM_ENV, env,
                            ra_gemm_available(RA_GEMM_ONEDNN) ? ", onednn"
                                                              : "");
    *out = ra_gemm_resolve(g);
    return RA_OK;
}

ra_gemm ra_gemm_pick(ra_gemm gemm)
{
    ra_gemm g = gemm;
    if (gemm == RA_GEMM_AUTO)
        (void)ra_gemm_env(&g);
    return g;
}
