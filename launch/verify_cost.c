/* verify_cost.c: see verify_cost.h. The rates are taken on the spot (a
 * 384^3 dgemm and 2^20 exp, a few milliseconds), so the prediction is as
 * loaded as the machine the check is about to run on. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "ref_block.h"
#include "verify_cost.h"

/* RATE_EXP <= 3 RATE_N^2: the exp run reuses the dgemm's operands. */
enum { RATE_N = 384, RATE_EXP = 1 << 18, RATE_REPS = 3 };

double verify_pair_fraction(int causal, int window, int64_t left,
                            int64_t right, int64_t M)
{
    double f = 1.0;
    if (window && left >= 0 && right >= 0)
        f = (double)(left + right + 1) / (double)(M > 0 ? M : 1);
    if (causal)
        f = f < 0.5 ? f : 0.5 + 2048.0 / (double)(M > 0 ? M : 1);
    return f < 1.0 ? f : 1.0;
}

/* This rank's fp64 multiply-adds per second (dgemm, one thread) and exp
 * per second: the best of a few short runs. */
static void fp64_rates(double *madd, double *exps)
{
    const size_t n = RATE_N;
    double *a = malloc(sizeof(double) * n * n * 3);
    *madd = *exps = 0.0;
    if (!a)
        return;
    for (size_t i = 0; i < n * n * 3; i++)
        a[i] = (double)(i % 7) * 0.125 - 0.375;
    const int blas = ra_blas_enter(1);
    for (int r = 0; r < RATE_REPS; r++) {
        double t = MPI_Wtime();
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n,
                    (int)n, 1.0, a, (int)n, a + n * n, (int)n, 0.0,
                    a + 2 * n * n, (int)n);
        t = MPI_Wtime() - t;
        *madd = t > 0 && (double)(n * n * n) / t > *madd
                    ? (double)(n * n * n) / t : *madd;
        for (size_t i = 0; i < RATE_EXP; i++)
            a[i] = -(double)(i & 1023) * 0x1p-6;
        t = MPI_Wtime();
        ra_ref_exp(a, RATE_EXP);
        t = MPI_Wtime() - t;
        *exps = t > 0 && RATE_EXP / t > *exps ? RATE_EXP / t : *exps;
    }
    ra_blas_leave(blas);
    free(a);
}

void verify_cost_print(const cli_ctx *ctx, const char *what, double madds,
                       double exps)
{
    double mine[2] = {madds, exps}, most[2] = {madds, exps}, rate[2];
    fp64_rates(&rate[0], &rate[1]);
    MPI_Allreduce(mine, most, 2, MPI_DOUBLE, MPI_MAX, ctx->comm);
    if (ctx->rank != 0)
        return;
    const double secs = (rate[0] > 0 ? most[0] / rate[0] : 0) +
                        (rate[1] > 0 ? most[1] / rate[1] : 0);
    printf("# %s: predicted cost per rank %.3g fp64 multiply-adds and %.3g "
           "exp, about %.2f s at the %.2f G multiply-adds/s and %.2f G exp/s "
           "this core measures now\n", what, most[0], most[1], secs,
           rate[0] * 1e-9, rate[1] * 1e-9);
    fflush(stdout);
}
