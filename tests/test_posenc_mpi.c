/* test_posenc_mpi.c: RoPE (both pairings) and ALiBi (standard and given
 * slopes) through the ring, for every layout with causal masks, windows,
 * padding and packed segments, against the fp64 reference that applies
 * both from their definitions (support.c), at P = 1..4 under mpiexec.
 * Also: the standard slopes against their closed form, RoPE's fast
 * rotation against the definition, and a windowed ALiBi run that skips the
 * same hops as the same run without ALiBi. Verdicts are reduced over the
 * ranks before asserting; rank 0 prints. */
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

/* One case: a shape, the options, and which masks to make. */
typedef struct {
    ra_shape s;
    ra_params p;
    int lens;     /* random padding lengths */
    int segments; /* sorted packed-sequence ids of mean length 40 */
    uint64_t seed;
} pe_case;

/* Runs one layout; returns the global result and this rank's timings. */
static check_result run_layout(const pe_case *pc, ra_layout layout,
                               ra_timing *tm)
{
    const ra_shape *s = &pc->s;
    problem p;
    problem_make(&p, s, pc->seed);
    int64_t *q_lens = NULL, *kv_lens = NULL, *q_seg = NULL, *kv_seg = NULL;
    if (pc->lens) {
        q_lens = malloc(sizeof(int64_t) * (size_t)s->B);
        kv_lens = malloc(sizeof(int64_t) * (size_t)s->B);
        ra_random_lens(pc->seed, RA_STREAM_Q_LENS, s->B, s->N, q_lens);
        ra_random_lens(pc->seed, RA_STREAM_KV_LENS, s->B, s->M, kv_lens);
    }
    if (pc->segments) {
        q_seg = malloc(sizeof(int64_t) * (size_t)(s->B * s->N));
        kv_seg = malloc(sizeof(int64_t) * (size_t)(s->B * s->M));
        /* mean run 40, the key side's ids as the queries' */
        test_segment_ids(pc->seed, RA_STREAM_Q_SEGMENTS, s->B, s->N, 40, 0,
                         q_seg);
        test_segment_ids(pc->seed, RA_STREAM_Q_SEGMENTS, s->B, s->M, 40, 0,
                         kv_seg);
    }
    const test_masks global = {q_lens, kv_lens, q_seg, kv_seg};
    local_part lp;
    local_part_make(&lp, &p, &pc->p, layout, rank, nranks);
    int64_t *qsl = malloc(sizeof(int64_t) * (size_t)(s->B * lp.qs.count + 1));
    int64_t *ksl = malloc(sizeof(int64_t) * (size_t)(s->B * lp.ks.count + 1));
    if (q_seg) {
        slice_gather(q_seg, s->B, s->N, 1, sizeof(int64_t), &lp.qs, qsl);
        slice_gather(kv_seg, s->B, s->M, 1, sizeof(int64_t), &lp.ks, ksl);
    }
    const ra_masks local = {q_lens, kv_lens, q_seg ? qsl : NULL,
                            q_seg ? ksl : NULL};
    ra_params prm = pc->p;
    prm.exec.layout = layout;
    *tm = (ra_timing){0};
    const ra_status st = ra_call_forward(MPI_COMM_WORLD, s, &prm, &local,
                                         &(ra_qkv){lp.q, lp.k, lp.v},
                                         &(ra_out){lp.o, lp.lse, NULL}, tm);
    check_result c = {0};
    if (st == RA_OK)
        c = check_slice(&p, &prm, &global, &lp.qs, lp.o, lp.lse);
    else
        c.bad_inf = 1;
    const check_result g = check_allreduce(MPI_COMM_WORLD, &c);
    if (rank == 0)
        printf("# P=%d %-10s N=%lld M=%lld H=%lld G=%lld D=%lld rope=%s "
               "alibi=%d%s causal=%d window=%d lens=%d seg=%d steps=%d "
               "rel_o=%.2e lse=%.2e %s\n",
               nranks, ra_layout_name(layout), (long long)s->N, (long long)s->M,
               (long long)s->H, (long long)s->G, (long long)s->D,
               ra_rope_name(prm.num.rope), prm.num.alibi,
               prm.num.alibi_slopes ? " (given)" : "", prm.num.causal,
               prm.num.window, pc->lens, pc->segments, tm->steps, g.rel_o,
               g.max_lse, check_ok(&g) ? "PASS" : "FAIL");
    local_part_free(&lp);
    free(qsl);
    free(ksl);
    free(q_lens);
    free(kv_lens);
    free(q_seg);
    free(kv_seg);
    problem_free(&p);
    return g;
}

static void expect_all_layouts(const pe_case *pc)
{
    for (int l = 0; l < 4; l++) {
        if (l == 3 && !pc->p.num.causal && !pc->p.num.window)
            continue;
        ra_timing tm;
        const check_result g = run_layout(pc, layouts[l], &tm);
        assert_true(g.rows == pc->s.B * pc->s.H * pc->s.N);
        assert_true(check_ok(&g));
    }
}

static pe_case base_case(int64_t N, int64_t M, int64_t H, int64_t G,
                         int64_t D, uint64_t seed)
{
    pe_case pc = {{2, N, M, H, G, D, D, 0}, {{0}}, 0, 0, seed};
    ra_params_default(&pc.p);
    pc.p.exec.block_q = 16; /* small tiles: many tile edges at test sizes */
    pc.p.exec.block_kv = 24;
    return pc;
}

/* The mask settings every encoding is tried under. */
static void expect_all_masks(pe_case pc)
{
    expect_all_layouts(&pc); /* none */
    pc.p.num.causal = 1;
    expect_all_layouts(&pc);
    pc.p.num.window = 1;
    pc.p.num.window_left = 37;
    pc.p.num.window_right = pc.p.num.causal ? 0 : 11;
    expect_all_layouts(&pc);
    pc.p.num.causal = 0;
    pc.p.num.window_right = 11;
    pc.lens = 1;
    expect_all_layouts(&pc);
    pc.p.num.window = 0;
    pc.p.num.causal = 1;
    pc.segments = 1;
    expect_all_layouts(&pc);
}

static void test_rope(void **state)
{
    (void)state;
    for (int r = RA_ROPE_INTERLEAVED; r <= RA_ROPE_HALF; r++) {
        pe_case pc = base_case(301, 301, 4, 2, 16, 700 + (uint64_t)r);
        pc.p.num.rope = (ra_rope)r;
        expect_all_masks(pc);
        pc = base_case(203, 331, 2, 2, 8, 710 + (uint64_t)r); /* M > N */
        pc.p.num.rope = (ra_rope)r;
        pc.p.num.rope_base = 500.0;
        pc.p.num.causal = 1;
        expect_all_layouts(&pc);
    }
}

static void test_alibi(void **state)
{
    (void)state;
    pe_case pc = base_case(301, 301, 4, 2, 16, 720); /* H a power of two */
    pc.p.num.alibi = 1;
    expect_all_masks(pc);
    pc = base_case(257, 190, 6, 3, 8, 721); /* H = 6, N > M */
    pc.p.num.alibi = 1;
    pc.p.num.causal = 1;
    expect_all_layouts(&pc);
    const double given[6] = {0.9, 0.02, 0.3, 0.0, -0.05, 1.5};
    pc.p.num.alibi_slopes = given;
    expect_all_layouts(&pc);
    pc.p.num.rope = RA_ROPE_HALF; /* both at once */
    pc.p.num.causal = 0;
    expect_all_layouts(&pc);
}

/* A window that reaches only the left neighbour: the ring stops after two
 * steps, with ALiBi exactly as without it. */
static void test_alibi_window_hops(void **state)
{
    (void)state;
    pe_case pc = base_case(2000, 2000, 2, 1, 8, 730);
    pc.p.num.causal = 1;
    pc.p.num.window = 1;
    pc.p.num.window_left = 100;
    ra_timing plain, alibi;
    check_result g = run_layout(&pc, RA_LAYOUT_CONTIGUOUS, &plain);
    assert_true(check_ok(&g));
    pc.p.num.alibi = 1;
    g = run_layout(&pc, RA_LAYOUT_CONTIGUOUS, &alibi);
    assert_true(check_ok(&g));
    assert_int_equal(alibi.steps, plain.steps);
    assert_int_equal(alibi.bytes_sent, plain.bytes_sent);
    assert_true(plain.steps == (nranks > 1 ? 2 : 1));
}

/* The standard slopes against Press et al.'s closed form: 2^(-8h/H) for a
 * power of two; for H = 12: the 8 of H = 8, then slopes 1, 3, 5, 7 of 16. */
static void test_alibi_slopes(void **state)
{
    (void)state;
    double sl[12];
    ra_alibi_slopes(8, sl);
    for (int h = 0; h < 8; h++)
        assert_true(fabs(sl[h] - pow(0.5, h + 1)) < 1e-15);
    ra_alibi_slopes(12, sl);
    for (int h = 0; h < 8; h++)
        assert_true(fabs(sl[h] - pow(0.5, h + 1)) < 1e-15);
    for (int i = 0; i < 4; i++)
        assert_true(fabs(sl[8 + i] - pow(2.0, -0.5 * (2 * i + 1))) < 1e-15);
}

/* ra_rope_apply against the fp64 definition on random rows at large
 * positions, both pairings. */
static void test_rope_apply(void **state)
{
    (void)state;
    enum { B = 2, n = 5, H = 3, D = 64 };
    const int64_t pos[n] = {0, 1, 777, 65535, 131071};
    float x[B * n * H * D], x0[B * n * H * D];
    ra_random_normal(9, RA_STREAM_Q, 0, B * n * H * D, x0);
    for (int r = RA_ROPE_INTERLEAVED; r <= RA_ROPE_HALF; r++) {
        memcpy(x, x0, sizeof x);
        const ra_rope_rows rows = {(ra_rope)r, 10000.0, B, n, H, D, pos, 3};
        ra_rope_apply(&rows, x);
        double worst = 0;
        for (int i = 0; i < B * n * H; i++) {
            double ref[D];
            for (int d = 0; d < D; d++)
                ref[d] = x0[i * D + d];
            ra_rope_row_ref((ra_rope)r, 10000.0, ref, D, pos[(i / H) % n] + 3);
            for (int d = 0; d < D; d++)
                worst = fmax(worst, fabs(x[i * D + d] - ref[d]));
        }
        assert_true(worst < 1e-5);
    }
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alibi_slopes),
        cmocka_unit_test(test_rope_apply),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_alibi),
        cmocka_unit_test(test_alibi_window_hops),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
