/* test_ring_mpi.c: ra_forward over P ranks against the fp64 reference.
 * Run by ctest under mpiexec at P = 1..4. Every rank builds the same full
 * problem from the seed, passes its slice, and checks its own rows; the
 * verdict is reduced over the communicator before cmocka asserts, so every
 * rank passes or fails together. Only rank 0 prints. */
#include <math.h>
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

/* The stride of the long cases' checked rows (check_slice_every): prime
 * to every tile size, so each position within a tile is checked in some
 * tile; the fp64 reference of all 3816 rows was half the test's time. The
 * other cases check every row, the edges of the ranks' slices among them. */
enum { LONG_EVERY = 7 };

/* The rows check_slice_every(..., every) compares in one head of one batch:
 * the multiples of every and the last. */
static int64_t rows_checked(int64_t N, int64_t every)
{
    return (N - 1) / every + 1 + ((N - 1) % every != 0);
}

/* Runs one case, checking the rows check_slice_every picks; returns the
 * global check result. */
static check_result run_case(const ra_shape *s, int causal, uint64_t seed,
                             int64_t block_q, int64_t block_kv, int threads,
                             int64_t every)
{
    problem p;
    problem_make(&p, s, seed);
    ra_params prm;
    ra_params_default(&prm); /* the automatic layout: zigzag when causal */
    prm.num.causal = causal;
    prm.exec.block_q = block_q;
    prm.exec.block_kv = block_kv;
    prm.exec.threads = threads;
    const ra_layout lay = ra_params_layout(&prm, 0);
    local_part lp;
    local_part_make(&lp, &p, &prm, lay, rank, nranks);
    const ra_slice qs = lp.qs;
    float *q = lp.q, *k = lp.k, *v = lp.v, *o = lp.o, *lse = lp.lse;
    ra_status st = ra_call_forward(MPI_COMM_WORLD, s, &prm, NULL,
                                   &(ra_qkv){q, k, v}, &(ra_out){o, lse, NULL},
                                   NULL);
    check_result c = {0};
    if (st == RA_OK)
        c = check_slice_every(&p, &prm, NULL, &qs, o, lse, every);
    else
        c.bad_inf = 1;
    check_result g = check_allreduce(MPI_COMM_WORLD, &c);
    if (rank == 0)
        printf("# P=%d B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld "
               "causal=%d %s bq=%lld bkv=%lld threads=%d  rel_o=%.3e "
               "lse=%.3e bad=%lld rows=%lld %s\n",
               nranks, (long long)s->B, (long long)s->N, (long long)s->M,
               (long long)s->H, (long long)s->G, (long long)s->D,
               (long long)s->Dv, causal, ra_layout_name(lay), (long long)block_q,
               (long long)block_kv, threads, g.rel_o, g.max_lse,
               (long long)g.bad_inf, (long long)g.rows,
               check_ok(&g) ? "PASS" : "FAIL");
    local_part_free(&lp);
    problem_free(&p);
    return g;
}

/* The case checked on every row, or on every-th (LONG_EVERY). */
static void expect_rows(ra_shape s, int causal, uint64_t seed, int64_t every)
{
    check_result g = run_case(&s, causal, seed, 0, 0, 1, every);
    assert_true(g.rows == s.B * s.H * rows_checked(s.N, every));
    assert_true(check_ok(&g));
}

static void expect_ok(ra_shape s, int causal, uint64_t seed)
{
    expect_rows(s, causal, seed, 1);
}

static void test_long_self(void **state)
{
    (void)state;
    ra_shape s = {1, 3816, 3816, 2, 1, 64, 64};
    expect_rows(s, 0, 11, LONG_EVERY);
    expect_rows(s, 1, 12, LONG_EVERY);
}

static void test_cross_gqa(void **state)
{
    (void)state;
    ra_shape s = {1, 1001, 777, 8, 2, 64, 64};
    expect_ok(s, 0, 21);
    expect_ok(s, 1, 22);
}

static void test_d128(void **state)
{
    (void)state;
    ra_shape s = {2, 1000, 1000, 2, 2, 128, 128};
    expect_ok(s, 0, 31);
    expect_ok(s, 1, 32);
}

static void test_fewer_tokens_than_ranks(void **state)
{
    (void)state;
    ra_shape tiny = {2, 3, 2, 2, 1, 8, 8};
    expect_ok(tiny, 0, 41);
    expect_ok(tiny, 1, 42);
    ra_shape one = {1, 1, 1, 1, 1, 1, 1};
    expect_ok(one, 0, 43);
    expect_ok(one, 1, 44);
}

static void test_cross_lengths_causal(void **state)
{
    (void)state;
    /* M > N: bottom-right aligned, every query sees a prefix of keys. */
    ra_shape wide = {1, 7, 1001, 4, 2, 80, 48};
    expect_ok(wide, 1, 51);
    /* N > M: the first N - M queries see no key: o = 0, lse = -inf. */
    ra_shape tall = {1, 1001, 7, 4, 4, 8, 8};
    expect_ok(tall, 1, 52);
}

/* Tiles of 7 x 33 and of 1 x 1 (a product per pair of tokens: on 333
 * tokens, which gives each rank tens of tiles a side at P = 4 as 1001 did,
 * at a ninth of the tiles), one and two threads. */
static void test_odd_tiles_and_threads(void **state)
{
    (void)state;
    ra_shape s = {1, 1001, 1001, 3, 1, 64, 32};
    ra_shape unit = {1, 333, 333, 3, 1, 64, 32};
    for (int threads = 1; threads <= 2; threads++) {
        check_result g = run_case(&s, 1, 61, 7, 33, threads, 1);
        assert_true(check_ok(&g));
        g = run_case(&unit, 0, 62, 1, 1, threads, 1);
        assert_true(check_ok(&g));
    }
}

/* One rank with two threads gives the same bits as with one (each query
 * tile is folded by one thread in the same order whichever thread it is),
 * checked against fp64 too (every LONG_EVERY-th row); the per-thread busy times are sane: equal with
 * one thread, min <= max within the call's compute time with two. */
static void expect_same_bits(ra_shape s, int causal, uint64_t seed)
{
    problem p;
    problem_make(&p, &s, seed);
    ra_params prm;
    ra_params_default(&prm);
    prm.num.causal = causal;
    const ra_layout lay = ra_params_layout(&prm, 0);
    local_part lp[2];
    ra_timing tm[2];
    int ok = 1;
    for (int t = 0; t < 2; t++) {
        local_part_make(&lp[t], &p, &prm, lay, rank, nranks);
        prm.exec.threads = t + 1;
        ok &= ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                              &(ra_qkv){lp[t].q, lp[t].k, lp[t].v},
                              &(ra_out){lp[t].o, lp[t].lse, NULL},
                              &tm[t]) == RA_OK;
    }
    const int64_t n = lp[0].qs.count;
    ok = ok &&
         memcmp(lp[0].o, lp[1].o, sizeof(float) * (size_t)(s.B * n * s.H *
                                                          s.Dv)) == 0 &&
         memcmp(lp[0].lse, lp[1].lse,
                sizeof(float) * (size_t)(s.B * s.H * n)) == 0;
    ok = ok && tm[0].thread_busy_min == tm[0].thread_busy_max &&
         tm[0].thread_busy_max > 0 && tm[0].thread_busy_max <= tm[0].compute &&
         tm[1].thread_busy_min <= tm[1].thread_busy_max &&
         tm[1].thread_busy_max > 0 && tm[1].thread_busy_max <= tm[1].compute;
    prm.exec.threads = 2;
    check_result c = check_slice_every(&p, &prm, NULL, &lp[1].qs, lp[1].o,
                                       lp[1].lse, LONG_EVERY);
    check_result g = check_allreduce(MPI_COMM_WORLD, &c);
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d N=%lld H=%lld G=%lld D=%lld causal=%d: 2 threads %s "
               "1 thread, busy %.3g..%.3g s of %.3g s; rel_o=%.3e %s\n",
               nranks, (long long)s.N, (long long)s.H, (long long)s.G,
               (long long)s.D, causal, all ? "same bits as" : "DIFFER from",
               tm[1].thread_busy_min, tm[1].thread_busy_max, tm[1].compute,
               g.rel_o, all && check_ok(&g) ? "PASS" : "FAIL");
    for (int t = 0; t < 2; t++)
        local_part_free(&lp[t]);
    problem_free(&p);
    assert_true(all);
    assert_true(g.rows == s.B * s.H * rows_checked(s.N, LONG_EVERY) &&
                check_ok(&g));
}

static void test_threads_same_bits(void **state)
{
    (void)state;
    ra_shape s = {2, 1500, 1500, 4, 2, 64, 64};
    expect_same_bits(s, 0, 71);
    expect_same_bits(s, 1, 72);
}

/* The public call: ra_forward on ra_numerics and ra_exec gives the bits of
 * the internal call on the joined options (and the options split back
 * join to the same ones); NULL options are the defaults, checked against
 * the reference; a missing ra_out is refused on every rank alike. */
static void test_public_api(void **state)
{
    (void)state;
    const ra_shape s = {1, 97, 97, 4, 2, 32, 32, 0};
    problem p;
    problem_make(&p, &s, 81);
    ra_numerics num;
    ra_exec exec;
    ra_numerics_default(&num);
    ra_exec_default(&exec);
    num.causal = 1;
    exec.block_q = 16;
    ra_params prm, back;
    ra_params_join(&num, &exec, &prm);
    ra_params_split(&prm, &num, &exec);
    ra_params_join(&num, &exec, &back);
    local_part a, b, d;
    local_part_make(&a, &p, NULL, ra_exec_layout(&num, &exec, 0), rank, nranks);
    local_part_make(&b, &p, &prm, ra_params_layout(&prm, 0), rank, nranks);
    const size_t no = (size_t)(s.B * a.qs.count * s.H * s.Dv);
    const size_t nl = (size_t)(s.B * s.H * a.qs.count);
    const ra_status pub = ra_forward(
        MPI_COMM_WORLD, &s, &num, &exec, NULL, &(ra_qkv){a.q, a.k, a.v},
        &(ra_out){a.o, a.lse, NULL}, NULL);
    const ra_status in = ra_call_forward(
        MPI_COMM_WORLD, &s, &prm, NULL, &(ra_qkv){b.q, b.k, b.v},
        &(ra_out){b.o, b.lse, NULL}, NULL);
    int ok = pub == RA_OK && in == RA_OK && back.num.causal == 1 &&
             back.exec.block_q == 16 &&
             back.exec.stall_timeout == RA_STALL_TIMEOUT_DEFAULT &&
             memcmp(a.o, b.o, sizeof(float) * no) == 0 &&
             memcmp(a.lse, b.lse, sizeof(float) * nl) == 0;
    ra_params dflt;
    ra_params_default(&dflt);
    local_part_make(&d, &p, NULL, ra_exec_layout(NULL, NULL, 0), rank, nranks);
    const ra_status none = ra_forward(
        MPI_COMM_WORLD, &s, NULL, NULL, NULL, &(ra_qkv){d.q, d.k, d.v},
        &(ra_out){d.o, d.lse, NULL}, NULL);
    check_result c = {0};
    if (none == RA_OK)
        c = check_slice(&p, &dflt, NULL, &d.qs, d.o, d.lse);
    else
        c.bad_inf = 1;
    const check_result g = check_allreduce(MPI_COMM_WORLD, &c);
    const ra_status refused = ra_forward(MPI_COMM_WORLD, &s, &num, &exec,
                                         NULL, &(ra_qkv){d.q, d.k, d.v},
                                         NULL, NULL);
    ok &= refused == RA_ERR_ARG &&
          strstr(ra_error_message(), "in and out are required") != NULL;
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# public ra_forward: same bits as the internal call, "
               "defaults rel_o=%.3e, NULL out refused  %s\n", g.rel_o,
               all && check_ok(&g) ? "PASS" : "FAIL");
    local_part_free(&a);
    local_part_free(&b);
    local_part_free(&d);
    problem_free(&p);
    assert_true(all);
    assert_true(check_ok(&g));
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_self),
        cmocka_unit_test(test_cross_gqa),
        cmocka_unit_test(test_d128),
        cmocka_unit_test(test_fewer_tokens_than_ranks),
        cmocka_unit_test(test_cross_lengths_causal),
        cmocka_unit_test(test_odd_tiles_and_threads),
        cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_public_api),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
