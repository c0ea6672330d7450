/* test_bf16_mpi.c: bf16 precision and the bf16 wire through the call's
 * forward and backward (ra_call_forward, ra_call_backward) at P = 1..4 (run by ctest under mpiexec).
 *
 * Every rank builds the same problem from a seed and passes its layout
 * slices. Forward: every strategy in bf16 against the fp64 reference on
 * bf16-rounded q, k, v with the o tolerance of rounding P (check_slice,
 * compare.h), and an fp32 run with --wire bf16 against the reference on
 * rounded k, v at the fp32 tolerance, sending exactly half the bytes of
 * the fp32 wire. Backward: the ring's gradients in bf16 against the fp64
 * gradients of the rounded inputs. Verdicts are reduced before
 * asserting; rank 0 prints. */
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
#include "internal.h"
#include "support_bwd.h"

static int rank, nranks;

/* GQA, Dv != D, a length no P divides. */
static const ra_shape shape = {2, 301, 301, 4, 2, 64, 32, 0};

static ra_params params_of(ra_strategy st, ra_precision prec, ra_wire wire)
{
    ra_params p;
    ra_params_default(&p);
    p.num.causal = 1;
    p.exec.strategy = st;
    p.num.precision = prec;
    p.exec.wire = wire;
    p.exec.block_q = 64;
    p.exec.block_kv = 64;
    return p;
}

/* One forward run: the global tally, whether every rank succeeded, and
 * the bytes this rank sent. */
static check_result run_forward(const ra_params *prm, uint64_t seed,
                                int *ok, int64_t *bytes)
{
    problem p;
    problem_make(&p, &shape, seed);
    local_part lp;
    local_part_make(&lp, &p, prm, ra_params_layout(prm, 0), rank, nranks);
    ra_timing tm = {0};
    const ra_status st = ra_call_forward(MPI_COMM_WORLD, &shape, prm, NULL,
                                         &(ra_qkv){lp.q, lp.k, lp.v},
                                         &(ra_out){lp.o, lp.lse, NULL}, &tm);
    check_result mine = {0};
    if (st == RA_OK)
        mine = check_slice(&p, prm, NULL, &lp.qs, lp.o, lp.lse);
    else
        mine.bad_inf = 1;
    const check_result g = check_allreduce(MPI_COMM_WORLD, &mine);
    *ok = g.bad_inf == 0;
    *bytes = tm.bytes_sent;
    if (rank == 0 && st != RA_OK)
        printf("# %s\n", ra_error_message());
    local_part_free(&lp);
    problem_free(&p);
    return g;
}

/* Every strategy in bf16 (ulysses and hybrid while P <= H). */
static void test_forward_strategies(void **state)
{
    (void)state;
    for (int s = 0; s < RA_STRATEGY_COUNT; s++) {
        if ((s == RA_STRATEGY_ULYSSES || s == RA_STRATEGY_HYBRID) &&
            nranks > shape.H)
            continue;
        const ra_params prm = params_of((ra_strategy)s, RA_PRECISION_BF16,
                                        RA_WIRE_AUTO);
        int ok;
        int64_t bytes;
        const check_result g = run_forward(&prm, 5100 + (uint64_t)s, &ok,
                                           &bytes);
        const double tol = ra_tally_tol_o(&g, RA_TOLERANCE);
        if (rank == 0)
            printf("# P=%d bf16 %-9s rel %.2e (tol %.2e) lse %.2e %s\n",
                   nranks, ra_strategy_name((ra_strategy)s), g.rel_o, tol,
                   g.max_lse, ok && ra_tally_ok(&g, RA_TOLERANCE) ? "PASS"
                                                              : "FAIL");
        assert_true(ok && ra_tally_ok(&g, RA_TOLERANCE));
        assert_true(g.p_unit > 0 && g.rel_o > 1e-5); /* P was rounded */
    }
}

/* An fp32 run with K/V in bf16 between ranks: exact against rounded k, v
 * at the fp32 tolerance, and half the bytes of the fp32 wire. */
static void test_wire(void **state)
{
    (void)state;
    const ra_params w16 = params_of(RA_STRATEGY_RING, RA_PRECISION_FP32,
                                    RA_WIRE_BF16);
    const ra_params w32 = params_of(RA_STRATEGY_RING, RA_PRECISION_FP32,
                                    RA_WIRE_FP32);
    int ok16, ok32;
    int64_t b16, b32, all16, all32;
    const check_result g = run_forward(&w16, 5200, &ok16, &b16);
    (void)run_forward(&w32, 5200, &ok32, &b32);
    MPI_Allreduce(&b16, &all16, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&b32, &all32, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d wire bf16: rel %.2e lse %.2e, bytes %lld (fp32 wire "
               "%lld)\n", nranks, g.rel_o, g.max_lse, (long long)all16,
               (long long)all32);
    assert_true(ok16 && ok32 && ra_tally_ok(&g, RA_TOLERANCE));
    assert_true(2 * all16 == all32);
    assert_true(nranks == 1 || all16 > 0);
}

/* The ring's backward in bf16 against the fp64 gradients of the rounded
 * q, k, v and dO: the rounding of P and dS is what remains (about 2^-8
 * relative per element, far below 2e-2 over a tensor, far above fp32's
 * 1e-5). */
static void test_backward(void **state)
{
    (void)state;
    const ra_shape *s = &shape;
    const ra_params prm = params_of(RA_STRATEGY_RING, RA_PRECISION_BF16,
                                    RA_WIRE_AUTO);
    problem p;
    problem_make(&p, s, 5300);
    const int64_t nd = s->B * s->N * s->H * s->Dv;
    float *dout = malloc(sizeof(float) * (size_t)nd);
    ra_random_normal(5300, RA_STREAM_DO, 0, nd, dout);
    ra_bf16_round(p.q, s->B * s->N * s->H * s->D);
    ra_bf16_round(p.k, s->B * s->M * s->G * s->D);
    ra_bf16_round(p.v, s->B * s->M * s->G * s->Dv);
    ra_bf16_round(dout, nd);
    bwd_ref ref;
    bwd_ref_make(&ref, &p, &prm, NULL, dout);
    local_part lp;
    local_part_make(&lp, &p, &prm, ra_params_layout(&prm, 0), rank, nranks);
    const int64_t n = lp.qs.count, m = lp.ks.count;
    float *dl = malloc(sizeof(float) * (size_t)(s->B * n * s->H * s->Dv + 1));
    float *dq = malloc(sizeof(float) * (size_t)(s->B * n * s->H * s->D + 1));
    float *dk = malloc(sizeof(float) * (size_t)(s->B * m * s->G * s->D + 1));
    float *dv = malloc(sizeof(float) * (size_t)(s->B * m * s->G * s->Dv + 1));
    slice_gather(dout, s->B, s->N, s->H * s->Dv, sizeof(float), &lp.qs, dl);
    slice_gather(ref.o, s->B, s->N, s->H * s->Dv, sizeof(float), &lp.qs,
                 lp.o);
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->H; h++)
            slice_gather(ref.lse + (b * s->H + h) * s->N, 1, s->N, 1,
                         sizeof(float), &lp.qs,
                         lp.lse + (b * s->H + h) * n);
    const ra_status st = ra_call_backward(
        MPI_COMM_WORLD, s, &prm, NULL, &(ra_qkv){lp.q, lp.k, lp.v},
        &(ra_grads){lp.o, lp.lse, dl, dq, dk, dv, NULL}, NULL);
    bwd_tally t = {0}, g;
    t.nonfinite = st != RA_OK;
    if (st == RA_OK) {
        bwd_tally_add(&t, 0, dq, ref.dq, s->B, s->N, s->H * s->D, &lp.qs);
        bwd_tally_add(&t, 1, dk, ref.dk, s->B, s->M, s->G * s->D, &lp.ks);
        bwd_tally_add(&t, 2, dv, ref.dv, s->B, s->M, s->G * s->Dv, &lp.ks);
    }
    MPI_Allreduce(&t, &g, BWD_TALLY_DOUBLES, MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    const double e[3] = {bwd_tally_rel(&g, 0), bwd_tally_rel(&g, 1),
                         bwd_tally_rel(&g, 2)};
    if (rank == 0)
        printf("# P=%d bf16 backward: dq %.2e dk %.2e dv %.2e\n", nranks,
               e[0], e[1], e[2]);
    for (int i = 0; i < 3; i++)
        assert_true(g.nonfinite == 0 && e[i] < 2e-2 && e[i] > 1e-5);
    bwd_ref_free(&ref);
    local_part_free(&lp);
    problem_free(&p);
    free(dout);
    free(dl);
    free(dq);
    free(dk);
    free(dv);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_strategies),
        cmocka_unit_test(test_wire),
        cmocka_unit_test(test_backward),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
