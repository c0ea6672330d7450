/* gemm_env.h: RINGATTN_GEMM, the engine a call's RA_GEMM_AUTO stands for
 * (ringattn.h, ra_gemm). engine/ reads no environment (docs/DESIGN.md):
 * the calls resolve the engine here and hand the kernels a named one. */
#ifndef RA_GEMM_ENV_H
#define RA_GEMM_ENV_H

#include <mpi.h>

#include "ringattn.h"

/* The variable's name, for messages and documentation. */
#define RA_GEMM_ENV "RINGATTN_GEMM"

/* The engine RA_GEMM_AUTO stands for into out: the one RINGATTN_GEMM
 * names (read once per process, at the first call of this function),
 * else (unset, empty or auto) the build's
 * (ra_gemm_resolve: oneDNN when built with it, else OpenBLAS). RA_ERR_ARG,
 * naming the variable and its value, when the value is no engine name or
 * an engine this build lacks; out then holds the build's engine. */
ra_status ra_gemm_env(ra_gemm *out);
/* ra_gemm_env for the variable's value env (NULL: unset), whatever the
 * process holds: the rule alone, for the tests. */
ra_status ra_gemm_env_parse(const char *env, ra_gemm *out);

/* The engine a call runs for gemm: gemm itself when named (the caller's
 * choice wins over the variable), RA_GEMM_AUTO as ra_gemm_env resolves
 * it (a refused value, which the call's checks have refused, reads as
 * the build's engine). */
ra_gemm ra_gemm_pick(ra_gemm gemm);

/* Collective over comm: RA_OK when every rank runs the same engine for
 * gemm (always when gemm names one), else RA_ERR_ARG on every rank alike,
 * naming the variable: the environment reaches each node separately, so
 * RINGATTN_GEMM set on one node only would split the ranks silently. */
ra_status ra_gemm_agree(MPI_Comm comm, ra_gemm gemm);

#endif
