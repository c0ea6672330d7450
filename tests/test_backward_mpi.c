/* test_backward_mpi.c: ra_backward over P ranks against the fp64 reference
 * gradients. Run by ctest under mpiexec at P = 1..4.
 *
 * Every rank builds the same full problem and dO from a fresh seed, runs
 * ra_call_forward and then ra_call_backward on its slices, and tallies its
 * own rows of dq and its own key rows of dk and dv against the reference; the
 * sums are reduced over the ranks, so each gradient is judged as a whole
 * tensor (relative Frobenius error < 1e-5) and every rank asserts the same
 * verdict. Only rank 0 prints. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "call.h"
#include "support_bwd.h"

static int rank, nranks;

/* This rank's measurements of the last case's backward call. */
static ra_timing last_bwd;
static uint64_t seed_next = 9100;

/* One case beside the shape. */
typedef struct {
    const char *name;
    ra_layout layout;
    int causal, window;
    int64_t left, right;
    ra_score score;
    int lens, segs, threads;
    ra_rope rope;
    int alibi;
    const ra_additive *additive;
    int64_t bkv; /* key tile width; 0: 48 */
} bcase;

static ra_params params_of(const bcase *c)
{
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.layout = c->layout;
    prm.num.causal = c->causal;
    prm.num.window = c->window;
    prm.num.window_left = c->left;
    prm.num.window_right = c->right;
    prm.num.score = c->score;
    if (c->score == RA_SCORE_GAUSSIAN) /* refused with another score */
        prm.num.sigma = 1.7;
    prm.exec.block_q = 32;
    prm.exec.block_kv = c->bkv ? c->bkv : 48;
    prm.exec.threads = c->threads;
    prm.num.rope = c->rope;
    if (c->rope != RA_ROPE_NONE) /* refused without a rotation */
        prm.num.rope_base = 300.0;
    prm.num.alibi = c->alibi;
    prm.num.additive = c->additive;
    return prm;
}

/* The additive weights' gradients, the same on every rank: tallied by
 * rank 0 alone, so that the sum over ranks counts them once. */
static void tally_weights(bwd_tally *t, const ra_shape *s, const bcase *c,
                          const float *dw, const bwd_ref *ref)
{
    const int64_t len = c->additive->A * (s->D + ra_shape_dk(s) + 1);
    const ra_slice one = {1, {{0, 1, 1}}, 1};
    if (rank == 0)
        bwd_tally_add(t, 3, dw, ref->dw, 1, 1, len, &one);
}

/* This rank's tally of the gradients after forward and backward. */
static bwd_tally run_local(const problem *p, const bcase *c,
                           const float *dout_full, const bwd_ref *ref,
                           const case_masks *cm, local_part *lp, int *ok)
{
    const ra_shape *s = &p->s;
    const ra_params prm = params_of(c);
    const int64_t n = lp->qs.count, m = lp->ks.count, B = s->B;
    const int64_t Dk = ra_shape_dk(s), A = c->additive ? c->additive->A : 0;
    float *dout = malloc(sizeof(float) * (size_t)(B * n * s->H * s->Dv + 1));
    float *dq = malloc(sizeof(float) * (size_t)(B * n * s->H * s->D + 1));
    float *dk = malloc(sizeof(float) * (size_t)(B * m * s->G * Dk + 1));
    float *dv = malloc(sizeof(float) * (size_t)(B * m * s->G * s->Dv + 1));
    float *dw = malloc(sizeof(float) * (size_t)(A * (s->D + Dk + 1) + 1));
    const ra_additive_grads dwg = {dw, dw + A * s->D, dw + A * (s->D + Dk)};
    slice_gather(dout_full, B, s->N, s->H * s->Dv, sizeof(float), &lp->qs,
                 dout);
    ra_status st = ra_call_forward(MPI_COMM_WORLD, s, &prm, &cm->local,
                                   &(ra_qkv){lp->q, lp->k, lp->v},
                                   &(ra_out){lp->o, lp->lse, NULL}, NULL);
    if (st == RA_OK)
        st = ra_call_backward(MPI_COMM_WORLD, s, &prm, &cm->local,
                              &(ra_qkv){lp->q, lp->k, lp->v},
                              &(ra_grads){lp->o, lp->lse, dout, dq, dk, dv,
                                          A ? &dwg : NULL},
                              &last_bwd);
    *ok = st == RA_OK;
    bwd_tally t = {0};
    if (st == RA_OK) {
        bwd_tally_add(&t, 0, dq, ref->dq, B, s->N, s->H * s->D, &lp->qs);
        bwd_tally_add(&t, 1, dk, ref->dk, B, s->M, s->G * Dk, &lp->ks);
        bwd_tally_add(&t, 2, dv, ref->dv, B, s->M, s->G * s->Dv, &lp->ks);
        if (A)
            tally_weights(&t, s, c, dw, ref);
    } else if (rank == 0) {
        printf("# %s: %s\n", c->name, ra_error_message());
    }
    free(dout);
    free(dq);
    free(dk);
    free(dv);
    free(dw);
    return t;
}

static void expect_ok(ra_shape s, bcase c)
{
    const uint64_t seed = seed_next++;
    problem p;
    problem_make(&p, &s, seed);
    const int64_t nd = s.B * s.N * s.H * s.Dv;
    float *dout = malloc(sizeof(float) * (size_t)(nd + 1));
    ra_random_normal(seed, RA_STREAM_DO, 0, nd, dout);
    const ra_params prm = params_of(&c);
    local_part lp;
    local_part_make(&lp, &p, &prm, ra_params_layout(&prm, c.segs), rank, nranks);
    case_masks cm;
    case_masks_make(&cm, &s, c.lens, c.segs, 13, seed, &lp);
    cm.lens[0] = 0; /* a batch whose queries all see nothing */
    bwd_ref ref;
    bwd_ref_make(&ref, &p, &prm, &cm.global, dout);
    int ok_local;
    const bwd_tally t = run_local(&p, &c, dout, &ref, &cm, &lp, &ok_local);
    bwd_tally g;
    double failed = !ok_local, any_failed;
    MPI_Allreduce(&t, &g, BWD_TALLY_DOUBLES, MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    MPI_Allreduce(&failed, &any_failed, 1, MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    const double e[4] = {bwd_tally_rel(&g, 0), bwd_tally_rel(&g, 1),
                         bwd_tally_rel(&g, 2), bwd_tally_rel(&g, 3)};
    const int ok = any_failed == 0 && g.nonfinite == 0 && e[0] < 1e-5 &&
                   e[1] < 1e-5 && e[2] < 1e-5 && e[3] < 1e-5 &&
                   g.ref2[0] > 0 && (!c.additive || g.ref2[3] > 0);
    if (rank == 0)
        printf("# P=%d %-16s B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld "
               "Dv=%lld %s  dq=%.2e dk=%.2e dv=%.2e dw=%.2e nonfinite=%.0f "
               "%s\n",
               nranks, c.name, (long long)s.B, (long long)s.N, (long long)s.M,
               (long long)s.H, (long long)s.G, (long long)s.D,
               (long long)s.Dv,
               ra_layout_name(ra_params_layout(&prm, c.segs)), e[0], e[1],
               e[2], e[3], g.nonfinite, ok ? "PASS" : "FAIL");
    bwd_ref_free(&ref);
    case_masks_free(&cm);
    local_part_free(&lp);
    free(dout);
    problem_free(&p);
    assert_true(ok);
}

static void test_layouts(void **state)
{
    (void)state;
    const ra_shape s = {2, 211, 211, 4, 2, 32, 24};
    const ra_layout lays[3] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                               RA_LAYOUT_STRIPED};
    for (int i = 0; i < 3; i++) {
        expect_ok(s, (bcase){.name = "plain", .layout = lays[i],
                             .threads = 1});
        expect_ok(s, (bcase){.name = "causal", .layout = lays[i],
                             .causal = 1, .threads = 1});
    }
}

static void test_mask_rules(void **state)
{
    (void)state;
    const ra_shape s = {2, 257, 257, 2, 1, 16, 16};
    expect_ok(s, (bcase){.name = "window", .layout = RA_LAYOUT_CONTIGUOUS,
                         .window = 1, .left = 20, .right = 5, .threads = 1});
    expect_ok(s, (bcase){.name = "causal-window", .layout = RA_LAYOUT_ZIGZAG,
                         .causal = 1, .window = 1, .left = 70, .right = 0,
                         .threads = 1});
    expect_ok(s, (bcase){.name = "causal-lens", .layout = RA_LAYOUT_ZIGZAG,
                         .causal = 1, .lens = 1, .threads = 1});
    expect_ok(s, (bcase){.name = "segments", .layout = RA_LAYOUT_STRIPED,
                         .segs = 1, .threads = 1});
    expect_ok(s, (bcase){.name = "causal-segs-lens",
                         .layout = RA_LAYOUT_CONTIGUOUS, .causal = 1,
                         .segs = 1, .lens = 1, .threads = 2});
}

static void test_cross_gqa_gaussian(void **state)
{
    (void)state;
    const ra_shape cross = {1, 150, 233, 6, 3, 24, 40};
    expect_ok(cross, (bcase){.name = "cross-causal",
                             .layout = RA_LAYOUT_CONTIGUOUS, .causal = 1,
                             .threads = 1});
    expect_ok(cross, (bcase){.name = "cross-zigzag", .layout = RA_LAYOUT_ZIGZAG,
                             .threads = 2});
    /* N > M causal: the first N - M rows see no key */
    const ra_shape tall = {2, 200, 61, 2, 2, 16, 8};
    expect_ok(tall, (bcase){.name = "empty-rows", .layout = RA_LAYOUT_STRIPED,
                            .causal = 1, .lens = 1, .threads = 1});
    const ra_shape sq = {1, 190, 190, 2, 1, 16, 16};
    expect_ok(sq, (bcase){.name = "gaussian", .layout = RA_LAYOUT_ZIGZAG,
                          .score = RA_SCORE_GAUSSIAN, .threads = 1});
    expect_ok(sq, (bcase){.name = "gaussian-causal",
                          .layout = RA_LAYOUT_STRIPED, .causal = 1,
                          .score = RA_SCORE_GAUSSIAN, .threads = 1});
}

/* Hidden units of the additive cases' weights. */
enum { ADD_A = 16 };

/* The additive score's weights for shape s (wq: ADD_A x D, wk: ADD_A x
 * Dk, wv: ADD_A), drawn from the next case's seed; w_q and w_k scaled by
 * 0.3. */
static ra_additive additive_weights(const ra_shape *s, float *wq, float *wk,
                                    float *wv)
{
    ra_random_normal(seed_next, RA_STREAM_W_Q, 0, ADD_A * s->D, wq);
    ra_random_normal(seed_next, RA_STREAM_W_K, 0, ADD_A * s->Dk, wk);
    ra_random_normal(seed_next, RA_STREAM_W_V, 0, ADD_A, wv);
    for (int64_t i = 0; i < ADD_A * s->D; i++)
        wq[i] *= 0.3f;
    for (int64_t i = 0; i < ADD_A * s->Dk; i++)
        wk[i] *= 0.3f;
    return (ra_additive){ADD_A, wq, wk, wv};
}

/* The additive score: keys of another dim, GQA, masks; the gradients of
 * q, k, v and of w_q, w_k, w_v. */
static void test_additive(void **state)
{
    (void)state;
    const ra_shape s = {2, 97, 131, 4, 2, 12, 10, 20};
    float wq[ADD_A * 12], wk[ADD_A * 20], wv[ADD_A];
    const ra_additive ad = additive_weights(&s, wq, wk, wv);
    expect_ok(s, (bcase){.name = "additive", .layout = RA_LAYOUT_CONTIGUOUS,
                         .score = RA_SCORE_ADDITIVE, .additive = &ad,
                         .threads = 1});
    expect_ok(s, (bcase){.name = "additive-causal", .layout = RA_LAYOUT_ZIGZAG,
                         .causal = 1, .lens = 1, .score = RA_SCORE_ADDITIVE,
                         .additive = &ad, .threads = 2});
    const ra_shape sq = {1, 113, 113, 2, 1, 8, 8, 8};
    expect_ok(sq, (bcase){.name = "additive-segs-alibi",
                          .layout = RA_LAYOUT_STRIPED, .segs = 1,
                          .alibi = 1, .score = RA_SCORE_ADDITIVE,
                          .additive = &ad, .threads = 1});
}

/* RoPE (both pairings) and ALiBi, alone and together, over the layouts. */
static void test_posenc(void **state)
{
    (void)state;
    const ra_shape s = {2, 181, 181, 4, 2, 16, 12};
    const ra_shape cross = {1, 90, 143, 2, 1, 8, 8};
    expect_ok(s, (bcase){.name = "rope-interleaved",
                         .layout = RA_LAYOUT_ZIGZAG, .causal = 1,
                         .rope = RA_ROPE_INTERLEAVED, .threads = 1});
    expect_ok(s, (bcase){.name = "rope-half", .layout = RA_LAYOUT_STRIPED,
                         .rope = RA_ROPE_HALF, .lens = 1, .threads = 2});
    expect_ok(s, (bcase){.name = "alibi-causal", .layout = RA_LAYOUT_ZIGZAG,
                         .causal = 1, .alibi = 1, .threads = 1});
    expect_ok(s, (bcase){.name = "alibi-window",
                         .layout = RA_LAYOUT_CONTIGUOUS, .window = 1,
                         .left = 30, .right = 7, .alibi = 1, .threads = 1});
    expect_ok(cross, (bcase){.name = "rope-alibi-cross",
                             .layout = RA_LAYOUT_CONTIGUOUS, .causal = 1,
                             .rope = RA_ROPE_HALF, .alibi = 1, .threads = 1});
    expect_ok(cross, (bcase){.name = "rope-gaussian",
                             .layout = RA_LAYOUT_STRIPED,
                             .score = RA_SCORE_GAUSSIAN,
                             .rope = RA_ROPE_INTERLEAVED, .alibi = 1,
                             .threads = 1});
}

/* Weight gradients asked for with one of the three missing: refused on
 * every rank alike before any transfer. */
/* Balanced runs (uneven counts per rank) under causal, a window and both,
 * with padding; last, so that the cases above keep their seeds. */
static void test_balanced(void **state)
{
    (void)state;
    const ra_shape s = {2, 257, 257, 2, 1, 16, 16};
    expect_ok(s, (bcase){.name = "causal", .layout = RA_LAYOUT_BALANCED,
                         .causal = 1, .threads = 1});
    expect_ok(s, (bcase){.name = "window", .layout = RA_LAYOUT_BALANCED,
                         .window = 1, .left = 20, .right = 5, .threads = 1});
    expect_ok(s, (bcase){.name = "causal-window", .layout = RA_LAYOUT_BALANCED,
                         .causal = 1, .window = 1, .left = 70, .right = 0,
                         .lens = 1, .threads = 2});
}

static void test_weights_refused(void **state)
{
    (void)state;
    const ra_shape s = {1, 16, 16, 2, 1, 4, 4};
    enum { A = 3 };
    float w[A * 9] = {0}, buf[1024] = {0};
    const ra_additive ad = {A, w, w + A * 4, w + A * 8};
    ra_params prm = params_of(&(bcase){.layout = RA_LAYOUT_CONTIGUOUS,
                                       .score = RA_SCORE_ADDITIVE,
                                       .additive = &ad, .threads = 1});
    const ra_additive_grads dw = {buf, NULL, buf};
    const ra_status st = ra_call_backward(MPI_COMM_WORLD, &s, &prm, NULL,
                                          &(ra_qkv){buf, buf, buf},
                                          &(ra_grads){buf, buf, buf, buf,
                                                      buf, buf, &dw},
                                          NULL);
    if (rank == 0)
        printf("# refused: %s\n", ra_error_message());
    assert_int_equal(st, RA_ERR_ARG);
}

/* Key tiles wider than a query tile's band: each query tile's products
 * run over the part of the key tile it may see (kernel_bwd.c, band_keys),
 * with every score, the masks and position encodings around it; the
 * Gaussian's key terms are read from that part's offset. */
static void test_band_keys(void **state)
{
    (void)state;
    const ra_shape s = {2, 301, 301, 4, 2, 16, 16};
    expect_ok(s, (bcase){.name = "band-causal", .layout = RA_LAYOUT_BALANCED,
                         .causal = 1, .window = 1, .left = 40, .lens = 1,
                         .threads = 2, .bkv = 160});
    expect_ok(s, (bcase){.name = "band-gaussian", .layout = RA_LAYOUT_ZIGZAG,
                         .window = 1, .left = 25, .right = 10, .segs = 1,
                         .score = RA_SCORE_GAUSSIAN, .threads = 1,
                         .bkv = 128});
    expect_ok(s, (bcase){.name = "band-rope-alibi",
                         .layout = RA_LAYOUT_STRIPED, .causal = 1,
                         .window = 1, .left = 50, .rope = RA_ROPE_HALF,
                         .alibi = 1, .threads = 1, .bkv = 192});
    const ra_shape sa = {1, 211, 211, 4, 2, 12, 10, 20};
    float wq[ADD_A * 12], wk[ADD_A * 20], wv[ADD_A];
    const ra_additive ad = additive_weights(&sa, wq, wk, wv);
    expect_ok(sa, (bcase){.name = "band-additive",
                          .layout = RA_LAYOUT_CONTIGUOUS, .causal = 1,
                          .window = 1, .left = 30, .score = RA_SCORE_ADDITIVE,
                          .additive = &ad, .threads = 1, .bkv = 128});
}

/* With contiguous slices wider than the window, the backward's ring moves
 * what the forward's does (the left neighbour's last L keys) and their
 * dk|dv accumulator once, home: about 2 L rows per rank, not a block and
 * its accumulator (ring_bwd.c); still checked against the reference. */
static void test_window_bytes(void **state)
{
    (void)state;
    const ra_shape s = {1, 1200, 1200, 2, 1, 8, 8};
    const int64_t L = 10, row_bytes = 4 * s.G * (s.D + s.Dv);
    expect_ok(s, (bcase){.name = "window-bytes",
                         .layout = RA_LAYOUT_CONTIGUOUS, .causal = 1,
                         .window = 1, .left = L, .threads = 1});
    long long most = (long long)last_bwd.bytes_sent, all_most;
    MPI_Allreduce(&most, &all_most, 1, MPI_LONG_LONG, MPI_MAX,
                  MPI_COMM_WORLD);
    if (rank == 0)
        printf("# window %lld: at most %lld bytes sent per rank (%lld rows)\n",
               (long long)L, all_most, all_most / (long long)row_bytes);
    assert_true(all_most <= (nranks > 1 ? 2 * L : 0) * row_bytes);
    assert_true(nranks == 1 || all_most > 0);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_mask_rules),
        cmocka_unit_test(test_cross_gqa_gaussian),
        cmocka_unit_test(test_additive),
        cmocka_unit_test(test_posenc),
        cmocka_unit_test(test_weights_refused),
        cmocka_unit_test(test_balanced),
        cmocka_unit_test(test_band_keys),
        cmocka_unit_test(test_window_bytes),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
