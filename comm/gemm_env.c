/* gemm_env.c: the engine of RA_GEMM_AUTO from RINGATTN_GEMM (gemm_env.h),
 * so that one build runs either engine without a rebuild (the test suite
 * runs once on each: .ci/run). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "gemm_env.h"
#include "internal.h"

/* RINGATTN_GEMM as the process held it when the library first looked:
 * read once (ringattn.h, ra_gemm), so that every call of a process, on
 * any thread, runs on the same engine whatever setenv does later. A value
 * longer than the buffer names no engine either way. */
static char env_value[64];
static atomic_int env_state; /* 0: not read, 1: being read, 2: read */

static const char *gemm_env_value(void)
{
    int unread = 0;
    if (atomic_compare_exchange_strong(&env_state, &unread, 1)) {
        const char *env = getenv(RA_GEMM_ENV);
        snprintf(env_value, sizeof env_value, "%s", env ? env : "");
        atomic_store(&env_state, 2);
    }
    while (atomic_load(&env_state) != 2)
        ; /* another thread's getenv and copy: a few instructions */
    return env_value;
}

ra_status ra_gemm_env_parse(const char *env, ra_gemm *out)
{
    ra_gemm g = RA_GEMM_AUTO;
    *out = ra_gemm_resolve(RA_GEMM_AUTO);
    if (!env || !env[0])
        return RA_OK;
    if (ra_gemm_parse(env, &g) != RA_OK || !ra_gemm_available(g)) {
        char built[128] = "";
        size_t at = 0;
        for (int k = 0; strcmp(ra_gemm_name((ra_gemm)k), "unknown") != 0 &&
                        at < sizeof built; k++)
            if (ra_gemm_available((ra_gemm)k))
                at += (size_t)snprintf(built + at, sizeof built - at, "%s%s",
                                       at ? ", " : "",
                                       ra_gemm_name((ra_gemm)k));
        return ra_error_set(RA_ERR_ARG, "%s=%s: not an engine this build "
                            "has (%s)", RA_GEMM_ENV, env, built);
    }
    *out = ra_gemm_resolve(g);
    return RA_OK;
}

ra_status ra_gemm_env(ra_gemm *out)
{
    return ra_gemm_env_parse(gemm_env_value(), out);
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
