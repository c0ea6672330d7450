/* test_strategies_mpi.c: every strategy (ring, allgather, tree, ring-q,
 * ulysses, hybrid) on every layout, with GQA, causal masks, padding lengths,
 * windows, packed segments, uneven heads and lengths that P does not
 * divide, against the fp64 reference at P = 1..4 (run by ctest under mpiexec). Every rank builds the same
 * problem from the seed, passes its layout slices and checks its own rows;
 * verdicts are reduced before asserting, rank 0 prints. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "call.h"
#include "internal.h"
#include "support.h"

static int rank, nranks;

/* balanced runs differ from contiguous ones only under causal or a window */
static const ra_layout layouts[4] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                                     RA_LAYOUT_STRIPED, RA_LAYOUT_BALANCED};

typedef struct {
    ra_shape s;
    ra_params p;
    int lens;            /* random padding lengths */
    int64_t segment_avg; /* 0: no segments */
    uint64_t seed;
} strat_case;

/* One strategy on one layout: the global verdict. */
static check_result run_one(const strat_case *sc, ra_strategy strategy,
                            ra_layout layout, ra_status *status)
{
    const ra_shape *s = &sc->s;
    problem p;
    problem_make(&p, s, sc->seed);
    test_masks gm = test_masks_make(s, sc->seed, sc->lens, sc->segment_avg, 1);
    local_part lp;
    local_part_make(&lp, &p, &sc->p, layout, rank, nranks);
    int64_t *qsl = malloc(sizeof(int64_t) * (size_t)(s->B * lp.qs.count + 1));
    int64_t *ksl = malloc(sizeof(int64_t) * (size_t)(s->B * lp.ks.count + 1));
    if (gm.q_seg) {
        slice_gather(gm.q_seg, s->B, s->N, 1, sizeof(int64_t), &lp.qs, qsl);
        slice_gather(gm.kv_seg, s->B, s->M, 1, sizeof(int64_t), &lp.ks, ksl);
    }
    const ra_masks local = {gm.q_lens, gm.kv_lens, gm.q_seg ? qsl : NULL,
                            gm.q_seg ? ksl : NULL};
    ra_params prm = sc->p;
    prm.exec.layout = layout;
    prm.exec.strategy = strategy;
    if (strategy == RA_STRATEGY_HYBRID) /* two groups of 2 at P = 4 */
        prm.exec.ulysses_size = nranks % 2 ? 1 : 2;
    ra_status st = ra_call_forward(MPI_COMM_WORLD, s, &prm, &local,
                                   &(ra_qkv){lp.q, lp.k, lp.v},
                                   &(ra_out){lp.o, lp.lse, NULL}, NULL);
    check_result c = {0};
    if (st == RA_OK)
        c = check_slice(&p, &prm, &gm, &lp.qs, lp.o, lp.lse);
    else
        c.bad_inf = 1;
    check_result g = check_allreduce(MPI_COMM_WORLD, &c);
    *status = st;
    if (rank == 0)
        printf("# P=%d %-9s %-10s B=%lld N=%lld M=%lld H=%lld G=%lld "
               "causal=%d window=%d lens=%d seg=%lld rel_o=%.2e lse=%.2e "
               "%s%s%s\n",
               nranks, ra_strategy_name(strategy), ra_layout_name(layout),
               (long long)s->B, (long long)s->N, (long long)s->M,
               (long long)s->H, (long long)s->G, prm.num.causal, prm.num.window,
               sc->lens, (long long)sc->segment_avg, g.rel_o, g.max_lse,
               st != RA_OK    ? "REFUSED "
               : check_ok(&g) ? "PASS"
                              : "FAIL",
               "", st == RA_OK ? "" : ra_error_message());
    local_part_free(&lp);
    free(qsl);
    free(ksl);
    test_masks_free(&gm);
    problem_free(&p);
    return g;
}

/* Every strategy on every layout must pass, every row checked; ulysses
 * with fewer heads than ranks must refuse, naming the rank counts. */
static void expect_all(const strat_case *sc)
{
    for (int i = 0; i < RA_STRATEGY_COUNT; i++)
        for (int l = 0; l < 4; l++) {
            if (l == 3 && !sc->p.num.causal && !sc->p.num.window)
                continue;
            ra_status st;
            check_result g = run_one(sc, (ra_strategy)i, layouts[l], &st);
            if (i == RA_STRATEGY_ULYSSES && sc->s.H < nranks) {
                assert_int_equal(st, RA_ERR_ARG);
                assert_non_null(strstr(ra_error_message(), "runs on 1 to"));
                continue;
            }
            assert_true(g.rows == sc->s.B * sc->s.H * sc->s.N);
            assert_true(check_ok(&g));
        }
}

static strat_case base_case(int64_t B, int64_t N, int64_t M, int64_t H,
                            int64_t G, int64_t D, uint64_t seed)
{
    strat_case sc = {{B, N, M, H, G, D, D}, {{0}}, 0, 0, seed};
    ra_params_default(&sc.p);
    sc.p.exec.block_q = 16; /* small tiles: many tile edges at test sizes */
    sc.p.exec.block_kv = 24;
    return sc;
}

static void test_gqa_causal(void **state)
{
    (void)state;
    strat_case sc = base_case(2, 301, 301, 4, 2, 16, 1301);
    expect_all(&sc);
    sc.p.num.causal = 1;
    expect_all(&sc);
    sc = base_case(1, 7, 7, 2, 1, 8, 1302); /* N < 2P */
    sc.p.num.causal = 1;
    expect_all(&sc);
}

static void test_decoding_shapes(void **state)
{
    (void)state;
    strat_case sc = base_case(2, 3, 997, 8, 2, 16, 1303); /* few queries */
    sc.p.num.causal = 1;
    expect_all(&sc);
    sc = base_case(1, 1, 1001, 4, 4, 32, 1304); /* one query per head */
    expect_all(&sc);
}

static void test_padding_windows_segments(void **state)
{
    (void)state;
    strat_case sc = base_case(3, 257, 301, 4, 2, 16, 1305);
    sc.lens = 1;
    sc.p.num.causal = 1;
    expect_all(&sc);
    sc.p.num.window = 1;
    sc.p.num.window_left = 30;
    sc.p.num.window_right = 3;
    expect_all(&sc);
    sc = base_case(2, 213, 213, 4, 1, 16, 1306);
    sc.segment_avg = 20;
    sc.p.num.causal = 1;
    expect_all(&sc);
}

static void test_allgather_refuses_over_limit(void **state)
{
    (void)state;
    strat_case sc = base_case(1, 64, 4096, 2, 2, 32, 1307);
    sc.p.exec.strategy = RA_STRATEGY_ALLGATHER;
    sc.p.exec.mem_limit = 4096 * 2 * 64 * 4 - 1; /* one byte short of K/V */
    problem p;
    problem_make(&p, &sc.s, sc.seed);
    local_part lp;
    local_part_make(&lp, &p, NULL, RA_LAYOUT_CONTIGUOUS, rank, nranks);
    ra_status st = ra_call_forward(MPI_COMM_WORLD, &sc.s, &sc.p, NULL,
                                   &(ra_qkv){lp.q, lp.k, lp.v},
                                   &(ra_out){lp.o, lp.lse, NULL}, NULL);
    char want[96];
    snprintf(want, sizeof want,
             "needs %lld bytes per rank, above the "
             "memory limit of %lld bytes",
             (long long)(sc.p.exec.mem_limit + 1),
             (long long)sc.p.exec.mem_limit);
    int bad = st != RA_ERR_ARG || !strstr(ra_error_message(), want);
    sc.p.exec.mem_limit += 1; /* exactly enough */
    st = ra_call_forward(MPI_COMM_WORLD, &sc.s, &sc.p, NULL,
                         &(ra_qkv){lp.q, lp.k, lp.v},
                         &(ra_out){lp.o, lp.lse, NULL}, NULL);
    bad |= st != RA_OK;
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d allgather memory limit: %s\n", nranks,
               any ? "FAIL" : "PASS");
    local_part_free(&lp);
    problem_free(&p);
    assert_false(any);
}

/* Ulysses sends exactly (P-1)/P of each local tensor it moves (q, k, v
 * out, o back, N = M, B = 1, G = H so no kv head is replicated), plus the
 * lse it returns with o: (N/P)(P-1)/P (H D + G D + G Dv + H Dv + H)
 * floats per rank, when P divides N (docs/PERFORMANCE.md, ulysses). */
static void test_ulysses_bytes(void **state)
{
    (void)state;
    const int64_t N = 96 * nranks, H = 4 * nranks, D = 8;
    strat_case sc = base_case(1, N, N, H, H, D, 1308);
    sc.p.exec.strategy = RA_STRATEGY_ULYSSES;
    sc.p.exec.layout = RA_LAYOUT_CONTIGUOUS;
    problem p;
    problem_make(&p, &sc.s, sc.seed);
    local_part lp;
    local_part_make(&lp, &p, NULL, RA_LAYOUT_CONTIGUOUS, rank, nranks);
    ra_timing tm = {0};
    ra_status st = ra_call_forward(MPI_COMM_WORLD, &sc.s, &sc.p, NULL,
                                   &(ra_qkv){lp.q, lp.k, lp.v},
                                   &(ra_out){lp.o, lp.lse, NULL}, &tm);
    const int64_t want = 4 * (N / nranks) * (nranks - 1) / nranks *
                         (4 * H * D + H);
    int bad = st != RA_OK || tm.bytes_sent != want, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d ulysses bytes per rank %lld, formula %lld: %s\n",
               nranks, (long long)tm.bytes_sent, (long long)want,
               any ? "FAIL" : "PASS");
    local_part_free(&lp);
    problem_free(&p);
    assert_false(any);
}

/* With a stall timeout every strategy's waits are the watched ones
 * (polled, then a token at the end of the call): the same results, every
 * layout, with padding and segments (whose ids are gathered watched too). */
static void test_watched_waits(void **state)
{
    (void)state;
    strat_case sc = base_case(2, 203, 250, 4, 2, 16, 1309);
    sc.p.exec.stall_timeout = 120;
    sc.p.num.causal = 1;
    sc.lens = 1;
    sc.segment_avg = 40;
    expect_all(&sc);
}

/* On one node (as ctest runs), no strategy counts a byte as crossing
 * nodes, while each sends some at P > 1 (tests/multinode.py checks the
 * counts across fake nodes). */
static void test_one_node_no_cross_bytes(void **state)
{
    (void)state;
    const int64_t H = 4 * nranks;
    strat_case sc = base_case(1, 64 * nranks, 64 * nranks, H, H, 8, 1310);
    problem p;
    problem_make(&p, &sc.s, sc.seed);
    local_part lp;
    local_part_make(&lp, &p, NULL, RA_LAYOUT_CONTIGUOUS, rank, nranks);
    int bad = 0, any = 0;
    for (int i = 0; i < RA_STRATEGY_COUNT; i++) {
        ra_params prm = sc.p;
        prm.exec.layout = RA_LAYOUT_CONTIGUOUS;
        prm.exec.strategy = (ra_strategy)i;
        ra_timing tm = {0};
        tm.bytes_cross_node = -1;
        const ra_status st = ra_call_forward(MPI_COMM_WORLD, &sc.s, &prm, NULL,
                                             &(ra_qkv){lp.q, lp.k, lp.v},
                                             &(ra_out){lp.o, lp.lse, NULL},
                                             &tm);
        bad |= st != RA_OK || tm.bytes_cross_node != 0 ||
               (nranks > 1 && tm.bytes_sent <= 0);
    }
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d one node: no strategy counts bytes across nodes: "
               "%s\n", nranks, any ? "FAIL" : "PASS");
    local_part_free(&lp);
    problem_free(&p);
    assert_false(any);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gqa_causal),
        cmocka_unit_test(test_decoding_shapes),
        cmocka_unit_test(test_padding_windows_segments),
        cmocka_unit_test(test_allgather_refuses_over_limit),
        cmocka_unit_test(test_ulysses_bytes),
        cmocka_unit_test(test_watched_waits),
        cmocka_unit_test(test_one_node_no_cross_bytes),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
