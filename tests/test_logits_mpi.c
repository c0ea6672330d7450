/* test_logits_mpi.c: logit softcapping and attention sinks (issue 42) on
 * every strategy, forward and backward, at P = 1..4, against the fp64
 * references of tests/support*.c (the cap inside the score's definition,
 * the sink as one more softmax column of value 0).
 *
 * A covering design rather than the full product: each case runs one
 * strategy's forward (judged by check_slice), then the ring's backward
 * from that forward's (o, lse) (dq, dk, dv and d sinks judged as whole
 * tensors), and the cases together cover every strategy, both features,
 * causal and sliding windows, GQA, lens and segments, ALiBi with the cap,
 * rows that see no key, bf16 and two threads. Every rank judges the
 * summed tallies; rank 0 prints. Then the refusals, by name. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bf16.h"
#include "call.h"
#include "support_bwd.h"

static int rank, nranks;
static uint64_t seed_next = 4200;

typedef struct {
    const char *name;
    ra_strategy strategy;
    ra_layout layout;
    int causal, window, lens, segs, alibi, sinks, bf16, threads;
    double softcap;
} lcase;

/* Sinks of head h: from below to above a typical row's lse (log M). */
static const float sink_values[4] = {0.5f, 2.0f, 3.5f, 5.0f};

static ra_params params_of(const lcase *c)
{
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.strategy = c->strategy;
    prm.exec.layout = c->layout;
    prm.num.causal = c->causal;
    prm.num.window = c->window;
    prm.num.window_left = 20;
    prm.num.window_right = 5;
    prm.num.alibi = c->alibi;
    prm.num.softcap = c->softcap;
    prm.num.sinks = c->sinks ? sink_values : NULL;
    prm.num.precision = c->bf16 ? RA_PRECISION_BF16 : RA_PRECISION_FP32;
    prm.exec.threads = c->threads;
    prm.exec.block_q = 32;
    prm.exec.block_kv = 48;
    return prm;
}

/* The summed verdict of one case: forward tally, gradient tally, d sinks
 * error, and whether any rank failed. */
typedef struct {
    check_result fwd;
    bwd_tally grads;
    double dsink_err2, dsink_ref2, failed;
} lverdict;

/* d sinks against the reference: every rank has the same values, so rank
 * 0 alone adds them to the sums. */
static void tally_dsinks(lverdict *v, const float *got, const double *ref,
                         int64_t H)
{
    for (int64_t h = 0; rank == 0 && h < H; h++) {
        v->dsink_err2 += (got[h] - ref[h]) * (got[h] - ref[h]);
        v->dsink_ref2 += ref[h] * ref[h];
    }
}

/* This rank's forward (strategy c->strategy) and backward (ring). */
static lverdict run_local(const problem *p, const lcase *c, const float *dfull,
                          const bwd_ref *ref, const case_masks *m,
                          local_part *lp)
{
    const ra_shape *s = &p->s;
    const ra_params prm = params_of(c);
    const int64_t n = lp->qs.count, mk = lp->ks.count, B = s->B;
    float *dout = malloc(sizeof(float) * (size_t)(B * n * s->H * s->Dv + 1));
    float *dq = malloc(sizeof(float) * (size_t)(B * n * s->H * s->D + 1));
    float *dk = malloc(sizeof(float) * (size_t)(B * mk * s->G * s->D + 1));
    float *dv = malloc(sizeof(float) * (size_t)(B * mk * s->G * s->Dv + 1));
    float dsinks[4] = {0};
    slice_gather(dfull, B, s->N, s->H * s->Dv, sizeof(float), &lp->qs, dout);
    const ra_qkv in = {lp->q, lp->k, lp->v};
    lverdict v = {0};
    ra_status st = ra_call_forward(MPI_COMM_WORLD, s, &prm, &m->local, &in,
                                   &(ra_out){lp->o, lp->lse, NULL}, NULL);
    if (st == RA_OK) {
        v.fwd = check_slice(p, &prm, &m->global, &lp->qs, lp->o, lp->lse);
        st = ra_call_backward(
            MPI_COMM_WORLD, s, &prm, &m->local, &in,
            &(ra_grads){lp->o, lp->lse, dout, dq, dk, dv, NULL,
                        c->sinks ? dsinks : NULL},
            NULL);
    }
    v.failed = st != RA_OK;
    if (st == RA_OK) {
        bwd_tally_add(&v.grads, 0, dq, ref->dq, B, s->N, s->H * s->D,
                      &lp->qs);
        bwd_tally_add(&v.grads, 1, dk, ref->dk, B, s->M, s->G * s->D,
                      &lp->ks);
        bwd_tally_add(&v.grads, 2, dv, ref->dv, B, s->M, s->G * s->Dv,
                      &lp->ks);
        if (c->sinks)
            tally_dsinks(&v, dsinks, ref->dsinks, s->H);
    } else if (rank == 0) {
        printf("# %s: %s\n", c->name, ra_error_message());
    }
    free(dout);
    free(dq);
    free(dk);
    free(dv);
    return v;
}

/* The verdicts summed over the ranks. */
static lverdict verdict_sum(const lverdict *v)
{
    lverdict g = *v;
    g.fwd = check_allreduce(MPI_COMM_WORLD, &v->fwd);
    double loc[3] = {v->dsink_err2, v->dsink_ref2, v->failed}, sum[3];
    MPI_Allreduce(&v->grads, &g.grads, BWD_TALLY_DOUBLES, MPI_DOUBLE,
                  MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(loc, sum, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    g.dsink_err2 = sum[0];
    g.dsink_ref2 = sum[1];
    g.failed = sum[2];
    return g;
}

static void expect_ok(ra_shape s, lcase c)
{
    const uint64_t seed = seed_next++;
    problem p;
    problem_make(&p, &s, seed);
    const int64_t nd = s.B * s.N * s.H * s.Dv;
    float *dout = malloc(sizeof(float) * (size_t)nd);
    ra_random_normal(seed, RA_STREAM_DO, 0, nd, dout);
    if (c.bf16) { /* the references then see what the products see */
        ra_bf16_round(p.q, s.B * s.N * s.H * s.D);
        ra_bf16_round(p.k, s.B * s.M * s.G * s.D);
        ra_bf16_round(p.v, s.B * s.M * s.G * s.Dv);
        ra_bf16_round(dout, nd);
    }
    const ra_params prm = params_of(&c);
    local_part lp;
    local_part_make(&lp, &p, &prm, ra_params_layout(&prm, c.segs), rank,
                    nranks);
    case_masks m;
    case_masks_make(&m, &s, c.lens, c.segs, 17, seed, &lp);
    bwd_ref ref;
    bwd_ref_make(&ref, &p, &prm, &m.global, dout);
    const lverdict v = run_local(&p, &c, dout, &ref, &m, &lp);
    const lverdict g = verdict_sum(&v);
    const double tol = c.bf16 ? 2e-2 : 1e-5;
    const double e[4] = {bwd_tally_rel(&g.grads, 0),
                         bwd_tally_rel(&g.grads, 1),
                         bwd_tally_rel(&g.grads, 2),
                         c.sinks ? sqrt(g.dsink_err2 / g.dsink_ref2) : 0.0};
    const int ok = g.failed == 0 && check_ok(&g.fwd) &&
                   g.grads.nonfinite == 0 && e[0] < tol && e[1] < tol &&
                   e[2] < tol && e[3] < tol && g.grads.ref2[0] > 0 &&
                   (!c.sinks || g.dsink_ref2 > 0);
    if (rank == 0)
        printf("# P=%d %-22s %-9s o=%.2e lse=%.2e dq=%.2e dk=%.2e dv=%.2e "
               "dsinks=%.2e %s\n",
               nranks, c.name, ra_strategy_name(c.strategy), g.fwd.rel_o,
               g.fwd.max_lse, e[0], e[1], e[2], e[3], ok ? "PASS" : "FAIL");
    bwd_ref_free(&ref);
    case_masks_free(&m);
    local_part_free(&lp);
    free(dout);
    problem_free(&p);
    assert_true(ok);
}

static void test_strategies(void **state)
{
    (void)state;
    const ra_shape gqa = {2, 97, 97, 4, 2, 16, 16};
    const ra_layout C = RA_LAYOUT_CONTIGUOUS, Z = RA_LAYOUT_ZIGZAG,
                    S = RA_LAYOUT_STRIPED;
    const lcase cases[] = {
        {"causal-cap-sinks", RA_STRATEGY_RING, C, 1, 0, 0, 0, 0, 1, 0, 1,
         1.5},
        {"window-cap", RA_STRATEGY_ALLGATHER, Z, 0, 1, 0, 0, 0, 0, 0, 1,
         2.0},
        {"alibi-sinks", RA_STRATEGY_TREE, S, 0, 0, 0, 0, 1, 1, 0, 1, 0.0},
        {"causal-window-all", RA_STRATEGY_RING_Q, C, 1, 1, 0, 0, 1, 1, 0, 1,
         1.5},
        {"causal-segs-cap-sinks", RA_STRATEGY_ULYSSES, Z, 1, 0, 0, 1, 0, 1,
         0, 1, 3.0},
        {"lens-cap-sinks", RA_STRATEGY_HYBRID, C, 0, 0, 1, 0, 0, 1, 0, 1,
         1.5},
        {"segs-lens-alibi-all", RA_STRATEGY_RING, S, 1, 0, 1, 1, 1, 1, 0, 2,
         2.0},
        {"bf16-causal-cap-sinks", RA_STRATEGY_RING, Z, 1, 0, 0, 0, 0, 1, 1,
         1, 1.5},
        {"bf16-window-alibi-sinks", RA_STRATEGY_ULYSSES, C, 0, 1, 0, 0, 1, 1, 1, 1,
         2.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_ok(gqa, cases[i]);
    /* N > M causal: the first rows see no key (o = 0, lse = sink) */
    const ra_shape tall = {2, 90, 41, 2, 1, 8, 8};
    expect_ok(tall, (lcase){"empty-rows-cap-sinks", RA_STRATEGY_RING, S, 1,
                            0, 0, 0, 0, 1, 0, 1, 1.5});
}

/* The call's status and whether its message names `what`. */
static void expect_refused(const ra_params *prm, const ra_attn_map *map,
                           const char *what)
{
    const ra_shape s = {1, 8, 8, 4, 2, 8, 8};
    problem p;
    problem_make(&p, &s, 1);
    local_part lp;
    local_part_make(&lp, &p, prm, RA_LAYOUT_CONTIGUOUS, rank, nranks);
    const ra_status st = ra_call_forward(
        MPI_COMM_WORLD, &s, prm, NULL, &(ra_qkv){lp.q, lp.k, lp.v},
        &(ra_out){lp.o, lp.lse, (ra_attn_map *)map}, NULL);
    if (rank == 0)
        printf("# refused: %s\n", ra_error_message());
    assert_int_equal(st, RA_ERR_ARG);
    assert_non_null(strstr(ra_error_message(), what));
    local_part_free(&lp);
    problem_free(&p);
}

static void test_refusals(void **state)
{
    (void)state;
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.layout = RA_LAYOUT_CONTIGUOUS;
    prm.num.softcap = -1.0;
    expect_refused(&prm, NULL, "softcap");
    prm.num.softcap = INFINITY;
    expect_refused(&prm, NULL, "softcap");
    prm.num.softcap = 2.0;
    prm.num.score = RA_SCORE_GAUSSIAN;
    expect_refused(&prm, NULL, "softcap: the gaussian score");
    prm.num.score = RA_SCORE_DOT;
    prm.num.softcap = 0.0;
    const float bad[4] = {0.0f, NAN, 1.0f, 2.0f};
    prm.num.sinks = bad;
    expect_refused(&prm, NULL, "sinks: sink 1");
    prm.num.sinks = sink_values;
    const int64_t heads[1] = {0};
    float out[8 * 8];
    const ra_attn_map map = {0, 8, heads, 1, out};
    expect_refused(&prm, &map, "sinks: the attention map");
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strategies),
        cmocka_unit_test(test_refusals),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
