/* test_range_mpi.c: scores and accumulators at the edge of float32.
 *
 * Inputs scaled so that the cheap bound of engine/range.h lands at a
 * quarter of the kernel's float32 limit must run and match the fp64
 * reference; the same inputs scaled 8x further (each of q and k, or v) must
 * be refused before the ring, on every rank alike, with RA_ERR_INPUT and a
 * message naming the values. Options alone (a scale or a Gaussian sigma
 * beyond float32) are refused with RA_ERR_ARG; non-finite additive weights
 * given through the API with RA_ERR_INPUT. Run at P = 1..4. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "call.h"
#include "range.h"
#include "support.h"

static int rank, nranks;

/* The kernel's limit as range.c states it. */
#define LIMIT ((double)FLT_MAX / 16.0)

static void scale_all(float *x, int64_t count, double by)
{
    for (int64_t i = 0; i < count; i++)
        x[i] = (float)(x[i] * by);
}

/* Runs p under prm on this rank's slices; returns the status agreed over
 * the ranks (every rank must have the same), *c the global check. */
static ra_status run(const problem *p, const ra_params *prm, check_result *c)
{
    local_part lp;
    local_part_make(&lp, p, prm, ra_params_layout(prm, 0), rank, nranks);
    ra_status st = ra_call_forward(MPI_COMM_WORLD, &p->s, prm, NULL,
                                   &(ra_qkv){lp.q, lp.k, lp.v},
                                   &(ra_out){lp.o, lp.lse, NULL}, NULL);
    check_result mine = {0};
    if (st == RA_OK)
        mine = check_slice(p, prm, NULL, &lp.qs, lp.o, lp.lse);
    *c = check_allreduce(MPI_COMM_WORLD, &mine);
    int lo = (int)st, hi = (int)st;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    local_part_free(&lp);
    if (rank == 0)
        printf("# P=%d %s: %s rel_o=%.2e lse=%.2e bad=%lld\n", nranks,
               ra_status_str(st), st == RA_OK ? "" : ra_error_message(),
               c->rel_o, c->max_lse, (long long)c->bad_inf);
    return lo == hi ? st : RA_ERR_MPI; /* ranks that disagree fail */
}

/* The largest block of keys a rank holds, as the ring's accumulator sees. */
static int64_t largest_block(const ra_params *prm, int64_t M)
{
    int64_t mmax = 0;
    for (int r = 0; r < nranks; r++) {
        const int64_t c = ra_params_slice(prm, ra_params_layout(prm, 0), M, r,
                                          nranks).count;
        mmax = c > mmax ? c : mmax;
    }
    return mmax;
}

static void test_scores_at_the_edge(void **state)
{
    (void)state;
    const ra_shape s = {2, 37, 29, 2, 1, 16, 8, 0};
    for (int causal = 0; causal < 2; causal++) {
        problem p;
        problem_make(&p, &s, 41 + (uint64_t)causal);
        ra_params prm;
        ra_params_default(&prm);
        prm.num.causal = causal;
        const ra_input_bounds b = ra_input_bounds_of(&s, s.N, s.M, p.q, p.k,
                                                     p.v, 1);
        const double bound = b.q_norm * b.k_norm * ra_params_scale(&prm, &s) *
                             M_LOG2E;
        /* q and k each scaled by c: the bound moves by c^2 */
        const double c = sqrt(LIMIT / 4.0 / bound);
        scale_all(p.q, s.B * s.N * s.H * s.D, c);
        scale_all(p.k, s.B * s.M * s.G * s.D, c);
        check_result g;
        assert_int_equal(run(&p, &prm, &g), RA_OK);
        assert_true(check_ok(&g));
        scale_all(p.q, s.B * s.N * s.H * s.D, 8.0);
        scale_all(p.k, s.B * s.M * s.G * s.D, 8.0);
        assert_int_equal(run(&p, &prm, &g), RA_ERR_INPUT);
        assert_non_null(strstr(ra_error_message(), "scores overflow float32"));
        /* inputs that may be non-finite are the caller's to judge */
        prm.num.nonfinite = 1;
        assert_int_equal(run(&p, &prm, &g), RA_OK);
        problem_free(&p);
    }
}

static void test_values_at_the_edge(void **state)
{
    (void)state;
    const ra_shape s = {1, 23, 41, 2, 2, 8, 8, 0};
    problem p;
    problem_make(&p, &s, 43);
    ra_params prm;
    ra_params_default(&prm);
    const ra_input_bounds b = ra_input_bounds_of(&s, s.N, s.M, p.q, p.k, p.v, 2);
    const double c = LIMIT / 4.0 / (b.v_abs * (double)largest_block(&prm, s.M));
    scale_all(p.v, s.B * s.M * s.G * s.Dv, c);
    check_result g;
    assert_int_equal(run(&p, &prm, &g), RA_OK);
    assert_true(check_ok(&g));
    scale_all(p.v, s.B * s.M * s.G * s.Dv, 8.0);
    assert_int_equal(run(&p, &prm, &g), RA_ERR_INPUT);
    assert_non_null(strstr(ra_error_message(), "values overflow float32"));
    problem_free(&p);
}

static void test_options_beyond_float32(void **state)
{
    (void)state;
    const ra_shape s = {1, 9, 9, 1, 1, 4, 4, 0};
    problem p;
    problem_make(&p, &s, 47);
    ra_params prm;
    ra_params_default(&prm);
    check_result g;
    prm.num.scale = 1e39;
    assert_int_equal(run(&p, &prm, &g), RA_ERR_ARG);
    assert_non_null(strstr(ra_error_message(), "scale 1e+39"));
    prm.num.scale = NAN;
    prm.num.score = RA_SCORE_GAUSSIAN;
    prm.num.sigma = 1e-300;
    assert_int_equal(run(&p, &prm, &g), RA_ERR_ARG);
    assert_non_null(strstr(ra_error_message(), "sigma = 1e-300"));
    prm.num.sigma = 1.0; /* and a sane sigma still computes right */
    assert_int_equal(run(&p, &prm, &g), RA_OK);
    assert_true(check_ok(&g));
    problem_free(&p);
}

/* Weights given through the API are checked by the library itself (the
 * command line's readers refuse them earlier, naming the dataset). */
static void test_nonfinite_weights(void **state)
{
    (void)state;
    const ra_shape s = {1, 11, 13, 2, 1, 4, 4, 0};
    enum { A = 5 };
    float w_q[A * 4], w_k[A * 4], w_v[A];
    for (int i = 0; i < A * 4; i++)
        w_q[i] = w_k[i] = 0.1f * (float)(i % 7) - 0.3f;
    for (int i = 0; i < A; i++)
        w_v[i] = 0.5f - 0.2f * (float)i;
    const ra_additive ad = {A, w_q, w_k, w_v};
    problem p;
    problem_make(&p, &s, 53);
    ra_params prm;
    ra_params_default(&prm);
    prm.num.score = RA_SCORE_ADDITIVE;
    prm.num.additive = &ad;
    check_result g;
    assert_int_equal(run(&p, &prm, &g), RA_OK);
    assert_true(check_ok(&g));
    w_v[1] = NAN;
    assert_int_equal(run(&p, &prm, &g), RA_ERR_INPUT);
    assert_non_null(strstr(ra_error_message(), "weight w_v[1] = nan"));
    problem_free(&p);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scores_at_the_edge),
        cmocka_unit_test(test_values_at_the_edge),
        cmocka_unit_test(test_options_beyond_float32),
        cmocka_unit_test(test_nonfinite_weights),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
