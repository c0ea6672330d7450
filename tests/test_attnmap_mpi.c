/* test_attnmap_mpi.c: attention maps (exact softmax weights of chosen query
 * rows over all keys) at P = 1..4, every layout and score, with masks:
 * each row sums to 1 (0 when it sees nothing) and matches the weights of
 * the fp64 reference, exp(score - lse). */
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

/* Max |p - ref| and max |row sum - ref sum| over this rank's map rows. */
static void check_map(const problem *p, const ra_params *prm,
                      const int64_t *q_lens, const ra_slice *qs,
                      ra_range rows, const ra_attn_map *map, double err[2])
{
    const ra_shape *s = &p->s;
    const int64_t Dk = ra_shape_dk(s);
    const ra_ref_score score = {prm->num.score, ra_params_scale(prm, s),
                                prm->num.sigma, prm->num.additive, Dk};
    double *qd = malloc(sizeof(double) * (size_t)s->D);
    double *kd = malloc(sizeof(double) * (size_t)(s->M * Dk));
    double *vd = calloc((size_t)s->M, sizeof(double)); /* Dv = 1 view */
    double *sc = malloc(sizeof(double) * (size_t)s->M);
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t hi = 0; hi < map->nheads; hi++) {
            const int64_t h = map->heads[hi], g = h / (s->H / s->G);
            for (int64_t j = 0; j < s->M; j++)
                for (int64_t d = 0; d < Dk; d++)
                    kd[j * Dk + d] = p->k[((b * s->M + j) * s->G + g) * Dk + d];
            for (int64_t r = 0; r < rows.count; r++) {
                int64_t gi = ra_slice_pos(qs, rows.start + r);
                for (int64_t d = 0; d < s->D; d++)
                    qd[d] = p->q[((b * s->N + gi) * s->H + h) * s->D + d];
                ra_mask mk = {.causal = prm->num.causal,
                              .diag = s->M - s->N,
                              .qpos = &gi,
                              .q_lens = q_lens ? q_lens + b : NULL};
                double o1, l;
                const ra_ref_rows rr = {1, s->M, s->D, 1, qd, s->D, kd, Dk, vd,
                                        1, &o1, 1, &l};
                ra_reference_scored(&score, &mk, &rr, sc);
                const float *row = map->out +
                                   ((b * map->nheads + hi) * rows.count + r) * s->M;
                double sum = 0, ref_sum = 0;
                for (int64_t j = 0; j < s->M; j++) {
                    double ref = isinf(l) ? 0.0 : exp(sc[j] - l);
                    err[0] = fmax(err[0], fabs(row[j] - ref));
                    sum += row[j];
                    ref_sum += ref;
                }
                err[1] = fmax(err[1], fabs(sum - ref_sum));
            }
        }
    free(qd);
    free(kd);
    free(vd);
    free(sc);
}

/* The map of rows [i0, i1) on unit-normal inputs from seed, q and k
 * moved by offset. */
static void run_map(const ra_shape *s, ra_params prm, int lens,
                    int64_t i0, int64_t i1, uint64_t seed, double offset)
{
    problem p;
    problem_make(&p, s, seed);
    for (int64_t i = 0; i < s->B * s->N * s->H * s->D; i++)
        p.q[i] = (float)(p.q[i] + offset);
    for (int64_t i = 0; i < s->B * s->M * s->G * ra_shape_dk(s); i++)
        p.k[i] = (float)(p.k[i] + offset);
    int64_t q_lens[4];
    ra_random_lens(seed, RA_STREAM_Q_LENS, s->B, s->N, q_lens);
    const ra_masks local = {q_lens, NULL, NULL, NULL};
    const ra_layout lay = ra_params_layout(&prm, 0);
    local_part lp;
    local_part_make(&lp, &p, &prm, lay, rank, nranks);
    const ra_slice qs = lp.qs;
    float *q = lp.q, *k = lp.k, *v = lp.v, *o = lp.o, *lse = lp.lse;
    const int64_t heads[2] = {0, s->H - 1};
    ra_attn_map map = {i0, i1, heads, 2, NULL};
    ra_numerics num;
    ra_exec exec;
    ra_params_split(&prm, &num, &exec);
    const ra_range rows = ra_attn_map_rows(lay, &num, s->N, rank, nranks,
                                           &map);
    map.out = malloc(sizeof(float) * (size_t)(s->B * 2 * rows.count * s->M + 1));
    ra_status st = ra_call_forward(MPI_COMM_WORLD, s, &prm,
                                   lens ? &local : NULL, &(ra_qkv){q, k, v},
                                   &(ra_out){o, lse, &map}, NULL);
    double err[2] = {0, 0}, gerr[2];
    int64_t count = rows.count, all_rows = 0;
    if (st == RA_OK)
        check_map(&p, &prm, lens ? q_lens : NULL, &qs, rows, &map, err);
    else
        err[0] = INFINITY;
    MPI_Allreduce(err, gerr, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&count, &all_rows, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d %-8s %-10s rows [%lld, %lld) causal=%d lens=%d: max "
               "|p - ref| %.2e, max |sum - ref sum| %.2e (offset %g)\n",
               nranks, ra_score_name(prm.num.score), ra_layout_name(lay),
               (long long)i0, (long long)i1, prm.num.causal, lens, gerr[0],
               gerr[1], offset);
    assert_int_equal(all_rows, i1 - i0);
    assert_true(gerr[0] < RA_TOLERANCE && gerr[1] < RA_TOLERANCE);
    local_part_free(&lp);
    free(map.out);
    problem_free(&p);
}

static void test_maps(void **state)
{
    (void)state;
    const ra_shape s = {2, 157, 203, 4, 2, 16, 8, 16};
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.block_q = 16;
    prm.exec.block_kv = 32;
    const ra_layout lays[4] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                               RA_LAYOUT_STRIPED, RA_LAYOUT_BALANCED};
    float wq[8 * 16], wk[8 * 16], wv[8];
    ra_random_normal(3, RA_STREAM_W_Q, 0, 8 * 16, wq);
    ra_random_normal(3, RA_STREAM_W_K, 0, 8 * 16, wk);
    ra_random_normal(3, RA_STREAM_W_V, 0, 8, wv);
    const ra_additive ad = {8, wq, wk, wv};
    for (int l = 0; l < 4; l++) {
        prm.exec.layout = lays[l];
        prm.num.score = RA_SCORE_DOT;
        prm.num.causal = 1;
        run_map(&s, prm, 1, 0, 157, 800 + l, 0.0);     /* every row */
        prm.num.causal = 0;
        run_map(&s, prm, 0, 40, 47, 810 + l, 0.0);     /* a few rows */
        prm.num.score = RA_SCORE_GAUSSIAN;
        prm.num.sigma = 3.0;
        run_map(&s, prm, 0, 100, 157, 820 + l, 0.0);
        prm.num.sigma = RA_SIGMA_DEFAULT; /* the gaussian's alone */
        prm.num.score = RA_SCORE_ADDITIVE;
        prm.num.additive = &ad;
        prm.num.causal = 1;
        run_map(&s, prm, 1, 3, 30, 830 + l, 0.0);
    }
}

/* Issue 39, class 1: the Gaussian map of q and k far from 0 (the call
 * centres them; before, the map's fp32 scores cancelled like the
 * forward's). */
static void test_issue39_class1_gaussian_map_offsets(void **state)
{
    (void)state;
    const ra_shape s = {2, 157, 203, 4, 2, 16, 8};
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.block_q = 16;
    prm.exec.block_kv = 32;
    prm.num.score = RA_SCORE_GAUSSIAN;
    prm.num.sigma = 3.0;
    prm.num.causal = 1;
    prm.exec.layout = RA_LAYOUT_ZIGZAG;
    run_map(&s, prm, 1, 0, 157, 840, 100.0);
    run_map(&s, prm, 1, 0, 157, 841, 1e4);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_maps),
        cmocka_unit_test(test_issue39_class1_gaussian_map_offsets),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
