/* bench_measure.c: the measurements of `ringattn bench` besides the pass
 * itself: medians and spreads over ranks, peak RSS, the two yardsticks
 * (OpenBLAS sgemm and oneDNN's matmul peak) and a comm-only ring for
 * bandwidth (bench_measure.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "bench_measure.h"
#include "internal.h"
#include "peak.h"

/* Timed passes of the comm-only ring, after one warm-up. */
enum { TIMED_REPS = 3 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *a, int64_t n)
{
    qsort(a, (size_t)n, sizeof *a, cmp_double);
    return n % 2 ? a[n / 2] : 0.5 * (a[n / 2 - 1] + a[n / 2]);
}

spread bench_spread(MPI_Comm comm, double x)
{
    int P;
    MPI_Comm_size(comm, &P);
    spread s;
    MPI_Allreduce(&x, &s.min, 1, MPI_DOUBLE, MPI_MIN, comm);
    MPI_Allreduce(&x, &s.max, 1, MPI_DOUBLE, MPI_MAX, comm);
    MPI_Allreduce(&x, &s.avg, 1, MPI_DOUBLE, MPI_SUM, comm);
    s.avg /= P;
    return s;
}

int bench_rss_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

double bench_rss_peak(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024.0;
}

/* GFLOP/s of an SGEMM_N^3 sgemm on this rank's threads, all ranks at once:
 * the median of TIMED_REPS after a warm-up; every rank runs the same number
 * of barriers whether or not its memory was granted (0 GFLOP/s then). */
static double bench_sgemm_rate(MPI_Comm comm, int threads)
{
    const size_t n = SGEMM_N;
    float *a = malloc(n * n * sizeof(float) * 3);
    float *b = a ? a + n * n : NULL, *c = a ? b + n * n : NULL;
    if (a)
        ra_random_normal(5, 0, 0, (int64_t)(2 * n * n), a);
    const int saved = ra_blas_enter(threads);
    double t[TIMED_REPS];
    for (int rep = -1; rep < TIMED_REPS; rep++) {
        MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        if (a)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n,
                        (int)n, (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f, c,
                        (int)n);
        if (rep >= 0)
            t[rep] = MPI_Wtime() - t0;
    }
    ra_blas_leave(saved);
    free(a);
    return a ? 2.0 * (double)n * n * n / bench_median(t, TIMED_REPS) * 1e-9
             : 0.0;
}

/* GFLOP/s of an SGEMM_N^3 oneDNN matmul (engine/peak.h) on this rank's
 * threads, all ranks at once (they compete for cores and memory as in a
 * pass), in fp32 or (bf16) bf16 x bf16 -> fp32: the peak yardstick. 0 when
 * it could not run (no oneDNN in the build, no bf16 matmul on the CPU);
 * impl (cap bytes) gets oneDNN's implementation, or why not. Every rank
 * makes the same barriers. */
static double bench_peak_rate(MPI_Comm comm, int threads, int bf16,
                              char *impl, size_t cap)
{
    const char *why = "";
    ra_peak *pk = ra_peak_open(SGEMM_N, bf16, threads, &why);
    int bad = pk == NULL;
    double t[TIMED_REPS];
    snprintf(impl, cap, "%s", pk ? ra_peak_impl(pk) : why);
    for (int rep = -1; rep < TIMED_REPS; rep++) {
        MPI_Barrier(comm);
        const double t0 = MPI_Wtime();
        bad |= pk && ra_peak_run(pk) != 0;
        if (rep >= 0)
            t[rep] = MPI_Wtime() - t0;
    }
    const double rate = bad ? 0.0
                            : ra_peak_flops(pk) / bench_median(t, TIMED_REPS) *
                                  1e-9;
    if (pk && bad)
        snprintf(impl, cap, "oneDNN failed running the matmul");
    ra_peak_close(pk);
    return rate;
}

void bench_yardsticks(MPI_Comm comm, int threads, int bf16, int skip,
                      bench_yard *y)
{
    if (skip) {
        *y = (bench_yard){.bf16 = bf16, .skipped = 1};
        snprintf(y->impl, sizeof y->impl, "not measured (--no-yardsticks)");
        bench_core_peak(comm, threads, bf16, 1, y);
        return;
    }
    *y = (bench_yard){.bf16 = bf16};
    const double mine[2] = {
        bench_sgemm_rate(comm, threads),
        bench_peak_rate(comm, threads, bf16, y->impl, sizeof y->impl)};
    double sum[2], least;
    MPI_Allreduce(mine, sum, 2, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Allreduce(&mine[1], &least, 1, MPI_DOUBLE, MPI_MIN, comm);
    y->sgemm = sum[0];
    y->peak = least > 0 ? sum[1] : 0.0; /* every rank's, or none */
    if (least <= 0 && mine[1] > 0)
        snprintf(y->impl, sizeof y->impl, "another rank could not run it");
    y->bf16 = bf16;
    bench_core_peak(comm, threads, bf16, 0, y);
}

/* The floats rank i holds of the key/value blocks under a layout. */
static int64_t block_floats(const ra_shape *s, const ra_params *p,
                            ra_layout lay, int i, int P)
{
    return s->B * ra_params_slice(p, lay, s->M, i, P).count * s->G *
           (s->D + s->Dv);
}

/* What a block count needs: the problem and the layout. */
typedef struct {
    const ra_shape *s;
    const ra_params *p;
    ra_layout lay;
    int P;
} ring_blocks;

/* The floats rank sends at step t: the block that started at rank - t. */
static int64_t ring_block_count(void *ctx, int rank, int t)
{
    const ring_blocks *b = ctx;
    return block_floats(b->s, b->p, b->lay, ((rank - t) % b->P + b->P) % b->P,
                        b->P);
}

/* One timed pass of P - 1 steps on the ring loop; the bytes this rank
 * sent into *bytes; -1 when a transfer failed. */
static double ring_pass(MPI_Comm comm, const bench_ring *ring, double *bytes)
{
    int64_t sent = 0;
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    const ra_status st = bench_ring_run(comm, "bench's comm-only ring", ring,
                                        &sent);
    const double secs = MPI_Wtime() - t0;
    *bytes = 4.0 * (double)sent;
    return st == RA_OK ? secs : -1.0;
}

double bench_ring_bandwidth(MPI_Comm comm, const ra_shape *s,
                            const ra_params *p, ra_layout lay)
{
    int P;
    MPI_Comm_size(comm, &P);
    if (P == 1)
        return 0.0;
    int64_t cap = 0;
    for (int i = 0; i < P; i++)
        cap = block_floats(s, p, lay, i, P) > cap ? block_floats(s, p, lay, i, P)
                                                  : cap;
    float *buf = calloc((size_t)(2 * cap + 2), sizeof(float));
    int bad = buf == NULL, any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    ring_blocks blocks = {s, p, lay, P};
    const bench_ring ring = {P - 1, ring_block_count, &blocks, buf, cap + 1};
    double t[TIMED_REPS], bytes = 0;
    for (int rep = -1; rep < TIMED_REPS && !any_bad; rep++) {
        const double secs = ring_pass(comm, &ring, &bytes);
        bad |= secs < 0;
        if (rep >= 0)
            t[rep] = secs;
    }
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    free(buf);
    const double secs = any_bad ? 0 : bench_median(t, TIMED_REPS);
    return secs > 0 ? bytes / secs * 1e-9 : 0.0;
}

ra_status bench_reps_alloc(bench_reps *r, int64_t reps, const char *command)
{
    memset(r, 0, sizeof *r);
    if (!(r->wall = malloc(sizeof(double) * (size_t)reps * 5)))
        return ra_error_set(RA_ERR_NOMEM, "%s: out of memory for timings",
                            command);
    r->busy = r->wall + reps;
    r->wait = r->busy + reps;
    r->tbusy = r->wait + reps;
    r->job = r->tbusy + reps;
    return RA_OK;
}

void bench_reps_free(bench_reps *r)
{
    free(r->wall);
    memset(r, 0, sizeof *r);
}

void bench_reps_record(bench_reps *r, int64_t rep)
{
    const ra_timing *tm = &r->tm;
    r->wall[rep] = tm->total;
    r->busy[rep] = tm->compute;
    r->wait[rep] = tm->total > 0 ? tm->comm_wait / tm->total : 0;
    r->tbusy[rep] = tm->thread_busy_min > 0
                        ? tm->thread_busy_max / tm->thread_busy_min
                        : 0;
}

void bench_times(MPI_Comm comm, int64_t reps, bench_reps *r,
                 bench_result *res)
{
    int P = 1;
    MPI_Comm_size(comm, &P);
    /* the job's time of each rep is its slowest rank's */
    MPI_Allreduce(r->wall, r->job, (int)reps, MPI_DOUBLE, MPI_MAX, comm);
    res->seconds_median = bench_median(r->job, reps);
    res->rank_seconds = bench_spread(comm, bench_median(r->wall, reps));
    res->busy_seconds = bench_spread(comm, bench_median(r->busy, reps));
    res->thread_busy = bench_spread(comm, bench_median(r->tbusy, reps)).max;
    res->comm_wait_fraction =
        bench_spread(comm, bench_median(r->wait, reps)).max;
    const spread sent = bench_spread(comm, (double)r->tm.bytes_sent);
    res->bytes_sent = sent.max;
    res->bytes_sent_avg = sent.avg;
    const spread cross = bench_spread(comm, (double)r->tm.bytes_cross_node);
    res->cross_bytes = cross.max;
    res->cross_bytes_total = cross.avg * P;
    res->peak_rss = bench_spread(comm, r->rss);
}
