/* test_masks_mpi.c: every layout with causal masks, sliding windows,
 * padding lengths and packed segments, against the fp64 reference with the
 * same rules, at P = 1..4 (run by ctest under mpiexec). Every rank builds
 * the same full problem and masks from the seed, passes its layout slices,
 * checks its own rows; verdicts are reduced before asserting. */
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

/* One case: runs every layout; returns the worst global result and the
 * ring's own report (steps, bytes) of the contiguous run. */
typedef struct {
    ra_shape s;
    ra_params p;
    int lens;            /* 0: none, 1: random, 2: 0 and the full length */
    int64_t segment_avg; /* 0: none */
    uint64_t seed;
} mask_case;

static check_result run_layout(const mask_case *mc, ra_layout layout,
                               ra_timing *tm_out)
{
    const ra_shape *s = &mc->s;
    problem p;
    problem_make(&p, s, mc->seed);
    test_masks global =
        test_masks_make(s, mc->seed, mc->lens, mc->segment_avg, 1);
    int64_t *q_lens = (int64_t *)global.q_lens;
    int64_t *kv_lens = (int64_t *)global.kv_lens;
    const int64_t *q_seg = global.q_seg, *kv_seg = global.kv_seg;
    if (mc->lens == 2) { /* the edges: nothing, and everything */
        q_lens[0] = 0;
        kv_lens[0] = s->M;
        if (s->B > 1) {
            q_lens[1] = s->N;
            kv_lens[1] = 0;
        }
    }

    local_part lp;
    local_part_make(&lp, &p, &mc->p, layout, rank, nranks);
    const ra_slice qs = lp.qs, ks = lp.ks;
    float *q = lp.q, *k = lp.k, *v = lp.v, *o = lp.o, *lse = lp.lse;
    int64_t *qsl = malloc(sizeof(int64_t) * (size_t)(s->B * qs.count + 1));
    int64_t *ksl = malloc(sizeof(int64_t) * (size_t)(s->B * ks.count + 1));
    if (q_seg) {
        slice_gather(q_seg, s->B, s->N, 1, sizeof(int64_t), &qs, qsl);
        slice_gather(kv_seg, s->B, s->M, 1, sizeof(int64_t), &ks, ksl);
    }
    ra_masks local = {q_lens, kv_lens, q_seg ? qsl : NULL, q_seg ? ksl : NULL};
    ra_params prm = mc->p;
    prm.exec.layout = layout;
    ra_timing tm = {0};
    ra_status st = ra_call_forward(MPI_COMM_WORLD, s, &prm, &local,
                                   &(ra_qkv){q, k, v}, &(ra_out){o, lse, NULL},
                                   &tm);
    check_result c = {0};
    if (st == RA_OK)
        c = check_slice(&p, &prm, &global, &qs, o, lse);
    else
        c.bad_inf = 1;
    check_result g = check_allreduce(MPI_COMM_WORLD, &c);
    if (tm_out) {
        /* the ring's report, the worst over ranks */
        int64_t bytes = 0;
        MPI_Allreduce(&tm.bytes_sent, &bytes, 1, MPI_INT64_T, MPI_MAX,
                      MPI_COMM_WORLD);
        *tm_out = tm;
        tm_out->bytes_sent = bytes;
    }
    if (rank == 0)
        printf("# P=%d %-10s B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld "
               "causal=%d window=%s%lld,%lld lens=%d seg=%lld steps=%d "
               "rel_o=%.2e lse=%.2e bad=%lld %s\n",
               nranks, ra_layout_name(layout), (long long)s->B, (long long)s->N,
               (long long)s->M, (long long)s->H, (long long)s->G,
               (long long)s->D, prm.num.causal,
               prm.num.window ? "" : "off:", (long long)prm.num.window_left,
               (long long)prm.num.window_right, mc->lens,
               (long long)mc->segment_avg, tm.steps, g.rel_o, g.max_lse,
               (long long)g.bad_inf, check_ok(&g) ? "PASS" : "FAIL");
    local_part_free(&lp);
    free(qsl);
    free(ksl);
    test_masks_free(&global);
    problem_free(&p);
    return g;
}

/* Every layout must pass, with every row of every (b, h) checked. */
static void expect_all_layouts(const mask_case *mc)
{
    for (int l = 0; l < 4; l++) {
        if (l == 3 && !mc->p.num.causal && !mc->p.num.window)
            continue;
        check_result g = run_layout(mc, layouts[l], NULL);
        assert_true(g.rows == mc->s.B * mc->s.H * mc->s.N);
        assert_true(check_ok(&g));
    }
}

static mask_case base_case(int64_t B, int64_t N, int64_t M, int64_t H,
                           int64_t G, int64_t D, uint64_t seed)
{
    mask_case mc = {{B, N, M, H, G, D, D}, {{0}}, 0, 0, seed};
    ra_params_default(&mc.p);
    mc.p.exec.block_q = 16; /* small tiles: many tile edges at test sizes */
    mc.p.exec.block_kv = 24;
    return mc;
}

static void test_causal_layouts(void **state)
{
    (void)state;
    mask_case mc = base_case(2, 1001, 1001, 4, 2, 32, 101);
    mc.p.num.causal = 1;
    expect_all_layouts(&mc);
    mc = base_case(1, 7, 7, 2, 1, 8, 102); /* N < 2P */
    mc.p.num.causal = 1;
    expect_all_layouts(&mc);
    mc = base_case(1, 333, 501, 2, 2, 16, 103); /* cross, M > N */
    mc.p.num.causal = 1;
    expect_all_layouts(&mc);
    mc = base_case(1, 501, 333, 2, 2, 16, 104); /* cross, N > M */
    mc.p.num.causal = 1;
    expect_all_layouts(&mc);
}

static void test_windows(void **state)
{
    (void)state;
    mask_case mc = base_case(1, 777, 777, 2, 1, 16, 201);
    mc.p.num.window = 1;
    mc.p.num.causal = 1;
    const int64_t lefts[4] = {0, 1, 50, 5000}; /* 0 and wider than N */
    for (int i = 0; i < 4; i++) {
        mc.p.num.window_left = lefts[i];
        expect_all_layouts(&mc);
    }
    mc.p.num.causal = 0; /* two-sided */
    mc.p.num.window_left = 20;
    mc.p.num.window_right = 30;
    expect_all_layouts(&mc);
    mc.p.num.window_left = 0;
    mc.p.num.window_right = 0;
    expect_all_layouts(&mc);
    mc = base_case(1, 300, 451, 2, 2, 16, 202); /* cross lengths */
    mc.p.num.window = 1;
    mc.p.num.window_left = 40;
    mc.p.num.window_right = 5;
    expect_all_layouts(&mc);
}

/* The kernel's own tiles (block sizes left to the library: 128-row tiles
 * for a window up to 1920 keys wide) and 256-row ones: their band tiles
 * are scored by groups of 64 rows, each over only its keys (kernel.c,
 * band_groups); odd lengths leave short last tiles, lens cut rows and
 * keys off mid-group. With kv heads (G > 1) the band's keys are read from
 * a copy in rows of their own, which moves down the block with the tiles
 * (kernel.c, band_keys): at P = 1 and 2 the last case's copy moves. */
static void test_window_band_tiles(void **state)
{
    (void)state;
    mask_case mc = base_case(2, 1001, 1001, 4, 2, 16, 211);
    mc.p.exec.block_q = mc.p.exec.block_kv = 0;
    mc.p.num.window = 1;
    mc.p.num.causal = 1;
    mc.p.num.window_left = 511;
    expect_all_layouts(&mc);
    mc.lens = 1;
    mc.p.num.window_left = 300;
    expect_all_layouts(&mc);
    mc.p.num.alibi = 1; /* the bias lands on the grouped scores */
    expect_all_layouts(&mc);
    mc = base_case(1, 1001, 1201, 2, 2, 16, 212); /* cross, two-sided */
    mc.p.exec.block_q = mc.p.exec.block_kv = 0;
    mc.p.num.window = 1;
    mc.p.num.window_left = 100;
    mc.p.num.window_right = 60;
    expect_all_layouts(&mc);
    mc = base_case(1, 3816, 1001, 2, 1, 16, 213); /* N > M, wide window */
    mc.p.exec.block_q = mc.p.exec.block_kv = 256;
    mc.p.num.window = 1;
    mc.p.num.causal = 1;
    mc.p.num.window_left = 700;
    expect_all_layouts(&mc);
    mc = base_case(1, 2001, 2001, 4, 2, 16, 214); /* the copy moves */
    mc.p.exec.block_q = mc.p.exec.block_kv = 0;
    mc.p.num.window = 1;
    mc.p.num.causal = 1;
    mc.p.num.window_left = 300;
    expect_all_layouts(&mc);
}

static void test_window_skips_hops(void **state)
{
    (void)state;
    /* With contiguous slices wider than the window, only the left
     * neighbour's last L keys are ever needed: two steps, and about L rows
     * sent per rank, not a whole slice. */
    mask_case mc = base_case(1, 4000, 4000, 1, 1, 8, 301);
    mc.p.num.causal = 1;
    mc.p.num.window = 1;
    mc.p.num.window_left = 10;
    ra_timing tm;
    check_result g = run_layout(&mc, RA_LAYOUT_CONTIGUOUS, &tm);
    assert_true(check_ok(&g));
    assert_int_equal(tm.steps, nranks > 1 ? 2 : 1);
    const int64_t row_bytes = 4 * (mc.s.D + mc.s.Dv);
    assert_true(tm.bytes_sent <= (nranks > 1 ? 10 : 0) * row_bytes);
    /* Causal without a window: nobody needs the last rank's keys. */
    mc.p.num.window = 0;
    g = run_layout(&mc, RA_LAYOUT_CONTIGUOUS, &tm);
    assert_true(check_ok(&g));
    assert_int_equal(tm.steps, nranks);
}

static void test_lens(void **state)
{
    (void)state;
    mask_case mc = base_case(3, 257, 301, 4, 2, 16, 401);
    mc.lens = 1;
    expect_all_layouts(&mc);
    mc.p.num.causal = 1;
    expect_all_layouts(&mc);
    mc.lens = 2; /* q_lens 0 and N, kv_lens M and 0 */
    expect_all_layouts(&mc);
    mc.p.num.causal = 0;
    expect_all_layouts(&mc);
}

static void test_segments(void **state)
{
    (void)state;
    mask_case mc = base_case(2, 513, 513, 4, 2, 16, 501);
    mc.segment_avg = 40;
    expect_all_layouts(&mc);
    mc.p.num.causal = 1; /* document masking */
    expect_all_layouts(&mc);
    mc.lens = 1;
    mc.p.num.window = 1;
    mc.p.num.window_left = 25;
    expect_all_layouts(&mc); /* everything at once */
    mc = base_case(1, 5, 9, 2, 1, 8, 502); /* tiny: N < P at P = 4... */
    mc.segment_avg = 2;
    mc.p.num.causal = 1;
    expect_all_layouts(&mc);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_causal_layouts),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_window_band_tiles),
        cmocka_unit_test(test_window_skips_hops),
        cmocka_unit_test(test_lens),
        cmocka_unit_test(test_segments),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
