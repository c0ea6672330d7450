/* cmd_bench.c: `ringattn bench`: the forward pass on in-memory random
 * inputs, measured honestly: warm-up passes, barriers before each timed
 * pass, per-rank min/avg/max, the same processes' large-sgemm rate as the
 * yardstick, a comm-only ring for bandwidth, peak RSS, and a sampled fp64
 * check of every configuration's output. Rank 0 alone prints. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "baseline.h"
#include "bench.h"
#include "internal.h"
#include "kernel.h"

int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);

static const char bench_help[] =
    "usage: mpirun -np P ringattn bench [options]\n"
    "\n"
    "Times the forward pass on random in-memory inputs (no file I/O) on the\n"
    "ranks it was launched with and prints one row per configuration.\n"
    "\n"
    "  --batch B --heads H --kv-heads G --dim D --dim-v Dv   as in gen\n"
    "  --seq LIST       query lengths, comma separated (default 4096)\n"
    "  --seq-kv M       key length (default: each N)\n"
    "  --causal --window L[,R] --scale S --block-q N --block-kv N\n"
    "  --layout NAME --threads T     as in run\n"
    "  --lens random    random padding lengths q_lens, kv_lens in [0, len]\n"
    "  --segments AVG   random packed sequences of mean length AVG\n"
    "  --score NAME --sigma S   dot (default), gaussian or additive\n"
    "  --additive-hidden A      hidden size of random additive weights (64)\n"
    "  --mode MODE      ring (default), naive (materialising baseline: gather\n"
    "                   K/V, full score matrix, libm expf), or both\n"
    "  --no-poll        do not progress transfers between tiles (shows what\n"
    "                   overlap is worth)\n"
    "  --warmup W       untimed passes first (default 1)\n"
    "  --reps R         timed passes (default 5); the median is reported\n"
    "  --check-rows K   query rows per rank checked in fp64 (default 3)\n"
    "  --seed S         input seed (default 1)\n"
    "  --json FILE      also write the rows as JSON\n"
    "  --csv FILE       also write the rows as CSV\n"
    "  --help           this text\n"
    "\n"
    "Columns: time_s is the median over reps of the slowest rank's wall time;\n"
    "rank_min/max are the fastest and slowest ranks' medians; GFLOP/s counts\n"
    "useful FLOPs (2*(D+Dv) per visible query-key pair, counted exactly under\n"
    "causal, window, lens and segments); busy is the slowest rank's compute\n"
    "time over the fastest's (load balance); sgemm is the summed rate of a 2048^3 sgemm run by\n"
    "every rank at once on the same threads; ratio = GFLOP/s / sgemm; wait%\n"
    "is the exposed (not total) time blocked on ring transfers, worst rank;\n"
    "MB_sent is the busiest rank's per pass (JSON: also the mean); MB_xnode\n"
    "is the part of it sent to another node, MB_xn_all that summed over the\n"
    "ranks (ring mode); ring_GB/s is a comm-only ring of the same\n"
    "messages; rss_MB is the worst rank's peak resident memory during the\n"
    "timed passes; model_MB is its slices + two ring buffers + tiles;\n"
    "rel_err is ||o - ref|| / ||ref|| on the checked rows, PASS below 1e-5.\n";

enum { MAX_SEQS = 64, SGEMM_N = 2048, RING_PART = 1 << 30 };

typedef struct {
    cli_shape cs;
    ra_params p;
    int64_t seqs[MAX_SEQS];
    int nseq;
    int64_t warmup, reps, check_rows, seed;
    int lens;             /* random padding lengths */
    int layout_auto;      /* the layout was chosen, not given */
    int64_t additive_hidden; /* A of the random additive weights */
    float *additive_mem;  /* w_q (A, D) | w_k (A, D) | w_v (A) */
    ra_additive additive;
    int64_t segment_avg;  /* random packed segments of this mean length */
    int ring, naive;
    const char *json, *csv;
} bench_opts;

/* ---- small measurement helpers ---------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of a[0..n), reordering a. */
static double median(double *a, int64_t n)
{
    qsort(a, (size_t)n, sizeof *a, cmp_double);
    return n % 2 ? a[n / 2] : 0.5 * (a[n / 2 - 1] + a[n / 2]);
}

static spread spread_of(MPI_Comm comm, double x)
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

/* Resets the kernel's peak-RSS mark to the current RSS (Linux >= 4.0);
 * returns 0 when it could. */
static int peak_rss_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* VmHWM in bytes, or 0 when unknown. */
static double peak_rss_bytes(void)
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

/* GFLOP/s of a large square sgemm on this rank's threads, all ranks at
 * once (median of 3 after a warm-up); summed over ranks by the caller. */
static double sgemm_rate(MPI_Comm comm, int threads)
{
    const size_t n = SGEMM_N;
    float *a = malloc(n * n * sizeof(float) * 3);
    if (!a)
        return 0.0;
    float *b = a + n * n, *c = b + n * n;
    ra_random_normal(5, 0, 0, (int64_t)(2 * n * n), a);
    const int saved = openblas_get_num_threads();
    openblas_set_num_threads(threads);
    double t[3];
    for (int rep = -1; rep < 3; rep++) {
        MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n,
                    (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f, c, (int)n);
        if (rep >= 0)
            t[rep] = MPI_Wtime() - t0;
    }
    openblas_set_num_threads(saved);
    free(a);
    return 2.0 * (double)n * n * n / median(t, 3) * 1e-9;
}

/* The part of a count-long message starting at element at: at most
 * RING_PART elements, 0 past its end. */
static int64_t part_of(int64_t count, int64_t at)
{
    return count <= at ? 0 : count - at < RING_PART ? count - at : RING_PART;
}

/* Comm-only ring of whole blocks, as an unmasked pass sends them: GB/s per
 * rank, the link speed the ring's transfers can hide behind. Blocks over
 * RING_PART floats go in parts, MPI counts being int. */
static double ring_bandwidth(MPI_Comm comm, const ra_shape *s, ra_layout lay)
{
    int P, r;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &r);
    if (P == 1)
        return 0.0;
    const int64_t row = s->G * (s->D + s->Dv);
    int64_t cap = 0;
    for (int i = 0; i < P; i++) {
        int64_t c = s->B * ra_layout_slice(lay, s->M, i, P).count * row;
        cap = c > cap ? c : cap;
    }
    float *buf = calloc((size_t)(2 * cap + 2), sizeof(float));
    if (!buf)
        return 0.0;
    double t[3], bytes = 0;
    for (int rep = -1; rep < 3; rep++) {
        MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        bytes = 0;
        for (int step = 0; step + 1 < P; step++) {
            int src = (r - step + P) % P, next = (r - step - 1 + P) % P;
            int64_t sc = s->B * ra_layout_slice(lay, s->M, src, P).count * row;
            int64_t rc = s->B * ra_layout_slice(lay, s->M, next, P).count * row;
            float *out = buf + (step & 1) * cap, *in = buf + ((step + 1) & 1) * cap;
            for (int64_t at = 0; at < sc || at < rc; at += RING_PART) {
                const int sn = (int)part_of(sc, at), rn = (int)part_of(rc, at);
                MPI_Sendrecv(out + (sn ? at : 0), sn, MPI_FLOAT, (r + 1) % P,
                             11, in + (rn ? at : 0), rn, MPI_FLOAT,
                             (r - 1 + P) % P, 11, comm, MPI_STATUS_IGNORE);
            }
            bytes += 4.0 * (double)sc;
        }
        if (rep >= 0)
            t[rep] = MPI_Wtime() - t0;
    }
    free(buf);
    double secs = median(t, 3);
    return secs > 0 ? bytes / secs * 1e-9 : 0.0;
}

/* ---- the fp64 check ----------------------------------------------------- */

/* Regenerates row j of (b, *, head, dim) of stream `stream` as doubles. */
static void regen_row(const bench_opts *o, uint64_t stream, int64_t len,
                      int64_t heads, int64_t dim, int64_t b, int64_t j,
                      int64_t head, float *tmp, double *out)
{
    ra_random_normal((uint64_t)o->seed, stream,
                     (uint64_t)(((b * len + j) * heads + head) * dim), dim, tmp);
    for (int64_t d = 0; d < dim; d++)
        out[d] = tmp[d];
}

/* Mask data of one configuration, this rank's part. */
typedef struct {
    int64_t *q_lens, *kv_lens;   /* (B) or NULL */
    int64_t *q_seg, *kv_seg;     /* (B, n), (B, m) or NULL */
    ra_masks view;
} bench_masks;

static void bench_masks_free(bench_masks *bm)
{
    free(bm->q_lens);
    free(bm->kv_lens);
    free(bm->q_seg);
    free(bm->kv_seg);
    memset(bm, 0, sizeof *bm);
}

/* Generates the masks the options ask for, as `ringattn gen` would write
 * them (same streams), for this rank's slices. */
static int bench_masks_make(const bench_opts *o, const ra_shape *s,
                            const ra_slice *qs, const ra_slice *ks,
                            bench_masks *bm)
{
    memset(bm, 0, sizeof *bm);
    const uint64_t seed = (uint64_t)o->seed;
    if (o->lens) {
        bm->q_lens = malloc(sizeof(int64_t) * (size_t)s->B);
        bm->kv_lens = malloc(sizeof(int64_t) * (size_t)s->B);
        if (!bm->q_lens || !bm->kv_lens)
            return -1;
        ra_random_lens(seed, 3, s->B, s->N, bm->q_lens);
        ra_random_lens(seed, 4, s->B, s->M, bm->kv_lens);
    }
    if (o->segment_avg > 0) {
        bm->q_seg = malloc(sizeof(int64_t) * (size_t)(s->B * qs->count + 1));
        bm->kv_seg = malloc(sizeof(int64_t) * (size_t)(s->B * ks->count + 1));
        if (!bm->q_seg || !bm->kv_seg)
            return -1;
        ra_random_segments(seed, 5, s->B, s->N, o->segment_avg, qs, bm->q_seg);
        ra_random_segments(seed, s->N == s->M ? 5 : 6, s->B, s->M,
                           o->segment_avg, ks, bm->kv_seg);
    }
    bm->view = (ra_masks){bm->q_lens, bm->kv_lens, bm->q_seg, bm->kv_seg};
    return 0;
}

/* Segment ids of all M keys of batch b (contiguous), for checks and
 * counts; NULL without segments. */
static int64_t *all_kv_segments(const bench_opts *o, const ra_shape *s,
                                int64_t b)
{
    if (o->segment_avg <= 0)
        return NULL;
    const ra_slice all = {1, {{0, s->M, 1}}, s->M};
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(s->B * s->M));
    if (ids)
        ra_random_segments((uint64_t)o->seed, s->N == s->M ? 5 : 6, s->B,
                           s->M, o->segment_avg, &all, ids);
    if (ids && b > 0)
        memmove(ids, ids + b * s->M, sizeof(int64_t) * (size_t)s->M);
    return ids;
}

/* Visible (query, key) pairs of this rank's queries, exactly, under every
 * mask: segments are runs of equal ids (ra_random_segments numbers them in
 * order), so each row's keys are an interval intersected with its run. */
static double local_pairs(const bench_opts *o, const ra_shape *s,
                          const ra_slice *qs, const bench_masks *bm)
{
    const ra_params *p = &o->p;
    const int64_t diag = s->M - s->N, wide = INT64_MAX / 4;
    int64_t lo = p->window ? diag - p->window_left : -wide;
    int64_t hi = p->causal ? diag : wide;
    if (p->window && diag + p->window_right < hi)
        hi = diag + p->window_right;
    double pairs = 0;
    for (int64_t b = 0; b < s->B; b++) {
        int64_t *kseg = all_kv_segments(o, s, b);
        if (o->segment_avg > 0 && !kseg)
            return NAN;
        const int64_t q_len = bm->q_lens ? bm->q_lens[b] : s->N;
        const int64_t kv_len = bm->kv_lens ? bm->kv_lens[b] : s->M;
        int64_t run_a = 0, run_b = 0, run_id = -1; /* cached segment run */
        for (int64_t i = 0; i < qs->count; i++) {
            const int64_t qp = ra_slice_pos(qs, i);
            if (qp >= q_len)
                continue;
            int64_t first = qp + lo > 0 ? qp + lo : 0;
            int64_t last = qp + hi < kv_len - 1 ? qp + hi : kv_len - 1;
            if (kseg) {
                const int64_t id = bm->q_seg[b * qs->count + i];
                if (id != run_id) { /* find the keys with this id */
                    run_a = 0;
                    while (run_a < s->M && kseg[run_a] < id)
                        run_a++;
                    run_b = run_a;
                    while (run_b < s->M && kseg[run_b] == id)
                        run_b++;
                    run_id = id;
                }
                first = first > run_a ? first : run_a;
                last = last < run_b - 1 ? last : run_b - 1;
            }
            if (last >= first)
                pairs += (double)(last - first + 1);
        }
        free(kseg);
    }
    return pairs;
}

/* Checks up to check_rows local query rows of batch 0 and B - 1 (all heads)
 * against ra_reference_rows on regenerated inputs and masks; sums into err:
 * [0] |o - ref|^2, [1] |ref|^2, [2] max LSE error (inf: NaN or a -inf
 * mismatch, or the check could not run). */
static void check_output(const bench_opts *o, const ra_shape *s,
                         const ra_slice *qs, const bench_masks *bm,
                         const float *out, const float *lse, double err[3])
{
    const int64_t n = qs->count;
    if (n == 0 || o->check_rows == 0)
        return;
    const ra_params *p = &o->p;
    const ra_ref_score score = {p->score, ra_params_scale(p, s), p->sigma,
                                p->additive, s->D};
    const int64_t Dmax = s->D > s->Dv ? s->D : s->Dv;
    double *kd = malloc(sizeof(double) * (size_t)(s->M * s->D));
    double *vd = malloc(sizeof(double) * (size_t)(s->M * s->Dv));
    double *qd = malloc(sizeof(double) * (size_t)s->D);
    double *ref = malloc(sizeof(double) * (size_t)s->Dv);
    double *sc = malloc(sizeof(double) * (size_t)s->M);
    float *tmp = malloc(sizeof(float) * (size_t)Dmax);
    int64_t *kseg = NULL;
    if (!kd || !vd || !qd || !ref || !sc || !tmp) {
        err[2] = INFINITY; /* cannot check: fails the verdict */
        goto cleanup;
    }
    const int64_t batches[2] = {0, s->B - 1};
    for (int bi = 0; bi < (s->B > 1 ? 2 : 1); bi++) {
        const int64_t b = batches[bi];
        free(kseg);
        kseg = all_kv_segments(o, s, b);
        if (o->segment_avg > 0 && !kseg) {
            err[2] = INFINITY;
            goto cleanup;
        }
        for (int64_t g = 0; g < s->G; g++) {
            for (int64_t j = 0; j < s->M; j++) {
                regen_row(o, 1, s->M, s->G, s->D, b, j, g, tmp, kd + j * s->D);
                regen_row(o, 2, s->M, s->G, s->Dv, b, j, g, tmp, vd + j * s->Dv);
            }
            for (int64_t h = g * (s->H / s->G); h < (g + 1) * (s->H / s->G); h++) {
                for (int64_t c = 0; c < o->check_rows && c < n; c++) {
                    /* spread the rows: first, last, then evenly between */
                    int64_t i = c == 0 ? 0 : c == 1 ? n - 1
                                               : (c * n) / (o->check_rows + 1);
                    int64_t gi = ra_slice_pos(qs, i);
                    regen_row(o, 0, s->N, s->H, s->D, b, gi, h, tmp, qd);
                    ra_mask mk = {.causal = p->causal, .diag = s->M - s->N,
                                  .window = p->window, .left = p->window_left,
                                  .right = p->window_right, .qpos = &gi,
                                  .q_lens = bm->q_lens ? bm->q_lens + b : NULL,
                                  .kv_lens = bm->kv_lens ? bm->kv_lens + b : NULL,
                                  .q_seg = kseg ? bm->q_seg + b * n + i : NULL,
                                  .k_seg = kseg};
                    double lref;
                    ra_reference_scored(&score, 1, s->M, s->D, s->Dv, &mk, qd,
                                      s->D, kd, s->D, vd, s->Dv, ref, s->Dv,
                                      &lref, sc);
                    const float *orow = out + ((b * n + i) * s->H + h) * s->Dv;
                    for (int64_t d = 0; d < s->Dv; d++) {
                        double e = orow[d] - ref[d];
                        err[0] += e * e;
                        err[1] += ref[d] * ref[d];
                        if (isnan(orow[d]))
                            err[2] = INFINITY;
                    }
                    double l = lse[(b * s->H + h) * n + i];
                    if (isinf(lref) || !isfinite(l))
                        err[2] = fmax(err[2], isinf(lref) && isinf(l) && l < 0
                                                  ? 0.0 : INFINITY);
                    else
                        err[2] = fmax(err[2], fabs(l - lref) /
                                                  fmax(1.0, fabs(lref)));
                }
            }
        }
    }
cleanup:
    free(kseg);
    free(kd);
    free(vd);
    free(qd);
    free(ref);
    free(sc);
    free(tmp);
}

/* ---- one configuration ---------------------------------------------------- */

static ra_status run_config(const cli_ctx *ctx, const bench_opts *o,
                            const ra_shape *s, int naive, double sgemm,
                            bench_result *res)
{
    MPI_Comm comm = ctx->comm;
    const ra_layout lay = o->p.layout; /* resolved in cmd_bench */
    const ra_slice qs = ra_layout_slice(lay, s->N, ctx->rank, ctx->nranks);
    const ra_slice ks = ra_layout_slice(lay, s->M, ctx->rank, ctx->nranks);
    const size_t nq = (size_t)(s->B * qs.count * s->H * s->D);
    const size_t nk = (size_t)(s->B * ks.count * s->G * s->D);
    const size_t nv = (size_t)(s->B * ks.count * s->G * s->Dv);
    const size_t no = (size_t)(s->B * qs.count * s->H * s->Dv);
    const size_t nl = (size_t)(s->B * s->H * qs.count);
    const size_t counts[5] = {nq, nk, nv, no, nl};
    const size_t bytes = cli_alloc_bytes(counts, 5, sizeof(float));
    float *mem = bytes ? malloc(bytes) : NULL;
    double *wall = malloc(sizeof(double) * (size_t)o->reps * 3);
    bench_masks bm;
    int bad = !mem || !wall || bench_masks_make(o, s, &qs, &ks, &bm) != 0;
    int any_bad;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    if (any_bad) {
        free(mem);
        free(wall);
        bench_masks_free(&bm);
        return ra_error_set(RA_ERR_NOMEM, "bench: cannot allocate the slices "
                                          "for N=%lld", (long long)s->N);
    }
    float *q = mem, *k = q + nq, *v = k + nk, *out = v + nv, *lse = out + no;
    ra_random_slice((uint64_t)o->seed, 0, s->B, s->N, s->H * s->D, &qs, q);
    ra_random_slice((uint64_t)o->seed, 1, s->B, s->M, s->G * s->D, &ks, k);
    ra_random_slice((uint64_t)o->seed, 2, s->B, s->M, s->G * s->Dv, &ks, v);
    double *busy = wall + o->reps, *wait = busy + o->reps;

    ra_status st = RA_OK;
    ra_timing tm = {0};
    peak_rss_reset();
    for (int64_t rep = -o->warmup; rep < o->reps && st == RA_OK; rep++) {
        MPI_Barrier(comm);
        st = naive ? ra_baseline_forward(comm, s, &o->p, q, k, v, out, lse, &tm)
                   : ra_forward_ex(comm, s, &o->p, &bm.view, q, k, v, out, lse,
                                   &tm);
        if (rep >= 0) {
            wall[rep] = tm.total;
            busy[rep] = tm.compute;
            wait[rep] = tm.total > 0 ? tm.comm_wait / tm.total : 0;
        }
    }
    const double rss = peak_rss_bytes();
    if (st != RA_OK) {
        free(mem);
        free(wall);
        bench_masks_free(&bm);
        return st;
    }

    memset(res, 0, sizeof *res);
    res->s = *s;
    res->p = o->p;
    res->ranks = ctx->nranks;
    res->threads = ra_params_threads(&o->p);
    res->mode = naive ? "naive" : "ring";
    ra_params_tiles(&o->p, s, &res->block_q, &res->block_kv);
    double pairs = local_pairs(o, s, &qs, &bm), all_pairs = 0;
    MPI_Allreduce(&pairs, &all_pairs, 1, MPI_DOUBLE, MPI_SUM, comm);
    /* per visible pair: the score (2 D, or 4 A for additive with a tanh as
     * one operation) and 2 Dv for the values, as ra_forward_flops counts */
    const double score_ops = o->p.score == RA_SCORE_ADDITIVE
                                 ? 4.0 * (double)o->additive_hidden
                                 : 2.0 * (double)s->D;
    res->flops = (score_ops + 2.0 * (double)s->Dv) * (double)s->H * all_pairs;

    /* the job's time of each rep is its slowest rank's */
    double *job = malloc(sizeof(double) * (size_t)o->reps);
    MPI_Allreduce(wall, job, (int)o->reps, MPI_DOUBLE, MPI_MAX, comm);
    res->seconds_median = median(job, o->reps);
    free(job);
    res->rank_seconds = spread_of(comm, median(wall, o->reps));
    res->busy_seconds = spread_of(comm, median(busy, o->reps));
    res->comm_wait_fraction = spread_of(comm, median(wait, o->reps)).max;
    res->gflops = res->flops / res->seconds_median * 1e-9;
    res->sgemm_gflops = sgemm;
    const spread sent = spread_of(comm, (double)tm.bytes_sent);
    res->bytes_sent = sent.max;
    res->bytes_sent_avg = sent.avg;
    const spread cross = spread_of(comm, !naive && ctx->nodes.next_on_other_node
                                             ? (double)tm.bytes_sent : 0.0);
    res->cross_bytes = cross.max;
    res->cross_bytes_total = cross.avg * ctx->nranks;
    res->nodes = ctx->nodes.nodes;
    res->ranks_per_node = ctx->nodes.ranks_per_node_max;
    res->node_aware = ctx->node_aware;
    res->peak_rss = spread_of(comm, rss);

    int64_t mmax = 0;
    for (int i = 0; i < ctx->nranks; i++) {
        int64_t c = ra_layout_slice(lay, s->M, i, ctx->nranks).count;
        mmax = c > mmax ? c : mmax;
    }
    double model = (double)(nq + nk + nv + no + nl) * 4.0;
    if (naive)
        model += 4.0 * (double)(s->B * s->M * s->G * (s->D + s->Dv)) +
                 4.0 * (double)(qs.count * s->M);
    else
        model += 2.0 * 4.0 * (double)(s->B * mmax * s->G * (s->D + s->Dv)) +
                 4.0 * res->threads *
                     (double)(res->block_q * (res->block_kv + s->Dv + 2));
    res->model_bytes = spread_of(comm, model).max;
    res->ring_gbps = naive ? 0.0 : ring_bandwidth(comm, s, lay);
    res->steps = naive ? 1 : tm.steps;
    res->lens = o->lens;
    res->segment_avg = o->segment_avg;

    double err[3] = {0, 0, 0}, gerr[3];
    check_output(o, s, &qs, &bm, out, lse, err);
    MPI_Allreduce(err, gerr, 2, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Allreduce(&err[2], &gerr[2], 1, MPI_DOUBLE, MPI_MAX, comm);
    res->max_rel_error = gerr[1] > 0 ? sqrt(gerr[0] / gerr[1]) : sqrt(gerr[0]);
    res->max_lse_error = gerr[2];
    res->pass = res->max_rel_error < 1e-5 && res->max_lse_error < 1e-5;
    free(mem);
    free(wall);
    bench_masks_free(&bm);
    return RA_OK;
}

/* ---- options ---------------------------------------------------------------- */

/* Parses "1024,2048,4096" into o->seqs: no empty item, none after a
 * trailing comma, at least one. */
static int parse_seq_list(bench_opts *o, const char *text)
{
    o->nseq = 0;
    const char *p = text;
    for (;;) {
        char item[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || o->nseq == MAX_SEQS) {
            ra_error_set(RA_ERR_ARG, "--seq: bad list '%s' (expected up to %d "
                                     "comma-separated lengths)", text, MAX_SEQS);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (cli_parse_i64("--seq", item, 1, (int64_t)1 << 40,
                          &o->seqs[o->nseq++]) != 0)
            return -1;
        p += len;
        if (*p == '\0')
            return 0;
        p++; /* the comma */
    }
}

static int parse_bench(bench_opts *o, int argc, char **argv, int *help)
{
    for (int i = 1; i < argc; i++) {
        const char *val;
        int taken = cli_params_flag(&o->p, argc, argv, &i);
        if (taken == 0 && strcmp(argv[i], "--seq") != 0)
            taken = cli_shape_flag(&o->cs, argc, argv, &i);
        if (taken < 0)
            return -1;
        if (taken)
            continue;
        if (strcmp(argv[i], "--help") == 0) {
            *help = 1;
            return 0;
        } else if (strcmp(argv[i], "--seq") == 0) {
            if (!(val = cli_value(argc, argv, &i)) || parse_seq_list(o, val))
                return -1;
        } else if (strcmp(argv[i], "--mode") == 0) {
            if (!(val = cli_value(argc, argv, &i)))
                return -1;
            o->ring = strcmp(val, "ring") == 0 || strcmp(val, "both") == 0;
            o->naive = strcmp(val, "naive") == 0 || strcmp(val, "both") == 0;
            if (!o->ring && !o->naive) {
                ra_error_set(RA_ERR_ARG, "--mode: '%s' is not ring, naive or "
                                         "both", val);
                return -1;
            }
        } else if (strcmp(argv[i], "--no-poll") == 0) {
            o->p.no_poll = 1;
        } else if (strcmp(argv[i], "--lens") == 0) {
            if (!(val = cli_value(argc, argv, &i)))
                return -1;
            if (strcmp(val, "random") != 0) {
                ra_error_set(RA_ERR_ARG, "--lens: '%s' is not 'random'", val);
                return -1;
            }
            o->lens = 1;
        } else if (strcmp(argv[i], "--additive-hidden") == 0) {
            if (!(val = cli_value(argc, argv, &i)) ||
                cli_parse_i64("--additive-hidden", val, 1, 1 << 16,
                              &o->additive_hidden) != 0)
                return -1;
        } else if (strcmp(argv[i], "--segments") == 0) {
            if (!(val = cli_value(argc, argv, &i)) ||
                cli_parse_i64("--segments", val, 1, (int64_t)1 << 40,
                              &o->segment_avg) != 0)
                return -1;
        } else if (strcmp(argv[i], "--warmup") == 0 ||
                   strcmp(argv[i], "--reps") == 0 ||
                   strcmp(argv[i], "--check-rows") == 0 ||
                   strcmp(argv[i], "--seed") == 0) {
            const char *opt = argv[i];
            int64_t *dst = strcmp(opt, "--warmup") == 0 ? &o->warmup
                           : strcmp(opt, "--reps") == 0 ? &o->reps
                           : strcmp(opt, "--seed") == 0 ? &o->seed
                                                        : &o->check_rows;
            int64_t lo = strcmp(opt, "--reps") == 0 ? 1 : 0;
            if (!(val = cli_value(argc, argv, &i)) ||
                cli_parse_i64(opt, val, lo, INT32_MAX, dst) != 0)
                return -1;
        } else if (strcmp(argv[i], "--json") == 0) {
            if (!(o->json = cli_value(argc, argv, &i)))
                return -1;
        } else if (strcmp(argv[i], "--csv") == 0) {
            if (!(o->csv = cli_value(argc, argv, &i)))
                return -1;
        } else {
            ra_error_set(RA_ERR_ARG, "bench: unknown option '%s' (see ringattn "
                                     "bench --help)", argv[i]);
            return -1;
        }
    }
    return 0;
}

static void print_echo(const cli_ctx *ctx, const bench_opts *o, double sgemm)
{
    const ra_shape *s = &o->cs.shape;
    printf("# ringattn bench %s\n", RA_VERSION_STRING);
    printf("# %-12s %d\n", "ranks", ctx->nranks);
    cli_print_job(ctx, 12);
    printf("# %-12s %d per rank\n", "threads", ra_params_threads(&o->p));
    printf("# %-12s B=%lld H=%lld G=%lld D=%lld Dv=%lld M=%s\n", "shape",
           (long long)s->B, (long long)s->H, (long long)s->G, (long long)s->D,
           (long long)s->Dv, o->cs.seq_kv_set ? "fixed" : "N");
    printf("# %-12s", "seq");
    for (int i = 0; i < o->nseq; i++)
        printf(" %lld", (long long)o->seqs[i]);
    printf("\n# %-12s %s\n", "causal", o->p.causal ? "yes (GFLOP/s count the "
                                                    "visible half only)"
                                                  : "no");
    if (o->p.window)
        printf("# %-12s left %lld, right %lld\n", "window",
               (long long)o->p.window_left, (long long)o->p.window_right);
    if (o->lens || o->segment_avg)
        printf("# %-12s%s%s\n", "masks", o->lens ? " random lens" : "",
               o->segment_avg ? " random segments" : "");
    if (o->segment_avg)
        printf("# %-12s mean length %lld\n", "segments",
               (long long)o->segment_avg);
    printf("# %-12s %s%s\n", "layout", ra_layout_name(o->p.layout),
           o->layout_auto ? " (auto)" : "");
    printf("# %-12s %s%s\n", "mode",
           o->ring && o->naive ? "ring and naive" : o->ring ? "ring" : "naive",
           o->p.no_poll ? " (no polling)" : "");
    printf("# %-12s %lld warm-up, %lld timed (median)\n", "passes",
           (long long)o->warmup, (long long)o->reps);
    printf("# %-12s %s\n", "exp", ra_exp2_impl());
    printf("# %-12s %d^3 sgemm on every rank at once: %.1f GFLOP/s in all\n",
           "sgemm", SGEMM_N, sgemm);
    printf("# %-12s %s\n", "command", ctx->command_line);
    fflush(stdout);
}

int cmd_bench(const cli_ctx *ctx, int argc, char **argv)
{
    bench_opts o;
    memset(&o, 0, sizeof o);
    cli_shape_default(&o.cs);
    ra_params_default(&o.p);
    o.seqs[0] = 4096;
    o.nseq = 1;
    o.warmup = 1;
    o.reps = 5;
    o.check_rows = 3;
    o.additive_hidden = 64;
    o.seed = 1;
    o.ring = 1;
    int help = 0;
    if (parse_bench(&o, argc, argv, &help) != 0)
        return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
    cli_shape_finish(&o.cs);
    if (o.p.score == RA_SCORE_ADDITIVE) { /* seeded random weights */
        const int64_t A = o.additive_hidden, D = o.cs.shape.D;
        o.additive_mem = malloc(sizeof(float) * (size_t)(A * (2 * D + 1)));
        if (!o.additive_mem)
            return cli_fail(ctx, CLI_EXIT_RUNTIME, "bench: out of memory");
        ra_random_normal((uint64_t)o.seed, 30, 0, A * (2 * D + 1),
                         o.additive_mem);
        for (int64_t i = 0; i < 2 * A * D; i++) /* keep tanh off its rails */
            o.additive_mem[i] *= (float)(0.5 / sqrt((double)D));
        o.additive = (ra_additive){A, o.additive_mem, o.additive_mem + A * D,
                                   o.additive_mem + 2 * A * D};
        o.p.additive = &o.additive;
    }
    o.layout_auto = o.p.layout == RA_LAYOUT_AUTO;
    o.p.layout = ra_params_layout(&o.p, o.segment_avg > 0);
    if (o.naive && (o.p.layout != RA_LAYOUT_CONTIGUOUS ||
                    o.p.window ||
                    o.lens || o.segment_avg)) {
        return cli_fail(ctx, CLI_EXIT_USAGE, "bench: --mode naive/both takes "
                                             "the contiguous layout and causal "
                                             "masks only");
    }
    if (help) {
        if (ctx->rank == 0)
            fputs(bench_help, stdout);
        return CLI_EXIT_OK;
    }
    /* every shape is checked before any measurement */
    for (int i = 0; i < o.nseq; i++) {
        ra_shape s = o.cs.shape;
        s.N = o.seqs[i];
        if (!o.cs.seq_kv_set)
            s.M = s.N;
        if (ra_shape_check(&s) != RA_OK)
            return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
    }

    FILE *json = NULL, *csv = NULL;
    int open_fail = 0;
    if (ctx->rank == 0) {
        const char *bad = NULL;
        if (o.json && !(json = fopen(o.json, "w")))
            bad = o.json;
        else if (o.csv && !(csv = fopen(o.csv, "w")))
            bad = o.csv;
        if (bad) {
            ra_error_set(RA_ERR_ARG, "bench: cannot open --%s file %s: %s",
                         bad == o.json ? "json" : "csv", bad, strerror(errno));
            open_fail = 1;
        }
    }
    MPI_Bcast(&open_fail, 1, MPI_INT, 0, ctx->comm);
    if (open_fail) {
        if (json) {
            fclose(json);
            remove(o.json);
        }
        if (csv)
            fclose(csv);
        return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
    }

    double sgemm = 0;
    {
        double mine = sgemm_rate(ctx->comm, ra_params_threads(&o.p));
        MPI_Allreduce(&mine, &sgemm, 1, MPI_DOUBLE, MPI_SUM, ctx->comm);
    }
    if (ctx->rank == 0) {
        print_echo(ctx, &o, sgemm);
        bench_print_header(stdout);
    }
    bench_result *rows = calloc((size_t)(2 * o.nseq), sizeof *rows);
    int nrows = 0, all_pass = 1;
    ra_status st = rows ? RA_OK : ra_error_set(RA_ERR_NOMEM, "bench: out of "
                                                             "memory");
    for (int i = 0; i < o.nseq && st == RA_OK; i++) {
        ra_shape s = o.cs.shape;
        s.N = o.seqs[i];
        if (!o.cs.seq_kv_set)
            s.M = s.N;
        if ((st = ra_shape_check(&s)) != RA_OK)
            break;
        for (int naive = 0; naive < 2 && st == RA_OK; naive++) {
            if (!(naive ? o.naive : o.ring))
                continue;
            st = run_config(ctx, &o, &s, naive, sgemm, &rows[nrows]);
            if (st == RA_OK) {
                all_pass &= rows[nrows].pass;
                if (ctx->rank == 0)
                    bench_print_row(stdout, &rows[nrows]);
                nrows++;
            }
        }
    }
    if (ctx->rank == 0) {
        if (json)
            bench_json_write(json, rows, nrows);
        if (csv)
            bench_csv_write(csv, rows, nrows);
    }
    if (json)
        fclose(json);
    if (csv)
        fclose(csv);
    free(rows);
    free(o.additive_mem);
    if (st != RA_OK)
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());
    return all_pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}
