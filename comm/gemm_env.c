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

ra_status ra_gemm_agree(MPI_Comm comm, ra_gemm gemm)
{
    if (gemm != RA_GEMM_AUTO)
        return RA_OK;
    const int g = (int)ra_gemm_pick(gemm);
    int span[2] = {g, -g}; /* the lowest and, negated, the highest engine */
    if (MPI_Allreduce(MPI_IN_PLACE, span, 2, MPI_INT, MPI_MIN, comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "gemm: comparing the ranks' engines "
                            "failed");
    if (span[0] == -span[1])
        return RA_OK;
    return ra_error_set(RA_ERR_ARG, "%s: the ranks run different tile "
                        "engines (%s on some, %s on others): set it alike "
                        "on every node (mpirun -x %s)", RA_GEMM_ENV,
                        ra_gemm_name((ra_gemm)span[0]),
                        ra_gemm_name((ra_gemm)-span[1]), RA_GEMM_ENV);
}
