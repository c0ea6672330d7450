/* support.c: shared test helpers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_env.h"
#include "internal.h"
#include "support.h"
#include "tally.h"

void problem_make(problem *p, const ra_shape *s, uint64_t seed)
{
    p->s = *s;
    size_t nq = (size_t)(s->B * s->N * s->H * s->D);
    size_t nk = (size_t)(s->B * s->M * s->G * ra_shape_dk(s));
    size_t nv = (size_t)(s->B * s->M * s->G * s->Dv);
    p->q = malloc(nq * sizeof(float) + 4);
    p->k = malloc(nk * sizeof(float) + 4);
    p->v = malloc(nv * sizeof(float) + 4);
    ra_random_normal(seed, RA_STREAM_Q, 0, (int64_t)nq, p->q);
    ra_random_normal(seed, RA_STREAM_K, 0, (int64_t)nk, p->k);
    ra_random_normal(seed, RA_STREAM_V, 0, (int64_t)nv, p->v);
}

void problem_free(problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
}

/* The run's rounding of a reference operand (bf16.h), when on. */
static void ref_round(double *x, int64_t n, int on)
{
    if (on)
        ra_bf16_round_f64(x, n);
}

/* bf16 precision: the reference of query row (qd) on |v|, whose elements
 * bound what rounding P moves o by (compare.h), into c. */
static void ref_abs(const ra_ref_score *score, const ra_mask *m,
                    const ra_ref_rows *rr, double *vabs, double *oabs,
                    double *sc, check_result *c)
{
    ra_ref_rows ra = *rr;
    double l;
    for (int64_t x = 0; x < rr->m * rr->Dv; x++)
        vabs[x] = fabs(rr->v[x]);
    ra.v = vabs;
    ra.o = oabs;
    ra.lse = &l;
    ra_reference_scored(score, m, &ra, sc);
    for (int64_t d = 0; d < rr->Dv; d++)
        ra_tally_o_abs(c, oabs[d]);
}

check_result check_slice(const problem *p, const ra_params *params,
                         const test_masks *masks, const ra_slice *qs,
                         const float *o, const float *lse)
{
    return check_slice_every(p, params, masks, qs, o, lse, 1);
}

check_result check_slice_every(const problem *p, const ra_params *params,
                               const test_masks *masks, const ra_slice *qs,
                               const float *o, const float *lse,
                               int64_t every)
{
    const ra_shape *s = &p->s;
    const test_masks none = {0};
    const test_masks *mk = masks ? masks : &none;
    const int64_t Dk = ra_shape_dk(s), n = qs->count;
    ra_ref_score score = {.score = params->num.score,
                          .scale = ra_params_scale(params, s),
                          .sigma = params->num.sigma,
                          .additive = params->num.additive,
                          .Dk = Dk,
                          .alibi = params->num.alibi,
                          .features = ra_features_of(&params->num)};
    const int bf16 = params->num.precision == RA_PRECISION_BF16;
    const int round_kv = bf16 || params->exec.wire == RA_WIRE_BF16;
    check_result c = {.p_unit = bf16 ? RA_BF16_UNIT : 0.0};
    double *vabs = malloc(sizeof(double) * (size_t)(s->M * s->Dv + 1));
    double *oabs = malloc(sizeof(double) * (size_t)(s->Dv + 1));
    double *qd = malloc(sizeof(double) * (size_t)(s->D + 1));
    double *kd = malloc(sizeof(double) * (size_t)(s->M * Dk + 1));
    double *vd = malloc(sizeof(double) * (size_t)(s->M * s->Dv + 1));
    double *od = malloc(sizeof(double) * (size_t)(s->Dv + 1));
    double *sc = malloc(sizeof(double) * (size_t)(s->M + 1));
    for (int64_t b = 0; b < s->B; b++) {
        for (int64_t h = 0; h < s->H; h++) {
            int64_t g = h / (s->H / s->G);
            if (params->num.alibi)
                score.alibi_slope = ra_params_alibi_slope(params, s->H, h);
            score.sink_on = params->num.sinks != NULL;
            score.sink = params->num.sinks ? params->num.sinks[h] : 0.0;
            for (int64_t j = 0; j < s->M; j++) {
                for (int64_t d = 0; d < Dk; d++)
                    kd[j * Dk + d] = p->k[((b * s->M + j) * s->G + g) * Dk + d];
                ra_rope_row_ref(params->num.rope, params->num.rope_base,
                                kd + j * Dk, s->D, j);
                for (int64_t d = 0; d < s->Dv; d++)
                    vd[j * s->Dv + d] = p->v[((b * s->M + j) * s->G + g) * s->Dv + d];
                ref_round(kd + j * Dk, Dk, round_kv);
                ref_round(vd + j * s->Dv, s->Dv, round_kv);
            }
            for (int64_t i = 0; i < n; i++) {
                int64_t gi = ra_slice_pos(qs, i);
                if (gi % every != 0 && gi != s->N - 1)
                    continue;
                for (int64_t d = 0; d < s->D; d++)
                    qd[d] = p->q[((b * s->N + gi) * s->H + h) * s->D + d];
                ra_rope_row_ref(params->num.rope, params->num.rope_base, qd,
                                s->D, gi + s->M - s->N);
                ref_round(qd, s->D, bf16);
                ra_mask m = {.causal = params->num.causal,
                             .diag = s->M - s->N,
                             .window = params->num.window,
                             .left = params->num.window_left,
                             .right = params->num.window_right,
                             .qpos = &gi,
                             .q_lens = mk->q_lens ? mk->q_lens + b : NULL,
                             .kv_lens = mk->kv_lens ? mk->kv_lens + b : NULL,
                             .q_seg =
                                 mk->q_seg ? mk->q_seg + b * s->N + gi : NULL,
                             .k_seg =
                                 mk->kv_seg ? mk->kv_seg + b * s->M : NULL};
                double ld;
                const ra_ref_rows rr = {1, s->M, s->D, s->Dv, qd, s->D, kd, Dk,
                                        vd, s->Dv, od, s->Dv, &ld};
                ra_reference_scored(&score, &m, &rr, sc);
                if (bf16)
                    ref_abs(&score, &m, &rr, vabs, oabs, sc, &c);
                const float *oi = o + ((b * n + i) * s->H + h) * s->Dv;
                for (int64_t d = 0; d < s->Dv; d++)
                    ra_tally_o(&c, oi[d], od[d]);
                ra_tally_lse(&c, lse[(b * s->H + h) * n + i], ld);
            }
        }
    }
    free(qd);
    free(kd);
    free(vd);
    free(od);
    free(sc);
    free(vabs);
    free(oabs);
    return c;
}

check_result check_rows(const problem *p, int causal, double scale,
                        int64_t n0, int64_t n, const float *o,
                        const float *lse, int64_t every)
{
    ra_params prm;
    ra_params_default(&prm);
    prm.num.causal = causal;
    prm.num.scale = scale;
    const ra_slice qs = {1, {{n0, n, 1}}, n};
    return check_slice_every(p, &prm, NULL, &qs, o, lse, every);
}

void local_part_make(local_part *lp, const problem *p, const ra_params *prm,
                     ra_layout layout, int rank, int nranks)
{
    const ra_shape *s = &p->s;
    const int64_t Dk = ra_shape_dk(s);
    lp->qs = ra_params_slice(prm, layout, s->N, rank, nranks);
    lp->ks = ra_params_slice(prm, layout, s->M, rank, nranks);
    const int64_t n = lp->qs.count, m = lp->ks.count;
    lp->q = malloc(sizeof(float) * (size_t)(s->B * n * s->H * s->D + 1));
    lp->k = malloc(sizeof(float) * (size_t)(s->B * m * s->G * Dk + 1));
    lp->v = malloc(sizeof(float) * (size_t)(s->B * m * s->G * s->Dv + 1));
    lp->o = malloc(sizeof(float) * (size_t)(s->B * n * s->H * s->Dv + 1));
    lp->lse = malloc(sizeof(float) * (size_t)(s->B * s->H * n + 1));
    slice_gather(p->q, s->B, s->N, s->H * s->D, sizeof(float), &lp->qs, lp->q);
    slice_gather(p->k, s->B, s->M, s->G * Dk, sizeof(float), &lp->ks, lp->k);
    slice_gather(p->v, s->B, s->M, s->G * s->Dv, sizeof(float), &lp->ks, lp->v);
}

void local_part_free(local_part *lp)
{
    free(lp->q);
    free(lp->k);
    free(lp->v);
    free(lp->o);
    free(lp->lse);
}

void slice_gather(const void *full, int64_t B, int64_t len, int64_t row,
                  size_t elem, const ra_slice *sl, void *out)
{
    const char *src = full;
    char *dst = out;
    const size_t bytes = (size_t)row * elem;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < sl->count; i++) {
            int64_t pos = ra_slice_pos(sl, i);
            memcpy(dst + (size_t)(b * sl->count + i) * bytes,
                   src + (size_t)(b * len + pos) * bytes, bytes);
        }
}

void mpi_test_init(int *argc, char ***argv, int *rank, int *nranks)
{
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
    if (*rank != 0) {
        if (!freopen("/dev/null", "w", stdout) ||
            !freopen("/dev/null", "w", stderr))
            MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int mpi_test_finish(int failed)
{
    MPI_Finalize();
    return failed ? 1 : 0;
}

void check_merge(check_result *a, const check_result *b)
{
    ra_tally_merge(a, b);
}

int check_ok(const check_result *c)
{
    return ra_tally_ok(c, RA_TOLERANCE);
}

check_result check_allreduce(MPI_Comm comm, const check_result *c)
{
    check_result g;
    if (ra_tally_allreduce(comm, c, &g) != RA_OK)
        g.bad_inf = 1; /* a failed reduction fails the check */
    return g;
}

void test_segment_ids(uint64_t seed, uint64_t stream, int64_t B, int64_t len,
                      int64_t avg, int kv_side_apart, int64_t *out)
{
    for (int64_t b = 0; b < B; b++) {
        int64_t id = 0;
        for (int64_t i = 0; i < len; i++) {
            if (i > 0 && ra_random_u64(seed, stream, (uint64_t)(b * len + i)) %
                                 (uint64_t)avg == 0)
                id++;
            out[b * len + i] = kv_side_apart && id % 3 == 2 ? id + 1000 : id;
        }
    }
}

test_masks test_masks_make(const ra_shape *s, uint64_t seed, int lens,
                           int64_t segment_avg, int kv_side_apart)
{
    test_masks m = {0};
    if (lens) {
        int64_t *ql = malloc(sizeof(int64_t) * (size_t)s->B);
        int64_t *kl = malloc(sizeof(int64_t) * (size_t)s->B);
        ra_random_lens(seed, RA_STREAM_Q_LENS, s->B, s->N, ql);
        ra_random_lens(seed, RA_STREAM_KV_LENS, s->B, s->M, kl);
        m.q_lens = ql;
        m.kv_lens = kl;
    }
    if (segment_avg > 0) {
        int64_t *qs = malloc(sizeof(int64_t) * (size_t)(s->B * s->N));
        int64_t *ks = malloc(sizeof(int64_t) * (size_t)(s->B * s->M));
        test_segment_ids(seed, RA_STREAM_Q_SEGMENTS, s->B, s->N, segment_avg, 0,
                         qs);
        test_segment_ids(seed, RA_STREAM_KV_SEGMENTS, s->B, s->M, segment_avg,
                         kv_side_apart, ks);
        m.q_seg = qs;
        m.kv_seg = ks;
    }
    return m;
}

void test_masks_free(test_masks *m)
{
    free((void *)m->q_lens);
    free((void *)m->kv_lens);
    free((void *)m->q_seg);
    free((void *)m->kv_seg);
    *m = (test_masks){0};
}

const char *test_arith_name(ra_precision precision, ra_wire wire)
{
    return precision == RA_PRECISION_BF16 ? "bf16"
           : wire == RA_WIRE_BF16         ? "wire-bf16"
                                          : "fp32";
}

ra_gemm test_gemm(void)
{
    ra_gemm g;
    if (ra_gemm_env(&g) != RA_OK) {
        fprintf(stderr, "%s\n", ra_error_message());
        exit(1);
    }
    return g;
}
