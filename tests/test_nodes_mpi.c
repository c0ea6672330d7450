/* test_nodes_mpi.c: ra_comm_nodes and ra_comm_ring_order against the
 * processor names of the ranks, and ra_forward on the reordered
 * communicator against the fp64 reference. Holds for any placement: ctest
 * runs it at P = 1..4 on this machine (one node), and tests/multinode.py
 * runs it on 3 fake nodes with ranks dealt round-robin, where the ring
 * order differs from the launcher's. Also: ranks whose RINGATTN_GEMM
 * differ are refused alike. Verdicts are reduced over the ranks
 * before cmocka asserts; only rank 0 prints. */
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

/* Every rank's processor name (P x MPI_MAX_PROCESSOR_NAME, caller frees)
 * and the node of each rank of comm: names numbered by first appearance. */
static char *names_gather(MPI_Comm comm, int *node_of, int *nodes)
{
    int P, len;
    MPI_Comm_size(comm, &P);
    char mine[MPI_MAX_PROCESSOR_NAME] = "";
    MPI_Get_processor_name(mine, &len);
    char *all = calloc((size_t)P, MPI_MAX_PROCESSOR_NAME);
    assert_non_null(all);
    MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all,
                  MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
    *nodes = 0;
    for (int r = 0; r < P; r++) {
        node_of[r] = -1;
        for (int s = 0; s < r && node_of[r] < 0; s++)
            if (strcmp(all + r * MPI_MAX_PROCESSOR_NAME,
                       all + s * MPI_MAX_PROCESSOR_NAME) == 0)
                node_of[r] = node_of[s];
        if (node_of[r] < 0)
            node_of[r] = (*nodes)++;
    }
    return all;
}

/* 1 on every rank when ok holds on every rank. */
static int all_true(MPI_Comm comm, int ok)
{
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    return ok;
}

static void test_nodes_match_names(void **state)
{
    (void)state;
    int *node_of = malloc(sizeof(int) * (size_t)nranks), nodes;
    assert_non_null(node_of);
    free(names_gather(MPI_COMM_WORLD, node_of, &nodes));
    ra_nodes n;
    assert_int_equal(ra_comm_nodes(MPI_COMM_WORLD, &n), RA_OK);
    int on_mine = 0, lo = nranks, hi = 0;
    for (int nd = 0; nd < nodes; nd++) {
        int c = 0;
        for (int r = 0; r < nranks; r++)
            c += node_of[r] == nd;
        lo = c < lo ? c : lo;
        hi = c > hi ? c : hi;
        on_mine = nd == node_of[rank] ? c : on_mine;
    }
    int ok = n.nodes == nodes && n.node == node_of[rank] &&
             n.ranks_on_node == on_mine && n.ranks_per_node_min == lo &&
             n.ranks_per_node_max == hi &&
             n.next_on_other_node ==
                 (node_of[(rank + 1) % nranks] != node_of[rank]);
    if (rank == 0)
        printf("# P=%d nodes=%d ranks/node %d..%d\n", nranks, nodes, lo, hi);
    free(node_of);
    assert_true(all_true(MPI_COMM_WORLD, ok));
}

static void test_ring_is_node_major(void **state)
{
    (void)state;
    MPI_Comm ring;
    assert_int_equal(ra_comm_ring_order(MPI_COMM_WORLD, 1, &ring), RA_OK);
    int P, at, *node_of = malloc(sizeof(int) * (size_t)nranks), nodes;
    int *world_of = malloc(sizeof(int) * (size_t)nranks);
    assert_true(node_of && world_of);
    MPI_Comm_size(ring, &P);
    MPI_Comm_rank(ring, &at);
    free(names_gather(ring, node_of, &nodes));
    MPI_Allgather(&rank, 1, MPI_INT, world_of, 1, MPI_INT, ring);
    /* nodes come in contiguous runs, in order, each in the launcher's
     * order; so exactly `nodes` sends cross a boundary (none on one) */
    int ok = P == nranks, crossings = 0;
    for (int i = 1; i < P; i++)
        ok &= node_of[i] == node_of[i - 1]
                  ? world_of[i] > world_of[i - 1]
                  : node_of[i] == node_of[i - 1] + 1;
    ra_nodes n;
    ok &= ra_comm_nodes(ring, &n) == RA_OK;
    MPI_Allreduce(&n.next_on_other_node, &crossings, 1, MPI_INT, MPI_SUM,
                  ring);
    ok &= crossings == (nodes > 1 ? nodes : 0);
    MPI_Comm mpirun;
    ok &= ra_comm_ring_order(MPI_COMM_WORLD, 0, &mpirun) == RA_OK;
    int same;
    MPI_Comm_rank(mpirun, &same);
    ok &= same == rank;
    if (rank == 0)
        printf("# ring of %d ranks on %d nodes: %d crossings per step\n", P,
               nodes, crossings);
    MPI_Comm_free(&mpirun);
    MPI_Comm_free(&ring);
    free(node_of);
    free(world_of);
    assert_true(all_true(MPI_COMM_WORLD, ok));
}

/* ra_forward on the node-major communicator, sliced by ring position. */
static void forward_on_ring(int causal, uint64_t seed)
{
    const ra_shape s = {2, 999, 999, 4, 2, 32, 32};
    problem p;
    problem_make(&p, &s, seed);
    MPI_Comm ring;
    assert_int_equal(ra_comm_ring_order(MPI_COMM_WORLD, 1, &ring), RA_OK);
    int at;
    MPI_Comm_rank(ring, &at);
    ra_params prm;
    ra_params_default(&prm);
    prm.num.causal = causal;
    local_part lp;
    local_part_make(&lp, &p, &prm, ra_params_layout(&prm, 0), at, nranks);
    ra_status st = ra_call_forward(ring, &s, &prm, NULL,
                                   &(ra_qkv){lp.q, lp.k, lp.v},
                                   &(ra_out){lp.o, lp.lse, NULL}, NULL);
    check_result c = {0};
    if (st == RA_OK)
        c = check_slice(&p, &prm, NULL, &lp.qs, lp.o, lp.lse);
    else
        c.bad_inf = 1;
    check_result g = check_allreduce(ring, &c);
    if (rank == 0)
        printf("# forward on the ring order, causal=%d: rel_o=%.3e "
               "lse=%.3e bad=%lld rows=%lld %s\n", causal, g.rel_o,
               g.max_lse, (long long)g.bad_inf, (long long)g.rows,
               check_ok(&g) ? "PASS" : "FAIL");
    local_part_free(&lp);
    problem_free(&p);
    MPI_Comm_free(&ring);
    assert_true(g.rows == s.B * s.H * s.N);
    assert_true(check_ok(&g));
}

static void test_forward_on_ring(void **state)
{
    (void)state;
    forward_on_ring(0, 71);
    forward_on_ring(1, 72);
}

/* The engine tests' problem: small, 4 heads. */
static const ra_shape agree_shape = {1, 37, 37, 4, 4, 16, 16};

/* One call with params.gemm = gemm: a forward on strategy `strategy`, or
 * with backward a ring forward on OpenBLAS then the backward; its status,
 * with the message in msg. RINGATTN_GEMM is the process's (read once). */
static ra_status call_under(ra_gemm gemm, ra_strategy strategy, int backward,
                            char *msg, size_t cap)
{
    const ra_shape s = agree_shape;
    const int64_t n_all = s.N * s.H * s.D;
    problem p;
    problem_make(&p, &s, 73);
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.gemm = gemm;
    prm.exec.strategy = backward ? RA_STRATEGY_RING : strategy;
    local_part lp;
    local_part_make(&lp, &p, &prm, ra_params_layout(&prm, 0), rank, nranks);
    /* the backward's operands, as large as the whole problem: dout (any
     * values), dq, dk, dv */
    float *g = calloc((size_t)(4 * n_all + 1), sizeof(float));
    assert_non_null(g);
    ra_status st = RA_OK;
    if (backward) { /* o and lse from a forward run on one named engine */
        ra_params fwd = prm;
        fwd.exec.gemm = RA_GEMM_OPENBLAS;
        st = ra_call_forward(MPI_COMM_WORLD, &s, &fwd, NULL,
                             &(ra_qkv){lp.q, lp.k, lp.v},
                             &(ra_out){lp.o, lp.lse, NULL}, NULL);
    }
    if (st == RA_OK && backward)
        st = ra_call_backward(MPI_COMM_WORLD, &s, &prm, NULL,
                              &(ra_qkv){lp.q, lp.k, lp.v},
                              &(ra_grads){lp.o, lp.lse, g, g + n_all,
                                          g + 2 * n_all, g + 3 * n_all,
                                          NULL},
                              NULL);
    else if (st == RA_OK)
        st = ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                             &(ra_qkv){lp.q, lp.k, lp.v},
                             &(ra_out){lp.o, lp.lse, NULL}, NULL);
    snprintf(msg, cap, "%s", st == RA_OK ? "" : ra_error_message());
    free(g);
    local_part_free(&lp);
    problem_free(&p);
    return st;
}

/* Whether strategy can run call_under's shape on this many ranks (ulysses
 * and hybrid need P <= H: not on the 6 ranks of the fake cluster); the
 * ring always can. Says so from rank 0 when not. */
static int runs_here(ra_strategy strategy)
{
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.strategy = strategy;
    const ra_status st = ra_call_strategy_check(MPI_COMM_WORLD, &agree_shape,
                                                &prm, 0);
    if (st != RA_OK && rank == 0)
        printf("# engines: %s left out at P = %d: %s\n",
               ra_strategy_name(strategy), nranks, ra_error_message());
    return st == RA_OK || strategy == RA_STRATEGY_RING;
}

/* --mixed-engines: main set RINGATTN_GEMM to onednn on rank 0 and
 * openblas on the others before the library first read it. */
static int mixed_engines;

/* RINGATTN_GEMM reaches each node separately and is read once per
 * process: under --mixed-engines (ranks whose variables name different
 * engines) every strategy's forward that can run here and the backward
 * are refused alike on every rank, naming the variable; otherwise (alike
 * values) they run; an engine named in the call runs either way. */
static void test_engines_agree(void **state)
{
    (void)state;
    const int mixed = mixed_engines && ra_gemm_available(RA_GEMM_ONEDNN) &&
                      nranks > 1;
    char msg[512];
    int ok = 1;
    for (int i = 0; i <= RA_STRATEGY_COUNT; i++) {
        /* i == RA_STRATEGY_COUNT: the backward */
        const int bwd = i == RA_STRATEGY_COUNT;
        const ra_strategy strat = bwd ? RA_STRATEGY_RING : (ra_strategy)i;
        if (!runs_here(strat))
            continue;
        const ra_status st = call_under(RA_GEMM_AUTO, strat, bwd, msg,
                                        sizeof msg);
        if (mixed)
            ok &= st == RA_ERR_ARG &&
                  strstr(msg, "RINGATTN_GEMM: the ranks run different tile "
                              "engines (openblas on some, onednn on "
                              "others)") != NULL;
        else
            ok &= st == RA_OK;
        ok &= call_under(RA_GEMM_OPENBLAS, strat, bwd, msg, sizeof msg) ==
              RA_OK;
    }
    ok = all_true(MPI_COMM_WORLD, ok);
    if (rank == 0)
        printf("# engines, every strategy that runs here and the backward: "
               "%s, named in the call run: %s\n",
               mixed ? "mixed refused"
                     : mixed_engines ? "mixed (one engine here) run"
                                     : "alike run",
               ok ? "PASS" : "FAIL");
    assert_true(ok);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    mixed_engines = argc > 1 && strcmp(argv[1], "--mixed-engines") == 0;
    if (mixed_engines) { /* before the library first reads it */
        const int onednn = ra_gemm_available(RA_GEMM_ONEDNN);
        setenv("RINGATTN_GEMM", onednn && rank == 0 ? "onednn" : "openblas",
               1);
        const struct CMUnitTest mixed[] = {
            cmocka_unit_test(test_engines_agree),
        };
        return mpi_test_finish(cmocka_run_group_tests(mixed, NULL, NULL));
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodes_match_names),
        cmocka_unit_test(test_ring_is_node_major),
        cmocka_unit_test(test_forward_on_ring),
        cmocka_unit_test(test_engines_agree),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
