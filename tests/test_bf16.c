/* test_bf16.c: bf16 values and the bf16 tile path of the forward kernel in
 * one process, against the fp64 reference on bf16-rounded inputs.
 *
 * A case folds all keys of a fresh random problem as one block with
 * blk.mm16 set (bf16 precision) on each engine this build has, and checks
 * every row with check_slice under params.precision = bf16: q, k, v
 * rounded before the reference, and the o tolerance widened by what
 * rounding P may move o by (compare.h). The same output must fail the
 * fp32 check, so a path that skipped the rounding would be seen. No MPI
 * call is made. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bf16.h"
#include "internal.h"
#include "simd.h"
#include "support.h"

/* Round to nearest, ties to even, on the values around 1 whose 9th
 * significant bit decides; NaN, infinities and overflow. */
static void test_bf16_rounding(void **state)
{
    (void)state;
    const float one = 1.0f, u = 0x1p-8f;
    assert_true(ra_bf16_to_f32(ra_bf16_of(one + u)) == one); /* tie: even */
    assert_true(ra_bf16_to_f32(ra_bf16_of(one + 3 * u)) == one + 4 * u);
    assert_true(ra_bf16_to_f32(ra_bf16_of(one + u * 1.5f)) == one + 2 * u);
    assert_true(ra_bf16_to_f32(ra_bf16_of(-(one + u * 0.5f))) == -one);
    assert_true(isnan(ra_bf16_to_f32(ra_bf16_of(NAN))));
    assert_true(isinf(ra_bf16_to_f32(ra_bf16_of(INFINITY))));
    assert_true(isinf(ra_bf16_to_f32(ra_bf16_of(3.4e38f))));
    for (float x = -3.0f; x < 3.0f; x += 0.0123f) { /* idempotent */
        const float r = ra_bf16_to_f32(ra_bf16_of(x));
        assert_true(ra_bf16_to_f32(ra_bf16_of(r)) == r);
        assert_true(fabsf(r - x) <= (float)RA_BF16_UNIT * fabsf(x));
    }
}

/* The bf16 softmax pass (ra_exp2_shift_sum_bf16) on every path this core
 * has (ra_simd_cap: the widest, AVX2, scalar): the same bits on all;
 * each weight within bf16's unit roundoff (and the polynomial's 3e-6)
 * of 2^t;
 * the sum within 3e-6 of fp64's; the max exact; -inf and t < -126
 * give 0. Lengths cover every path's tail. */
static void test_bf16_exp(void **state)
{
    (void)state;
    static const int64_t lens[8] = {1, 7, 8, 15, 16, 17, 33, 1001};
    static const char *caps[3] = {NULL, "avx2", "scalar"};
    float x[1001];
    uint16_t p[3][1001];
    for (int li = 0; li < 8; li++) {
        const int64_t len = lens[li];
        ra_random_normal(44, (uint64_t)li, 0, len, x);
        for (int64_t j = 0; j < len; j++)
            x[j] = j % 9 == 4 ? -INFINITY : 20.0f * x[j] - (j % 13 ? 0 : 140);
        const float shift = 3.25f;
        float sum[3], mx[3];
        for (int ci = 0; ci < 3; ci++) {
            ra_simd_cap(caps[ci]);
            sum[ci] = ra_exp2_shift_sum_bf16(x, len, shift, p[ci], &mx[ci]);
        }
        ra_simd_cap(NULL);
        double ref = 0.0, top = -INFINITY;
        for (int64_t j = 0; j < len; j++) {
            const double t = (double)(x[j] - shift), e = t >= -126 ? exp2(t) : 0;
            const double got = ra_bf16_to_f32(p[0][j]);
            assert_true(fabs(got - e) <= (RA_BF16_UNIT + 4e-6) * e);
            assert_true(memcmp(p[0] + j, p[1] + j, 2) == 0 &&
                        memcmp(p[0] + j, p[2] + j, 2) == 0);
            ref += e;
            top = x[j] > top ? x[j] : top;
        }
        for (int ci = 0; ci < 3; ci++) {
            assert_true(fabs(sum[ci] - ref) <= 3e-6 * ref + 1e-30);
            assert_true(mx[ci] == (float)top);
        }
    }
    printf("# bf16 softmax pass: every path the same bits, within bf16 "
           "rounding of fp64\n");
}

/* One case: shape s, masks of params (causal, window) and lens; with
 * grow, key j scaled by 1 + 9 j / M, so that a row's max rises by more
 * than the fused pass lets it (kernel.c, LAZY_MAX) from tile to tile. */
typedef struct {
    ra_shape s;
    int causal, window;
    int64_t left, right;
    int lens;
    int grow;
} bf16_case;

/* Folds the case's problem in bf16 on engine gemm; checks it. */
static void expect_case(const bf16_case *k, ra_gemm gemm, uint64_t seed)
{
    const ra_shape *s = &k->s;
    problem p;
    problem_make(&p, s, seed);
    for (int64_t j = 0; k->grow && j < s->M * s->G; j++)
        for (int64_t d = 0; d < s->D; d++)
            p.k[j * s->D + d] *= 1.0f + 9.0f * (float)(j / s->G) / (float)s->M;
    ra_params prm;
    ra_params_default(&prm);
    prm.num.causal = k->causal;
    prm.num.window = k->window;
    prm.num.window_left = k->left;
    prm.num.window_right = k->right;
    prm.exec.gemm = gemm;
    int64_t bq, bkv, *qpos = malloc(sizeof(int64_t) * (size_t)s->N);
    int64_t *kpos = malloc(sizeof(int64_t) * (size_t)s->M);
    int64_t lens[2] = {s->N - s->N / 3, s->M - s->M / 5};
    for (int64_t i = 0; i < s->N; i++)
        qpos[i] = i;
    for (int64_t j = 0; j < s->M; j++)
        kpos[j] = j;
    ra_params_tiles(&prm, s, &bq, &bkv);
    ra_block blk = {
        .B = s->B, .n = s->N, .m = s->M, .H = s->H, .G = s->G, .D = s->D,
        .Dv = s->Dv, .alpha = (float)(ra_params_scale(&prm, s) * M_LOG2E),
        .block_q = bq, .block_kv = bkv, .gemm = gemm,
        .mask = {.causal = k->causal, .diag = s->M - s->N,
                 .window = k->window, .left = k->left, .right = k->right,
                 .qpos = qpos, .kpos = kpos,
                 .q_lens = k->lens ? &lens[0] : NULL,
                 .kv_lens = k->lens ? &lens[1] : NULL}};
    ra_mm_shape shapes[RA_MM16_MAX];
    ra_mm16 *e = NULL;
    assert_int_equal(ra_mm16_create(gemm, shapes,
                                    ra_kernel_mm_shapes(&blk, 0, shapes), 2,
                                    &e),
                     RA_OK);
    blk.mm16 = e;
    float *qr = malloc(sizeof(float) * (size_t)(s->N * s->H * s->D));
    memcpy(qr, p.q, sizeof(float) * (size_t)(s->N * s->H * s->D));
    ra_bf16_round(qr, s->N * s->H * s->D); /* as the call rounds q, k, v */
    ra_bf16_round(p.k, s->M * s->G * s->D);
    ra_bf16_round(p.v, s->M * s->G * s->Dv);
    float *o = malloc(sizeof(float) * (size_t)(s->N * s->H * s->Dv));
    float *lse = malloc(sizeof(float) * (size_t)(s->H * s->N));
    ra_workspace *ws = ra_workspace_create(2, bq, bkv, s->Dv);
    ra_state_reset(1, s->N, s->H, s->Dv, o, lse);
    const ra_fwd_ops ops = {qr, p.k, p.v, o, lse, NULL, NULL};
    ra_kernel_forward_block(&blk, &ops, ws);
    const test_masks tm = {k->lens ? &lens[0] : NULL,
                           k->lens ? &lens[1] : NULL, NULL, NULL};
    const ra_slice all = {1, {{0, s->N, 1}}, s->N};
    prm.num.precision = RA_PRECISION_BF16;
    const check_result bf = check_slice(&p, &prm, &tm, &all, o, lse);
    prm.num.precision = RA_PRECISION_FP32;
    const check_result fp = check_slice(&p, &prm, &tm, &all, o, lse);
    printf("# %s N=%lld H=%lld G=%lld D=%lld Dv=%lld causal %d window %d "
           "lens %d: rel %.2e (tol %.2e), lse %.2e; against fp32 %.2e\n",
           ra_gemm_name(gemm), (long long)s->N, (long long)s->H,
           (long long)s->G, (long long)s->D, (long long)s->Dv, k->causal,
           k->window, k->lens, bf.rel_o, ra_tally_tol_o(&bf, RA_TOLERANCE),
           bf.max_lse, fp.rel_o);
    assert_true(ra_tally_ok(&bf, RA_TOLERANCE));
    assert_true(bf.max_lse < 1e-5);
    /* P was rounded: the fp32 check sees it (N = 1 has one key: P = 1) */
    if (s->M > 8)
        assert_true(fp.rel_o > 1e-4);
    ra_workspace_free(ws);
    ra_mm16_free(e);
    free(qr);
    free(o);
    free(lse);
    free(qpos);
    free(kpos);
    problem_free(&p);
}

/* Odd lengths (1, 7, 1001: edge tiles, and full ones for the primitive),
 * GQA, Dv != D, causal, windows and lens, on every engine. */
static void test_bf16_kernel(void **state)
{
    (void)state;
    const bf16_case cases[] = {
        {{1, 1, 1, 2, 2, 64, 64, 0}, 0, 0, 0, 0, 0},
        {{1, 7, 7, 4, 2, 32, 48, 0}, 1, 0, 0, 0, 0},
        {{1, 1001, 1001, 2, 1, 64, 64, 0}, 0, 0, 0, 0, 0},
        {{1, 1001, 1001, 4, 2, 64, 32, 0}, 1, 0, 0, 0, 1},
        {{1, 700, 1001, 2, 2, 128, 128, 0}, 0, 1, 300, 40, 0},
        /* causal bands a key or a few short of the window tile (bkv 640,
         * 384): widened to whole tiles, the keys added masked, the
         * padding's too */
        {{1, 1001, 1001, 2, 1, 64, 64, 0}, 1, 1, 511, 0, 0},
        {{1, 1001, 1001, 4, 2, 64, 64, 0}, 1, 1, 250, 3, 1},
        /* scores that rise along the keys: the max moves past the fused
         * pass's slack, and the row's pass runs again */
        {{1, 300, 1001, 2, 1, 64, 64, 0}, 0, 0, 0, 0, 0, 1},
        {{1, 1001, 1001, 2, 2, 128, 128, 0}, 1, 0, 0, 0, 0, 1},
    };
    uint64_t seed = 900;
    for (ra_gemm g = RA_GEMM_OPENBLAS; g <= RA_GEMM_ONEDNN; g++)
        for (size_t i = 0; ra_gemm_available(g) && i < sizeof cases /
                                                          sizeof *cases;
             i++)
            expect_case(&cases[i], g, seed++);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_bf16_exp),
        cmocka_unit_test(test_bf16_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
