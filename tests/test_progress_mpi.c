/* test_progress_mpi.c: the progress callback ra_params.on_step, at
 * P = 1..4 with 2 threads per rank: for every strategy (and the ring with a
 * window, with an attention map, and the backward pass) it is called after
 * each step with done = 1 .. total in order, the ring's total equal to the
 * steps it ran (ra_timing.steps), a strategy without steps once with 1 of
 * 1; always on the calling thread and outside OpenMP regions; and the
 * results are the same bits with and without it, and right against the
 * fp64 reference. The tile callback ra_params.on_tick is called on the
 * calling thread between tiles, for every strategy, with shares in [0, 1],
 * and changes no bit of the results. Verdicts are reduced over the ranks;
 * rank 0 prints. */
#include <omp.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "call.h"
#include "support.h"

static int rank, nranks;

enum { MAX_CALLS = 64 };

/* What the callback saw. */
typedef struct {
    int n, done[MAX_CALLS], total[MAX_CALLS];
    int wrong_thread, in_parallel;
    pthread_t caller;
} calls;

static void on_step(void *ctx, int done, int total)
{
    calls *c = ctx;
    if (c->n < MAX_CALLS) {
        c->done[c->n] = done;
        c->total[c->n] = total;
    }
    c->n++;
    c->wrong_thread |= !pthread_equal(pthread_self(), c->caller);
    c->in_parallel |= omp_in_parallel();
}

/* 1 when the calls are 1/total .. total/total in order, total == want
 * (want < 0: any total). */
static int calls_ok(const calls *c, int want)
{
    if (c->n < 1 || c->n > MAX_CALLS || c->wrong_thread || c->in_parallel)
        return 0;
    const int total = c->total[0];
    if (c->n != total || (want >= 0 && total != want))
        return 0;
    for (int i = 0; i < c->n; i++)
        if (c->done[i] != i + 1 || c->total[i] != total)
            return 0;
    return 1;
}

/* The steps a strategy runs at P ranks (the ring's: ra_timing.steps). */
static int steps_of(ra_strategy st, int64_t u)
{
    switch (st) {
    case RA_STRATEGY_RING_Q:
    case RA_STRATEGY_ALLGATHER:
        return nranks;
    case RA_STRATEGY_HYBRID:
        return (int)(nranks / u);
    case RA_STRATEGY_ULYSSES:
    case RA_STRATEGY_TREE:
        return 1;
    default:
        return -1;
    }
}

/* The options every case starts from: causal, contiguous, the strategy
 * (hybrid in groups of 2 ranks where P is even). */
static void case_params(ra_params *prm, ra_strategy strategy)
{
    ra_params_default(prm);
    prm->exec.layout = RA_LAYOUT_CONTIGUOUS;
    prm->exec.strategy = strategy;
    prm->num.causal = 1;
    if (strategy == RA_STRATEGY_HYBRID)
        prm->exec.ulysses_size = nranks % 2 ? 1 : 2;
}

/* One forward call with and without the callback; 1 when all is well on
 * every rank. */
static int forward_case(ra_strategy strategy, int window, int map)
{
    const ra_shape s = {.B = 2, .N = 67, .M = 67, .H = 4, .G = 2, .D = 16,
                        .Dv = 8};
    problem p;
    problem_make(&p, &s, 1000u + (unsigned)strategy * 7u + (unsigned)window);
    local_part lp;
    local_part_make(&lp, &p, NULL, RA_LAYOUT_CONTIGUOUS, rank, nranks);
    ra_params prm;
    case_params(&prm, strategy);
    prm.exec.threads = 2;
    prm.num.window = window;
    prm.num.window_left = 9;
    const size_t no = (size_t)(s.B * lp.qs.count * s.H * s.Dv);
    const size_t nl = (size_t)(s.B * s.H * lp.qs.count);
    float *o0 = malloc(sizeof(float) * (no + nl + 1)), *l0 = o0 + no;
    int64_t heads[1] = {1};
    ra_attn_map am = {0, s.N, heads, 1, NULL};
    const ra_range rows =
        ra_attn_map_rows(prm.exec.layout, NULL, s.N, rank, nranks, &am);
    am.out = malloc(sizeof(float) * (size_t)(s.B * rows.count * s.M + 1));
    ra_timing tm = {0};
    ra_status st = ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                                   &(ra_qkv){lp.q, lp.k, lp.v},
                                   &(ra_out){o0, l0, NULL}, &tm);
    calls c = {.caller = pthread_self()};
    prm.exec.on_step = on_step;
    prm.exec.on_step_ctx = &c;
    if (st == RA_OK && map)
        st = ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                             &(ra_qkv){lp.q, lp.k, lp.v},
                             &(ra_out){lp.o, lp.lse, &am}, NULL);
    else if (st == RA_OK)
        st = ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                             &(ra_qkv){lp.q, lp.k, lp.v},
                             &(ra_out){lp.o, lp.lse, NULL}, NULL);
    const int ring_steps = tm.steps * (map ? 2 : 1);
    const int want = strategy == RA_STRATEGY_RING
                         ? ring_steps
                         : steps_of(strategy, prm.exec.ulysses_size);
    int ok = st == RA_OK && calls_ok(&c, want) &&
             memcmp(o0, lp.o, sizeof(float) * no) == 0 &&
             memcmp(l0, lp.lse, sizeof(float) * nl) == 0;
    check_result r = {0};
    if (st == RA_OK)
        r = check_slice(&p, &prm, NULL, &lp.qs, lp.o, lp.lse);
    const check_result g = check_allreduce(MPI_COMM_WORLD, &r);
    int all_ok = 0;
    ok = ok && check_ok(&g);
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d %-9s window=%d map=%d calls=%d (last %d/%d, want %d) "
               "rel_o=%.2e %s\n", nranks, ra_strategy_name(strategy), window,
               map, c.n, c.n ? c.done[c.n - 1] : 0, c.n ? c.total[c.n - 1] : 0,
               want, g.rel_o, all_ok ? "PASS" : "FAIL");
    free(am.out);
    free(o0);
    local_part_free(&lp);
    problem_free(&p);
    return all_ok;
}

/* Every strategy, in the order the tests try them. */
static const ra_strategy all[] = {
    RA_STRATEGY_RING, RA_STRATEGY_RING_Q, RA_STRATEGY_ALLGATHER,
    RA_STRATEGY_ULYSSES, RA_STRATEGY_HYBRID, RA_STRATEGY_TREE};
enum { STRATEGIES = sizeof all / sizeof *all };

static void test_strategies(void **state)
{
    int ok = 1;
    for (size_t i = 0; i < STRATEGIES; i++)
        ok &= forward_case(all[i], 0, 0);
    assert_true(ok);
}

static void test_ring_window_and_map(void **state)
{
    const int window = forward_case(RA_STRATEGY_RING, 1, 0);
    const int map = forward_case(RA_STRATEGY_RING, 0, 1);
    assert_true(window && map);
}

/* What the tile callback saw. */
typedef struct {
    int n, wrong_thread, bad_share;
    pthread_t caller;
} ticks;

static void on_tick(void *ctx, double share)
{
    ticks *t = ctx;
    t->n++;
    t->wrong_thread |= !pthread_equal(pthread_self(), t->caller);
    t->bad_share |= !(share >= 0.0 && share <= 1.0);
}

/* One forward call with 32 x 32 tiles (every rank computes several of
 * them) without and with the tile callback; 1 when, on every rank, it was
 * called at least once, on the calling thread, with shares in [0, 1], and
 * the outputs are the same bits. */
static int tick_case(ra_strategy strategy)
{
    const ra_shape s = {.B = 1, .N = 300, .M = 300, .H = 4, .G = 2, .D = 16,
                        .Dv = 16};
    problem p;
    problem_make(&p, &s, 31u + (unsigned)strategy);
    local_part lp;
    local_part_make(&lp, &p, NULL, RA_LAYOUT_CONTIGUOUS, rank, nranks);
    ra_params prm;
    case_params(&prm, strategy);
    prm.exec.block_q = prm.exec.block_kv = 32;
    const size_t no = (size_t)(s.B * lp.qs.count * s.H * s.Dv);
    const size_t nl = (size_t)(s.B * s.H * lp.qs.count);
    float *o0 = malloc(sizeof(float) * (no + nl + 1)), *l0 = o0 + no;
    ra_status st = ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                                   &(ra_qkv){lp.q, lp.k, lp.v},
                                   &(ra_out){o0, l0, NULL}, NULL);
    ticks t = {.caller = pthread_self()};
    prm.exec.on_tick = on_tick;
    prm.exec.on_step_ctx = &t;
    if (st == RA_OK)
        st = ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                             &(ra_qkv){lp.q, lp.k, lp.v},
                             &(ra_out){lp.o, lp.lse, NULL}, NULL);
    int ok = st == RA_OK && t.n > 0 && !t.wrong_thread && !t.bad_share &&
             memcmp(o0, lp.o, sizeof(float) * no) == 0 &&
             memcmp(l0, lp.lse, sizeof(float) * nl) == 0, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d %-9s ticks on rank 0: %d %s\n", nranks,
               ra_strategy_name(strategy), t.n, all_ok ? "PASS" : "FAIL");
    free(o0);
    local_part_free(&lp);
    problem_free(&p);
    return all_ok;
}

static void test_ticks(void **state)
{
    int ok = 1;
    for (size_t i = 0; i < STRATEGIES; i++)
        ok &= tick_case(all[i]);
    assert_true(ok);
}

/* The backward pass reports its ring steps too. */
static void test_backward(void **state)
{
    const ra_shape s = {.B = 1, .N = 40, .M = 40, .H = 2, .G = 1, .D = 8,
                        .Dv = 8};
    problem p;
    problem_make(&p, &s, 77);
    local_part lp;
    local_part_make(&lp, &p, NULL, RA_LAYOUT_CONTIGUOUS, rank, nranks);
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.layout = RA_LAYOUT_CONTIGUOUS;
    prm.exec.threads = 2;
    const size_t nq = (size_t)(s.B * lp.qs.count * s.H * s.D);
    const size_t nk = (size_t)(s.B * lp.ks.count * s.G * s.D);
    float *mem = calloc(2 * nq + 2 * nk + 1, sizeof(float));
    float *dout = mem, *dq = dout + nq, *dk = dq + nq, *dv = dk + nk;
    for (size_t i = 0; i < nq; i++)
        dout[i] = (float)((i % 7) - 3) * 0.25f;
    ra_status st = ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                                   &(ra_qkv){lp.q, lp.k, lp.v},
                                   &(ra_out){lp.o, lp.lse, NULL}, NULL);
    calls c = {.caller = pthread_self()};
    prm.exec.on_step = on_step;
    prm.exec.on_step_ctx = &c;
    ra_timing tm = {0};
    if (st == RA_OK)
        st = ra_call_backward(MPI_COMM_WORLD, &s, &prm, NULL,
                              &(ra_qkv){lp.q, lp.k, lp.v},
                              &(ra_grads){lp.o, lp.lse, dout, dq, dk, dv,
                                          NULL},
                              &tm);
    int ok = st == RA_OK && calls_ok(&c, tm.steps), all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d backward calls=%d steps=%d %s\n", nranks, c.n,
               tm.steps, all_ok ? "PASS" : "FAIL");
    free(mem);
    local_part_free(&lp);
    problem_free(&p);
    assert_true(all_ok);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strategies),
        cmocka_unit_test(test_ring_window_and_map),
        cmocka_unit_test(test_backward),
        cmocka_unit_test(test_ticks),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
