/* bench_yard.c: bench's and probe's yardsticks beside oneDNN's matmul
 * (bench_measure.c): the core's physical peak in the run's precision and
 * the products-only rate of the problem's own tile products
 * (bench_measure.h). Every rank measures at once, so that the ranks
 * compete for the cores as in a pass; a rank that cannot measure makes
 * the sum 0 (n/a), never a partial figure. */
#include <math.h>
#include <stdio.h>

#include "bench_measure.h"
#include "core_peak.h"
#include "gemm_env.h"
#include "kernel.h"
#include "products.h"

/* Seconds each rank's loop runs, about the seconds of one timed run of
 * the products, and the timed runs. */
#define CORE_SECONDS 0.2
#define PRODUCT_SECONDS 0.05
enum { PRODUCT_REPS = 3, PRODUCT_TILES_MIN = 4, PRODUCT_TILES_MAX = 32 };

/* The sum over the ranks of mine, or 0 when some rank has 0. */
static double sum_or_none(MPI_Comm comm, double mine)
{
    double sum = 0.0, least = 0.0;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Allreduce(&mine, &least, 1, MPI_DOUBLE, MPI_MIN, comm);
    return least > 0 ? sum : 0.0;
}

void bench_core_peak(MPI_Comm comm, int threads, int bf16, int skip,
                     bench_yard *y)
{
    y->core = 0.0;
    if (skip) {
        snprintf(y->loop, sizeof y->loop, "not measured (--no-yardsticks)");
        return;
    }
    const char *why = "";
    const ra_loop l = ra_loop_for(bf16, &why);
    MPI_Barrier(comm);
    const double mine = l < RA_LOOP_COUNT ? ra_loop_rate(l, CORE_SECONDS)
                                          : 0.0;
    y->core = sum_or_none(comm, mine * (threads > 0 ? threads : 1));
    if (l == RA_LOOP_COUNT)
        snprintf(y->loop, sizeof y->loop, "n/a: %s", why);
    else
        snprintf(y->loop, sizeof y->loop, "%s%s", ra_loop_name(l),
                 y->core > 0 ? "" : " (another rank could not run it)");
}

/* The kernel's block of s under p as ra_kernel_mm_shapes reads it. */
static ra_block shapes_block(const ra_shape *s, const ra_params *p)
{
    ra_block blk = {0};
    blk.H = s->H;
    blk.G = s->G;
    blk.D = s->D;
    blk.Dv = s->Dv;
    blk.score = p->num.score;
    blk.alpha = (float)(p->num.score == RA_SCORE_GAUSSIAN
                            ? M_LOG2E / (p->num.sigma * p->num.sigma)
                            : ra_params_scale(p, s) * M_LOG2E);
    ra_params_tiles(p, s, &blk.block_q, &blk.block_kv);
    return blk;
}

/* This rank's products-only GFLOP/s on one thread (0: could not); every
 * rank makes the same barriers. */
static double products_mine(MPI_Comm comm, const ra_shape *s,
                            const ra_params *p, int backward)
{
    const ra_block blk = shapes_block(s, p);
    ra_mm_shape shapes[RA_MM16_MAX];
    const int count = ra_kernel_mm_shapes(&blk, backward, shapes);
    int64_t tiles = blk.block_kv > 0 ? s->M / blk.block_kv : 0;
    tiles = tiles < PRODUCT_TILES_MIN ? PRODUCT_TILES_MIN
            : tiles > PRODUCT_TILES_MAX ? PRODUCT_TILES_MAX : tiles;
    ra_products *x = NULL;
    const int bf16 = p->num.precision == RA_PRECISION_BF16;
    if (count == 0 || ra_products_open(ra_gemm_pick(p->exec.gemm), bf16,
                                       !backward, shapes, count, &x) != RA_OK) {
        ra_error_clear();
        x = NULL;
    }
    const int saved = ra_blas_enter(1);
    double t[PRODUCT_REPS], flops = 0.0, warm = MPI_Wtime();
    if (x) /* warm-up, and enough rounds for PRODUCT_SECONDS a run */
        ra_products_run(x, tiles);
    warm = MPI_Wtime() - warm;
    if (warm > 0 && warm < PRODUCT_SECONDS)
        tiles = (int64_t)ceil(tiles * PRODUCT_SECONDS / warm);
    MPI_Allreduce(MPI_IN_PLACE, &tiles, 1, MPI_INT64_T, MPI_MAX, comm);
    for (int rep = 0; rep < PRODUCT_REPS; rep++) {
        MPI_Barrier(comm);
        const double t0 = MPI_Wtime();
        flops = x ? ra_products_run(x, tiles) : 0.0;
        t[rep] = MPI_Wtime() - t0;
    }
    ra_blas_leave(saved);
    const int made = x != NULL;
    ra_products_close(x);
    const double sec = bench_median(t, PRODUCT_REPS);
    return made && sec > 0 ? flops / sec * 1e-9 : 0.0;
}

double bench_products_rate(MPI_Comm comm, const ra_shape *s,
                           const ra_params *p, int backward, int skip)
{
    if (skip)
        return 0.0;
    const double mine = products_mine(comm, s, p, backward);
    const int threads = ra_params_threads(p);
    return sum_or_none(comm, mine * (threads > 0 ? threads : 1));
}
