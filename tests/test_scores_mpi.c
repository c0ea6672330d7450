/* test_scores_mpi.c: the Gaussian-kernel and additive scores through the
 * ring at P = 1..4, against the fp64 reference computed from each score's
 * definition, with every layout, causal and not, padding, GQA, and keys of
 * another dim than the queries (additive). */
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

static check_result run_scored(const ra_shape *s, const ra_params *prm_in,
                               int lens, uint64_t seed)
{
    problem p;
    problem_make(&p, s, seed);
    ra_params prm = *prm_in;
    const int64_t Dk = ra_shape_dk(s);
    int64_t q_lens[4], kv_lens[4];
    ra_random_lens(seed, RA_STREAM_Q_LENS, s->B, s->N, q_lens);
    ra_random_lens(seed, RA_STREAM_KV_LENS, s->B, s->M, kv_lens);
    const test_masks global = {q_lens, kv_lens, NULL, NULL};
    const ra_masks local = {q_lens, kv_lens, NULL, NULL};
    const ra_layout lay = ra_params_layout(&prm, 0);
    local_part lp;
    local_part_make(&lp, &p, &prm, lay, rank, nranks);
    const ra_slice qs = lp.qs;
    float *q = lp.q, *k = lp.k, *v = lp.v, *o = lp.o, *lse = lp.lse;
    ra_status st = ra_call_forward(MPI_COMM_WORLD, s, &prm,
                                   lens ? &local : NULL, &(ra_qkv){q, k, v},
                                   &(ra_out){o, lse, NULL}, NULL);
    check_result c = {0};
    if (st == RA_OK)
        c = check_slice(&p, &prm, lens ? &global : NULL, &qs, o, lse);
    else
        c.bad_inf = 1;
    check_result g = check_allreduce(MPI_COMM_WORLD, &c);
    if (rank == 0)
        printf("# P=%d %-8s %-10s N=%lld M=%lld H=%lld G=%lld D=%lld Dk=%lld "
               "causal=%d lens=%d rel_o=%.2e lse=%.2e bad=%lld %s\n",
               nranks, ra_score_name(prm.num.score), ra_layout_name(lay),
               (long long)s->N, (long long)s->M, (long long)s->H,
               (long long)s->G, (long long)s->D, (long long)Dk, prm.num.causal,
               lens, g.rel_o, g.max_lse, (long long)g.bad_inf,
               check_ok(&g) ? "PASS" : "FAIL");
    local_part_free(&lp);
    problem_free(&p);
    return g;
}

/* Every layout, causal and not, with and without padding. */
static void expect_all(const ra_shape *s, ra_params prm, uint64_t seed)
{
    const ra_layout lays[4] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                               RA_LAYOUT_STRIPED, RA_LAYOUT_BALANCED};
    for (int l = 0; l < 4; l++)
        for (int causal = l == 3; causal < 2; causal++)
            for (int lens = 0; lens < 2; lens++) {
                prm.exec.layout = lays[l];
                prm.num.causal = causal;
                check_result g = run_scored(s, &prm, lens, seed++);
                assert_true(g.rows == s->B * s->H * s->N);
                assert_true(check_ok(&g));
            }
}

static void test_gaussian(void **state)
{
    (void)state;
    ra_params prm;
    ra_params_default(&prm);
    prm.num.score = RA_SCORE_GAUSSIAN;
    prm.exec.block_q = 32;
    prm.exec.block_kv = 48;
    const ra_shape s = {2, 301, 257, 4, 2, 16, 8};
    const double sigmas[3] = {0.5, 2.0, 10.0};
    for (int i = 0; i < 3; i++) {
        prm.num.sigma = sigmas[i];
        expect_all(&s, prm, 600 + 10 * i);
    }
    /* D = 1: the Nadaraya-Watson setting of the textbook */
    const ra_shape nw = {1, 50, 101, 1, 1, 1, 1};
    prm.num.sigma = 0.3;
    expect_all(&nw, prm, 650);
}

static void test_additive(void **state)
{
    (void)state;
    /* keys of another dim than the queries, GQA */
    const ra_shape s = {2, 123, 211, 4, 2, 12, 8, 20};
    const int64_t A = 16;
    float wq[16 * 12], wk[16 * 20], wv[16];
    ra_random_normal(7, RA_STREAM_W_Q, 0, A * s.D, wq);
    ra_random_normal(7, RA_STREAM_W_K, 0, A * s.Dk, wk);
    ra_random_normal(7, RA_STREAM_W_V, 0, A, wv);
    for (int64_t i = 0; i < A * s.D; i++)
        wq[i] *= 0.3f;
    for (int64_t i = 0; i < A * s.Dk; i++)
        wk[i] *= 0.3f;
    const ra_additive ad = {A, wq, wk, wv};
    ra_params prm;
    ra_params_default(&prm);
    prm.num.score = RA_SCORE_ADDITIVE;
    prm.num.additive = &ad;
    prm.exec.block_q = 16;
    prm.exec.block_kv = 40;
    expect_all(&s, prm, 700);
    /* the wrong use is refused: other key dims with the dot score */
    prm.num.score = RA_SCORE_DOT;
    float dummy = 0;
    ra_status st = ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                                   &(ra_qkv){&dummy, &dummy, &dummy},
                                   &(ra_out){&dummy, &dummy, NULL}, NULL);
    assert_int_equal(st, RA_ERR_ARG);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gaussian),
        cmocka_unit_test(test_additive),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
