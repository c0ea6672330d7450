/* test_mha_mpi.c: the multi-head attention layer (projections, heads,
 * scale 1/sqrt(D), positional encoding, output projection) over the ring at
 * P = 1..4 against an fp64 implementation of the same layer written here
 * from its definition: self and cross, GQA, causal and padding masks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "support.h"

static int rank, nranks;

/* y (rows, out) = x (rows, in) w^T + b in fp64 */
static void linear64(const double *x, int64_t rows, int64_t in,
                     const float *w, const float *b, int64_t out, double *y)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < out; c++) {
            double acc = b ? b[c] : 0.0;
            for (int64_t i = 0; i < in; i++)
                acc += x[r * in + i] * (double)w[c * in + i];
            y[r * out + c] = acc;
        }
}

/* x (B, len, E) as doubles, plus the sinusoidal encoding when asked */
static double *encoded(const float *x, int64_t B, int64_t len, int64_t E,
                       int pos_encoding)
{
    double *d = malloc(sizeof(double) * (size_t)(B * len * E));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < len; i++)
            for (int64_t c = 0; c < E; c++) {
                double pe = 0.0;
                if (pos_encoding) {
                    double w = pow(10000.0, -(double)(2 * (c / 2)) / (double)E);
                    pe = c % 2 ? cos((double)i * w) : sin((double)i * w);
                }
                d[(b * len + i) * E + c] = x[(b * len + i) * E + c] + pe;
            }
    return d;
}

typedef struct {
    ra_shape s;
    int64_t Eq, Ekv, Eout;
    int self, pos_encoding, causal, lens, biases;
    uint64_t seed;
    ra_rope rope; /* on the projected per-head q and k */
    int alibi;
} layer_case;

static float *randn(uint64_t seed, uint64_t stream, int64_t count, float mul)
{
    float *x = malloc(sizeof(float) * (size_t)count);
    ra_random_normal(seed, stream, 0, count, x);
    for (int64_t i = 0; i < count; i++)
        x[i] *= mul;
    return x;
}

static void run_layer(const layer_case *lc)
{
    const ra_shape *s = &lc->s;
    const int64_t HD = s->H * s->D, GD = s->G * s->D, GDv = s->G * s->Dv;
    const int64_t HDv = s->H * s->Dv;
    float *xq = randn(lc->seed, 0, s->B * s->N * lc->Eq, 1.0f);
    float *xkv = lc->self ? xq : randn(lc->seed, 1, s->B * s->M * lc->Ekv, 1.0f);
    ra_mha L = {lc->Eq, lc->Ekv, lc->Eout,
                randn(lc->seed, 2, HD * lc->Eq, 1.0f / sqrtf((float)lc->Eq)),
                randn(lc->seed, 3, GD * lc->Ekv, 1.0f / sqrtf((float)lc->Ekv)),
                randn(lc->seed, 4, GDv * lc->Ekv, 1.0f / sqrtf((float)lc->Ekv)),
                randn(lc->seed, 5, lc->Eout * HDv, 1.0f / sqrtf((float)HDv)),
                lc->biases ? randn(lc->seed, 6, HD, 0.1f) : NULL,
                lc->biases ? randn(lc->seed, 7, GD, 0.1f) : NULL,
                lc->biases ? randn(lc->seed, 8, GDv, 0.1f) : NULL,
                lc->biases ? randn(lc->seed, 9, lc->Eout, 0.1f) : NULL,
                lc->pos_encoding};
    int64_t q_lens[4], kv_lens[4];
    ra_random_lens(lc->seed, RA_STREAM_Q_LENS, s->B, s->N, q_lens);
    ra_random_lens(lc->seed, RA_STREAM_KV_LENS, s->B, s->M, kv_lens);
    const ra_masks masks = {q_lens, kv_lens, NULL, NULL};
    ra_params prm;
    ra_params_default(&prm);
    prm.num.causal = lc->causal;
    prm.num.rope = lc->rope;
    prm.num.alibi = lc->alibi;
    prm.exec.block_q = 16;
    prm.exec.block_kv = 24;

    /* the ring on this rank's slices */
    const ra_layout lay = ra_params_layout(&prm, 0);
    const ra_slice qs = ra_params_slice(&prm, lay, s->N, rank, nranks);
    const ra_slice ks = ra_params_slice(&prm, lay, s->M, rank, nranks);
    float *xq_loc = malloc(sizeof(float) * (size_t)(s->B * qs.count * lc->Eq + 1));
    float *xkv_loc = malloc(sizeof(float) * (size_t)(s->B * ks.count * lc->Ekv + 1));
    float *y = malloc(sizeof(float) * (size_t)(s->B * qs.count * lc->Eout + 1));
    slice_gather(xq, s->B, s->N, lc->Eq, sizeof(float), &qs, xq_loc);
    slice_gather(xkv, s->B, s->M, lc->Ekv, sizeof(float), &ks, xkv_loc);
    ra_numerics num;
    ra_exec exec;
    ra_params_split(&prm, &num, &exec); /* the public call */
    const ra_mha_io io = {xq_loc, lc->self ? xq_loc : xkv_loc, y};
    ra_status st = ra_mha_forward(MPI_COMM_WORLD, s, &num, &exec,
                                  lc->lens ? &masks : NULL, &L, &io, NULL);

    /* the fp64 layer, whole, on every rank */
    double *eq = encoded(xq, s->B, s->N, lc->Eq, lc->pos_encoding);
    double *ekv = encoded(xkv, s->B, s->M, lc->Ekv, lc->pos_encoding);
    double *q = malloc(sizeof(double) * (size_t)(s->B * s->N * HD));
    double *k = malloc(sizeof(double) * (size_t)(s->B * s->M * GD));
    double *v = malloc(sizeof(double) * (size_t)(s->B * s->M * GDv));
    double *o = calloc((size_t)(s->B * s->N * HDv), sizeof(double));
    double *yd = malloc(sizeof(double) * (size_t)(s->B * s->N * lc->Eout));
    double *sc = malloc(sizeof(double) * (size_t)s->M);
    linear64(eq, s->B * s->N, lc->Eq, L.w_q, L.b_q, HD, q);
    linear64(ekv, s->B * s->M, lc->Ekv, L.w_k, L.b_k, GD, k);
    linear64(ekv, s->B * s->M, lc->Ekv, L.w_v, L.b_v, GDv, v);
    for (int64_t t = 0; t < s->B * s->N * s->H; t++) /* token (t / H) % N */
        ra_rope_row_ref(lc->rope, prm.num.rope_base, q + t * s->D, s->D,
                        (t / s->H) % s->N + s->M - s->N);
    for (int64_t t = 0; t < s->B * s->M * s->G; t++)
        ra_rope_row_ref(lc->rope, prm.num.rope_base, k + t * s->D, s->D,
                        (t / s->G) % s->M);
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->H; h++) {
            const int64_t g = h / (s->H / s->G);
            const ra_ref_score score = {
                .score = RA_SCORE_DOT, .scale = 1.0 / sqrt((double)s->D),
                .alibi = lc->alibi,
                .alibi_slope = ra_params_alibi_slope(&prm, s->H, h)};
            for (int64_t i = 0; i < s->N; i++) {
                ra_mask mk = {.causal = lc->causal, .diag = s->M - s->N,
                              .qpos = &i,
                              .q_lens = lc->lens ? q_lens + b : NULL,
                              .kv_lens = lc->lens ? kv_lens + b : NULL};
                double l;
                const ra_ref_rows rr = {
                    1, s->M, s->D, s->Dv,
                    q + (b * s->N + i) * HD + h * s->D, HD,
                    k + b * s->M * GD + g * s->D, GD,
                    v + b * s->M * GDv + g * s->Dv, GDv,
                    o + (b * s->N + i) * HDv + h * s->Dv, HDv, &l};
                ra_reference_scored(&score, &mk, &rr, sc);
            }
        }
    linear64(o, s->B * s->N, HDv, L.w_o, L.b_o, lc->Eout, yd);

    double err[2] = {0, 0}, gerr[2];
    if (st != RA_OK)
        err[0] = INFINITY;
    for (int64_t b = 0; st == RA_OK && b < s->B; b++)
        for (int64_t i = 0; i < qs.count; i++)
            for (int64_t c = 0; c < lc->Eout; c++) {
                double ref = yd[(b * s->N + ra_slice_pos(&qs, i)) * lc->Eout + c];
                double e = y[(b * qs.count + i) * lc->Eout + c] - ref;
                err[0] += e * e;
                err[1] += ref * ref;
            }
    MPI_Allreduce(err, gerr, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double rel = sqrt(gerr[0] / gerr[1]);
    if (rank == 0)
        printf("# P=%d %s N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld Eq=%lld "
               "Ekv=%lld Eout=%lld pos=%d causal=%d lens=%d bias=%d "
               "rope=%s alibi=%d %s: rel err %.2e\n",
               nranks, lc->self ? "self " : "cross", (long long)s->N,
               (long long)s->M, (long long)s->H, (long long)s->G,
               (long long)s->D, (long long)s->Dv, (long long)lc->Eq,
               (long long)lc->Ekv, (long long)lc->Eout, lc->pos_encoding,
               lc->causal, lc->lens, lc->biases, ra_rope_name(lc->rope),
               lc->alibi, ra_layout_name(lay), rel);
    assert_true(rel < RA_TOLERANCE);
    free(xq_loc);
    free(xkv_loc);
    free(y);
    free(eq);
    free(ekv);
    free(q);
    free(k);
    free(v);
    free(o);
    free(yd);
    free(sc);
    if (!lc->self)
        free(xkv);
    free(xq);
    free((void *)L.w_q);
    free((void *)L.w_k);
    free((void *)L.w_v);
    free((void *)L.w_o);
    free((void *)L.b_q);
    free((void *)L.b_k);
    free((void *)L.b_v);
    free((void *)L.b_o);
}

static void test_self(void **state)
{
    (void)state;
    layer_case lc = {{2, 211, 211, 4, 2, 8, 6}, 24, 24, 20, 1, 1, 1, 0, 1, 901};
    run_layer(&lc);             /* positional encoding, causal, GQA */
    lc.causal = 0;
    lc.lens = 1;
    lc.pos_encoding = 0;
    lc.seed = 902;
    run_layer(&lc);             /* padding */
    layer_case one = {{1, 3, 3, 2, 2, 4, 4}, 5, 5, 3, 1, 1, 1, 0, 0, 903};
    run_layer(&one);            /* fewer tokens than ranks at P = 4 */
    lc.rope = RA_ROPE_HALF;     /* RoPE on the projected heads */
    lc.causal = 1;
    lc.seed = 904;
    run_layer(&lc);
    lc.rope = RA_ROPE_INTERLEAVED;
    lc.alibi = 1;
    lc.lens = 0;
    lc.seed = 905;
    run_layer(&lc);
}

static void test_cross(void **state)
{
    (void)state;
    layer_case lc = {{2, 77, 130, 4, 1, 8, 8}, 16, 12, 10, 0, 1, 0, 1, 1, 911};
    run_layer(&lc);             /* N != M, Eq != Ekv, MQA, padding */
    lc.causal = 1;
    lc.lens = 0;
    lc.seed = 912;
    run_layer(&lc);
    lc.rope = RA_ROPE_HALF;     /* cross: queries at i + M - N */
    lc.alibi = 1;
    lc.seed = 913;
    run_layer(&lc);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self),
        cmocka_unit_test(test_cross),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
