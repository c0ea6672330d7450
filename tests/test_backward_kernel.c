/* test_backward_kernel.c: ra_kernel_backward_block in one process against
 * the fp64 reference gradients (support_bwd.h).
 *
 * Each case draws a fresh problem and dO, takes o and lse from the fp64
 * forward reference, cuts the keys into two blocks the way two ring steps
 * see them, and checks dq, dk, dv as whole tensors (relative Frobenius
 * error) and that no entry is NaN or inf. No MPI call is made. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support_bwd.h"

static uint64_t seed_next = 7000;

/* One case's options beside the shape. */
typedef struct {
    int causal, window;
    int64_t left, right;
    ra_score score;
    int64_t bq, bkv;
    int threads;
    int lens, segs; /* draw padding lengths, packed-sequence ids */
} kcase;

/* The kernel's view of the keys [j0, j0 + m) of a whole problem. */
static ra_block block_of(const ra_shape *s, const kcase *c, double scale,
                         const int64_t *qpos, const int64_t *kpos,
                         const test_masks *mk, const int64_t *kseg)
{
    const int gauss = c->score == RA_SCORE_GAUSSIAN;
    const double sigma = 1.5;
    ra_block blk = {.B = s->B, .n = s->N, .H = s->H, .G = s->G, .D = s->D,
                    .Dv = s->Dv, .block_q = c->bq, .block_kv = c->bkv,
                    .score = c->score, .gemm = test_gemm()};
    blk.alpha = (float)(gauss ? M_LOG2E / (sigma * sigma) : scale * M_LOG2E);
    blk.half_inv_sigma2 = gauss ? 0.5 / (sigma * sigma) : 0.0;
    blk.mask = (ra_mask){.causal = c->causal, .diag = s->M - s->N,
                         .window = c->window, .left = c->left,
                         .right = c->right, .qpos = qpos, .kpos = kpos,
                         .q_lens = mk->q_lens, .kv_lens = mk->kv_lens,
                         .q_seg = mk->q_seg, .k_seg = kseg};
    return blk;
}

/* Runs the kernel over key blocks [0, cut) and [cut, M); returns the
 * tally of the three gradients. */
static bwd_tally run_kernel(const problem *p, const kcase *c,
                            const ra_params *prm, const test_masks *mk,
                            const float *dout, const bwd_ref *ref)
{
    const ra_shape *s = &p->s;
    const int64_t B = s->B, N = s->N, M = s->M, H = s->H, G = s->G;
    const int64_t nq = B * N * H, nk = B * M * G, cut = M / 3;
    float *drow = malloc(sizeof(float) * (size_t)(B * H * N + 1));
    float *dq = calloc((size_t)(nq * s->D + 1), sizeof(float));
    float *dk = calloc((size_t)(nk * s->D + 1), sizeof(float));
    float *dv = calloc((size_t)(nk * s->Dv + 1), sizeof(float));
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)(N > M ? N : M));
    int64_t *kseg = malloc(sizeof(int64_t) * (size_t)(B * M + 1));
    ra_bwd_workspace *ws = ra_bwd_workspace_create(c->threads, c->bq, c->bkv, 0);
    for (int64_t i = 0; i < (N > M ? N : M); i++)
        pos[i] = i;
    ra_backward_drow(B, N, H, s->Dv, dout, ref->o, drow);
    const int64_t j0s[2] = {0, cut}, ms[2] = {cut, M - cut};
    for (int part = 0; part < 2; part++) {
        const int64_t j0 = j0s[part], m = ms[part];
        float *kb = malloc(sizeof(float) * (size_t)(B * m * G * s->D + 1));
        float *vb = malloc(sizeof(float) * (size_t)(B * m * G * s->Dv + 1));
        float *dkb = calloc((size_t)(B * m * G * s->D + 1), sizeof(float));
        float *dvb = calloc((size_t)(B * m * G * s->Dv + 1), sizeof(float));
        const ra_slice ks = {1, {{j0, m, 1}}, m};
        slice_gather(p->k, B, M, G * s->D, sizeof(float), &ks, kb);
        slice_gather(p->v, B, M, G * s->Dv, sizeof(float), &ks, vb);
        if (mk->kv_seg)
            slice_gather(mk->kv_seg, B, M, 1, sizeof(int64_t), &ks, kseg);
        ra_block blk = block_of(s, c, ra_params_scale(prm, s), pos, pos + j0,
                                mk, mk->kv_seg ? kseg : NULL);
        blk.m = m;
        const ra_bwd_operands ops = {p->q, kb, vb, dout, ref->lse, drow, dq,
                                     dkb, dvb};
        ra_kernel_backward_block(&blk, &ops, ws, NULL, NULL);
        for (int64_t b = 0; b < B; b++) {
            memcpy(dk + (b * M + j0) * G * s->D, dkb + b * m * G * s->D,
                   sizeof(float) * (size_t)(m * G * s->D));
            memcpy(dv + (b * M + j0) * G * s->Dv, dvb + b * m * G * s->Dv,
                   sizeof(float) * (size_t)(m * G * s->Dv));
        }
        free(kb);
        free(vb);
        free(dkb);
        free(dvb);
    }
    bwd_tally t = {0};
    const ra_slice qs = {1, {{0, N, 1}}, N}, all_k = {1, {{0, M, 1}}, M};
    bwd_tally_add(&t, 0, dq, ref->dq, B, N, H * s->D, &qs);
    bwd_tally_add(&t, 1, dk, ref->dk, B, M, G * s->D, &all_k);
    bwd_tally_add(&t, 2, dv, ref->dv, B, M, G * s->Dv, &all_k);
    ra_bwd_workspace_free(ws);
    free(drow);
    free(dq);
    free(dk);
    free(dv);
    free(pos);
    free(kseg);
    return t;
}

/* One case on a fresh problem; asserts every gradient below 1e-5. */
static void expect_ok(ra_shape s, kcase c)
{
    const uint64_t seed = seed_next++;
    problem p;
    problem_make(&p, &s, seed);
    const int64_t nd = s.B * s.N * s.H * s.Dv;
    float *dout = malloc(sizeof(float) * (size_t)(nd + 1));
    ra_random_normal(seed, RA_STREAM_DO, 0, nd, dout);
    int64_t *lens = malloc(sizeof(int64_t) * (size_t)(2 * s.B));
    int64_t *seg = malloc(sizeof(int64_t) * (size_t)(s.B * (s.N + s.M) + 1));
    const ra_slice qs = {1, {{0, s.N, 1}}, s.N}, ks = {1, {{0, s.M, 1}}, s.M};
    ra_random_lens(seed, RA_STREAM_Q_LENS, s.B, s.N, lens);
    ra_random_lens(seed, RA_STREAM_KV_LENS, s.B, s.M, lens + s.B);
    ra_random_segments(seed, RA_STREAM_Q_SEGMENTS, s.B, s.N, 9, &qs, seg);
    /* with N == M queries and keys share their ids, as `gen` writes them */
    ra_random_segments(seed, s.N == s.M ? RA_STREAM_Q_SEGMENTS
                                        : RA_STREAM_KV_SEGMENTS,
                       s.B, s.M, 9, &ks, seg + s.B * s.N);
    const test_masks mk = {c.lens ? lens : NULL, c.lens ? lens + s.B : NULL,
                           c.segs ? seg : NULL, c.segs ? seg + s.B * s.N : NULL};
    ra_params prm;
    ra_params_default(&prm);
    prm.num.causal = c.causal;
    prm.num.window = c.window;
    prm.num.window_left = c.left;
    prm.num.window_right = c.right;
    prm.num.score = c.score;
    prm.num.sigma = 1.5;
    bwd_ref ref;
    bwd_ref_make(&ref, &p, &prm, &mk, dout);
    const bwd_tally t = run_kernel(&p, &c, &prm, &mk, dout, &ref);
    const double e[3] = {bwd_tally_rel(&t, 0), bwd_tally_rel(&t, 1),
                         bwd_tally_rel(&t, 2)};
    const int ok = e[0] < 1e-5 && e[1] < 1e-5 && e[2] < 1e-5 &&
                   t.nonfinite == 0;
    printf("# N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld %s causal=%d "
           "window=%d lens=%d segs=%d tiles=%lldx%lld threads=%d  dq=%.2e "
           "dk=%.2e dv=%.2e nonfinite=%.0f %s\n", (long long)s.N,
           (long long)s.M, (long long)s.H, (long long)s.G, (long long)s.D,
           (long long)s.Dv, ra_score_name(c.score), c.causal, c.window,
           c.lens, c.segs, (long long)c.bq, (long long)c.bkv, c.threads, e[0],
           e[1], e[2], t.nonfinite, ok ? "PASS" : "FAIL");
    bwd_ref_free(&ref);
    free(dout);
    free(lens);
    free(seg);
    problem_free(&p);
    assert_true(ok);
}

static void test_dot_rules(void **state)
{
    (void)state;
    const ra_shape s = {2, 77, 91, 4, 2, 24, 20};
    expect_ok(s, (kcase){.bq = 16, .bkv = 32, .threads = 1});
    expect_ok(s, (kcase){.causal = 1, .bq = 16, .bkv = 32, .threads = 1});
    expect_ok(s, (kcase){.window = 1, .left = 9, .right = 4, .bq = 8,
                         .bkv = 16, .threads = 1});
    expect_ok(s, (kcase){.causal = 1, .lens = 1, .bq = 16, .bkv = 16,
                         .threads = 1});
    expect_ok(s, (kcase){.segs = 1, .bq = 16, .bkv = 32, .threads = 2});
}

static void test_gaussian_rules(void **state)
{
    (void)state;
    const ra_shape s = {1, 65, 50, 3, 1, 16, 33};
    const ra_score g = RA_SCORE_GAUSSIAN;
    expect_ok(s, (kcase){.score = g, .bq = 16, .bkv = 16, .threads = 1});
    expect_ok(s, (kcase){.score = g, .causal = 1, .lens = 1, .bq = 32,
                         .bkv = 16, .threads = 2});
    const ra_shape self = {2, 70, 70, 2, 1, 16, 8};
    expect_ok(self, (kcase){.score = g, .window = 1, .left = 5, .right = 0,
                            .segs = 1, .bq = 8, .bkv = 8, .threads = 1});
    /* key tiles wider than a query tile's band (kernel_bwd.c, band_keys):
     * the key terms are read from the part's offset */
    expect_ok(self, (kcase){.score = g, .window = 1, .left = 11, .right = 3,
                            .bq = 8, .bkv = 64, .threads = 2});
    expect_ok(self, (kcase){.window = 1, .left = 20, .right = 2, .lens = 1,
                            .bq = 16, .bkv = 96, .threads = 1});
}

/* Rows and blocks that see nothing: causal with N > M leaves the first
 * rows empty, and tiny lens mask whole blocks. */
static void test_empty_rows(void **state)
{
    (void)state;
    const ra_shape s = {3, 90, 40, 2, 2, 16, 16};
    expect_ok(s, (kcase){.causal = 1, .bq = 16, .bkv = 16, .threads = 1});
    expect_ok(s, (kcase){.causal = 1, .lens = 1, .bq = 8, .bkv = 8,
                         .threads = 2});
    const ra_shape self = {2, 64, 64, 2, 1, 16, 16};
    expect_ok(self, (kcase){.causal = 1, .lens = 1, .segs = 1, .bq = 8,
                            .bkv = 8, .threads = 2});
}

static void test_default_tiles(void **state)
{
    (void)state;
    expect_ok((ra_shape){1, 600, 555, 2, 1, 64, 64},
              (kcase){.causal = 1, .bq = 256, .bkv = 256, .threads = 1});
    expect_ok((ra_shape){1, 300, 700, 2, 2, 128, 128},
              (kcase){.bq = 256, .bkv = 512, .threads = 2});
    /* a window's tiles: 128 query rows taken 64 at a time (query_rows) */
    expect_ok((ra_shape){1, 600, 555, 4, 2, 64, 64},
              (kcase){.causal = 1, .window = 1, .left = 100, .bq = 128,
                      .bkv = 240, .threads = 2});
    expect_ok((ra_shape){2, 333, 333, 2, 1, 32, 16},
              (kcase){.window = 1, .left = 30, .right = 50, .lens = 1,
                      .bq = 200, .bkv = 208, .threads = 1});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot_rules),
        cmocka_unit_test(test_gaussian_rules),
        cmocka_unit_test(test_empty_rows),
        cmocka_unit_test(test_default_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
