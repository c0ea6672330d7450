/* test_shard_move_mpi.c: the C API's way for shards cut otherwise
 * (issue 41 part 1): ra_forward and ra_backward take the layout's cut, and
 * a caller holding contiguous shards (a data loader's) moves them with
 * ra_shard_move. Checked: every pair of cuts moves rows bitwise, both
 * ways, at lengths 0, 2, odd and 8P; contiguous shards moved into every
 * layout, through the forward and the backward under every mask, and
 * moved back match fp64; row counts that are not the cut's, options that
 * differ across ranks and an unresolved layout are refused on every rank
 * alike. Run at P = 1..4. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support.h"
#include "support_bwd.h"

static int rank, nranks;

static const ra_layout LAYOUTS[4] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                                     RA_LAYOUT_STRIPED, RA_LAYOUT_BALANCED};

/* The spec of a move of this rank's rows of len tokens. */
static ra_shard_move_spec spec_of(ra_layout from, ra_layout to,
                                  const ra_numerics *num, int64_t len,
                                  int64_t outer, int64_t row_bytes)
{
    return (ra_shard_move_spec){
        from, to, num, len,
        ra_layout_slice(from, num, len, rank, nranks).count,
        ra_layout_slice(to, num, len, rank, nranks).count, outer, row_bytes,
        60.0};
}

/* x (outer, src_rows, row_bytes) moved by s (backwards: to -> from) into a
 * new array; NULL when the move failed (on every rank alike). */
static void *moved(ra_shard_move_spec s, const void *x, int backwards)
{
    if (backwards) {
        const ra_layout l = s.from;
        const int64_t n = s.src_rows;
        s.from = s.to, s.src_rows = s.dst_rows;
        s.to = l, s.dst_rows = n;
    }
    void *y = malloc((size_t)(s.outer * s.dst_rows * s.row_bytes) + 1);
    if (ra_shard_move(MPI_COMM_WORLD, &s, x, y) != RA_OK) {
        printf("# ra_shard_move: %s\n", ra_error_message());
        free(y);
        return NULL;
    }
    return y;
}

/* This rank's rows of a full (outer, len, row) float array under sl. */
static float *gathered(const float *full, int64_t outer, int64_t len,
                       int64_t row, const ra_slice *sl)
{
    float *out = malloc((size_t)(outer * sl->count * row) * sizeof *out + 1);
    slice_gather(full, outer, len, row, sizeof(float), sl, out);
    return out;
}

/* Rows of one move, one length and one rule, there and back: the number
 * of arrays that are not bitwise what the cuts say on this rank. */
static int move_case(ra_layout from, ra_layout to, const ra_numerics *num,
                     int64_t len)
{
    enum { OUTER = 2, ROW = 3 };
    float *full = malloc((size_t)(OUTER * len * ROW) * sizeof *full + 1);
    for (int64_t i = 0; i < OUTER * len * ROW; i++)
        full[i] = (float)i * 0.25f;
    const ra_slice a = ra_layout_slice(from, num, len, rank, nranks),
                   b = ra_layout_slice(to, num, len, rank, nranks);
    float *src = gathered(full, OUTER, len, ROW, &a),
          *want = gathered(full, OUTER, len, ROW, &b);
    const ra_shard_move_spec s =
        spec_of(from, to, num, len, OUTER, ROW * sizeof(float));
    float *dst = moved(s, src, 0);
    float *back = dst ? moved(s, dst, 1) : NULL;
    const size_t bytes_b = (size_t)(OUTER * b.count * ROW) * sizeof(float),
                 bytes_a = (size_t)(OUTER * a.count * ROW) * sizeof(float);
    const int bad = (!dst || memcmp(dst, want, bytes_b) != 0) +
                    (!back || memcmp(back, src, bytes_a) != 0);
    free(full), free(src), free(want), free(dst), free(back);
    return bad;
}

static void test_rows_between_every_pair_of_cuts(void **state)
{
    (void)state;
    ra_numerics rules[3];
    for (int r = 0; r < 3; r++)
        ra_numerics_default(&rules[r]);
    rules[1].causal = 1;
    rules[2].window = 1, rules[2].window_left = 2, rules[2].window_right = 1;
    const int64_t lens[4] = {0, 2, 4 * nranks + 7, 8 * nranks};
    int bad = 0, cases = 0;
    for (int f = 0; f < 4; f++)
        for (int t = 0; t < 4; t++)
            for (int r = 0; r < 3; r++)
                for (int l = 0; l < 4; l++, cases++)
                    bad += move_case(LAYOUTS[f], LAYOUTS[t],
                                     r ? &rules[r] : NULL, lens[l]);
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("# P=%d rows moved between 4 x 4 cuts, 3 rules, 4 lengths: "
           "%d moves, %d not bitwise  %s\n", nranks, 2 * cases, bad,
           bad ? "FAIL" : "PASS");
    assert_int_equal(bad, 0);
}

/* One attention case's problem, options and global masks. */
typedef struct {
    problem p;
    ra_numerics num;
    ra_exec exec;
    ra_params prm;
    int64_t lens[4]; /* q_lens (B), kv_lens (B) */
    int64_t *seg;    /* (B, N) segment ids, or NULL */
    test_masks global;
    float *dout;     /* (B, N, H, Dv) */
} att_case;

enum { B = 2, H = 2, G = 1, D = 8 };
static const char *const MASKS[5] = {"none", "causal", "window", "lens",
                                     "segments"};

static void att_case_make(att_case *c, int64_t N, ra_layout layout,
                          int mask)
{
    memset(c, 0, sizeof *c);
    const ra_shape s = {.B = B, .N = N, .M = N, .H = H, .G = G, .D = D,
                        .Dv = D};
    problem_make(&c->p, &s, 4100 + (uint64_t)mask);
    ra_numerics_default(&c->num);
    ra_exec_default(&c->exec);
    c->exec.layout = layout;
    c->num.causal = mask == 1;
    c->num.window = mask == 2, c->num.window_left = 3;
    c->num.window_right = 1;
    ra_params_join(&c->num, &c->exec, &c->prm);
    if (mask == 3) {
        const int64_t lens[4] = {N - 2, N, N, 5};
        memcpy(c->lens, lens, sizeof lens);
        c->global.q_lens = c->lens, c->global.kv_lens = c->lens + 2;
    }
    if (mask == 4) {
        c->seg = malloc((size_t)(B * N) * sizeof *c->seg);
        for (int64_t i = 0; i < B * N; i++)
            c->seg[i] = i % N >= 6;
        c->global.q_seg = c->global.kv_seg = c->seg;
    }
    c->dout = malloc((size_t)(B * N * H * D) * sizeof *c->dout);
    ra_random_normal(4200, RA_STREAM_Q, 0, B * N * H * D, c->dout);
}

static void att_case_free(att_case *c)
{
    problem_free(&c->p);
    free(c->seg);
    free(c->dout);
}

/* This rank's arrays of an attention case, in the contiguous cut (c*) and
 * moved into the layout (m*); outputs and gradients in the layout, then
 * moved back (b*). */
typedef struct {
    float *q, *k, *v, *dout;
    int64_t *seg;
    float *mq, *mk, *mv, *mdout;
    int64_t *mseg;
    float *o, *lse, *dq, *dk, *dv;
    float *bo, *blse, *bdq, *bdk, *bdv;
} att_arrays;

static void att_arrays_free(att_arrays *a)
{
    void *all[] = {a->q, a->k, a->v, a->dout, a->seg, a->mq, a->mk,
                   a->mv, a->mdout, a->mseg, a->o, a->lse, a->dq, a->dk,
                   a->dv, a->bo, a->blse, a->bdq, a->bdk, a->bdv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* The specs of the case's moves: rows of q-like (H * D floats), k-like
 * (G * D floats), lse (one float, outer B * H) and segment ids. */
typedef struct {
    ra_shard_move_spec q, kv, lse, seg;
} att_specs;

static att_specs att_specs_of(const att_case *c)
{
    const int64_t N = c->p.s.N;
    const ra_layout from = RA_LAYOUT_CONTIGUOUS, to = c->exec.layout;
    return (att_specs){
        spec_of(from, to, &c->num, N, B, H * D * sizeof(float)),
        spec_of(from, to, &c->num, N, B, G * D * sizeof(float)),
        spec_of(from, to, &c->num, N, B * H, sizeof(float)),
        spec_of(from, to, &c->num, N, B, sizeof(int64_t))};
}

/* Contiguous shards moved in, ra_forward and ra_backward in the layout,
 * the results moved back: the calls' agreed status. */
static ra_status att_run(const att_case *c, att_arrays *a)
{
    const int64_t N = c->p.s.N;
    const ra_slice cut = ra_layout_slice(RA_LAYOUT_CONTIGUOUS, NULL, N,
                                         rank, nranks);
    const att_specs s = att_specs_of(c);
    a->q = gathered(c->p.q, B, N, H * D, &cut);
    a->k = gathered(c->p.k, B, N, G * D, &cut);
    a->v = gathered(c->p.v, B, N, G * D, &cut);
    a->dout = gathered(c->dout, B, N, H * D, &cut);
    a->mq = moved(s.q, a->q, 0), a->mk = moved(s.kv, a->k, 0);
    a->mv = moved(s.kv, a->v, 0), a->mdout = moved(s.q, a->dout, 0);
    if (c->seg) {
        a->seg = malloc((size_t)(B * cut.count) * sizeof *a->seg + 1);
        slice_gather(c->seg, B, N, 1, sizeof *a->seg, &cut, a->seg);
        a->mseg = moved(s.seg, a->seg, 0);
    }
    const int64_t n = s.q.dst_rows;
    a->o = malloc((size_t)(B * n * H * D) * sizeof(float) + 1);
    a->lse = malloc((size_t)(B * H * n) * sizeof(float) + 1);
    a->dq = malloc((size_t)(B * n * H * D) * sizeof(float) + 1);
    a->dk = malloc((size_t)(B * n * G * D) * sizeof(float) + 1);
    a->dv = malloc((size_t)(B * n * G * D) * sizeof(float) + 1);
    const ra_masks m = {c->global.q_lens, c->global.kv_lens, a->mseg,
                        a->mseg};
    const ra_qkv in = {a->mq, a->mk, a->mv};
    ra_status st = ra_forward(MPI_COMM_WORLD, &c->p.s, &c->num, &c->exec,
                              &m, &in, &(ra_out){a->o, a->lse, NULL}, NULL);
    const ra_grads g = {.o = a->o, .lse = a->lse, .dout = a->mdout,
                        .dq = a->dq, .dk = a->dk, .dv = a->dv};
    if (st == RA_OK)
        st = ra_backward(MPI_COMM_WORLD, &c->p.s, &c->num, &c->exec, &m,
                         &in, &g, NULL);
    if (st != RA_OK)
        return st;
    a->bo = moved(s.q, a->o, 1), a->blse = moved(s.lse, a->lse, 1);
    a->bdq = moved(s.q, a->dq, 1), a->bdk = moved(s.kv, a->dk, 1);
    a->bdv = moved(s.kv, a->dv, 1);
    return RA_OK;
}

/* One layout and mask: 1 when o, lse, dq, dk and dv, moved back to the
 * contiguous cut, match fp64 on every rank. */
static int att_case_ok(int64_t N, ra_layout layout, int mask)
{
    att_case c;
    att_case_make(&c, N, layout, mask);
    bwd_ref ref;
    bwd_ref_make(&ref, &c.p, &c.prm, &c.global, c.dout);
    att_arrays a = {0};
    const ra_status st = att_run(&c, &a);
    const ra_slice cut = ra_layout_slice(RA_LAYOUT_CONTIGUOUS, NULL, N,
                                         rank, nranks);
    check_result fwd = {0};
    bwd_tally t = {0};
    if (st == RA_OK) {
        fwd = check_slice(&c.p, &c.prm, &c.global, &cut, a.bo, a.blse);
        bwd_tally_add(&t, 0, a.bdq, ref.dq, B, N, H * D, &cut);
        bwd_tally_add(&t, 1, a.bdk, ref.dk, B, N, G * D, &cut);
        bwd_tally_add(&t, 2, a.bdv, ref.dv, B, N, G * D, &cut);
    }
    fwd = check_allreduce(MPI_COMM_WORLD, &fwd);
    MPI_Allreduce(MPI_IN_PLACE, &t, BWD_TALLY_DOUBLES, MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    const double rq = bwd_tally_rel(&t, 0), rk = bwd_tally_rel(&t, 1),
                 rv = bwd_tally_rel(&t, 2);
    const int ok = st == RA_OK && check_ok(&fwd) && rq < 1e-4 &&
                   rk < 1e-4 && rv < 1e-4 && t.nonfinite == 0;
    printf("# P=%d N=%lld %-10s %-8s o %.1e dq %.1e dk %.1e dv %.1e  %s%s\n",
           nranks, (long long)N, ra_layout_name(layout), MASKS[mask],
           fwd.rel_o, rq, rk, rv, ok ? "PASS" : "FAIL ",
           st == RA_OK ? "" : ra_error_message());
    att_arrays_free(&a);
    bwd_ref_free(&ref);
    att_case_free(&c);
    return ok;
}

static void test_contiguous_shards_moved_into_every_layout(void **state)
{
    (void)state;
    int failed = 0;
    for (int l = 0; l < 4; l++)
        for (int mask = 0; mask < 5; mask++)
            failed += !att_case_ok(4 * nranks + 5, LAYOUTS[l], mask);
    assert_int_equal(failed, 0);
}

/* st is RA_ERR_ARG with text in its message on every rank. */
static void refused(ra_status st, const char *what, const char *text)
{
    int ok = st == RA_ERR_ARG && strstr(ra_error_message(), text) != NULL;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    printf("# P=%d %s: %s  %s\n", nranks, what,
           st == RA_OK ? "accepted" : ra_error_message(),
           ok ? "PASS" : "FAIL");
    assert_true(ok);
}

static void test_cuts_that_do_not_match_refused(void **state)
{
    (void)state;
    const int64_t N = 4 * nranks + 7, last = nranks - 1;
    float *x = calloc((size_t)(2 * N), sizeof *x);
    float *y = calloc((size_t)(2 * N), sizeof *y);
    ra_shard_move_spec s = spec_of(RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                                   NULL, N, 2, sizeof(float));
    char text[80];
    snprintf(text, sizeof text, "ra_shard_move: rank %lld holds",
             (long long)last);
    s.src_rows += rank == last;
    refused(ra_shard_move(MPI_COMM_WORLD, &s, x, y), "a row too many",
            text);
    s.src_rows -= rank == last;
    /* Zigzag shards passed as contiguous ones: refused wherever a rank's
     * counts differ between the two cuts. */
    ra_shard_move_spec z = s;
    z.src_rows = ra_layout_slice(RA_LAYOUT_ZIGZAG, NULL, N, rank, nranks)
                     .count;
    int differ = z.src_rows != s.src_rows;
    MPI_Allreduce(MPI_IN_PLACE, &differ, 1, MPI_INT, MPI_MAX,
                  MPI_COMM_WORLD);
    if (differ)
        refused(ra_shard_move(MPI_COMM_WORLD, &z, x, y),
                "zigzag shards as contiguous", "rows where layout "
                "contiguous gives it");
    if (nranks > 1) {
        ra_shard_move_spec l = s;
        l.len += rank == last;
        l.src_rows = ra_layout_slice(l.from, NULL, l.len, rank, nranks)
                         .count;
        l.dst_rows = ra_layout_slice(l.to, NULL, l.len, rank, nranks).count;
        refused(ra_shard_move(MPI_COMM_WORLD, &l, x, y),
                "lengths that differ", "options differ across ranks: len");
    }
    ra_shard_move_spec a = s;
    a.to = RA_LAYOUT_AUTO;
    refused(ra_shard_move(MPI_COMM_WORLD, &a, x, y), "layout auto",
            "layout auto: expected contiguous, zigzag");
    refused(ra_shard_move(MPI_COMM_WORLD, NULL, x, y), "no spec",
            "spec is NULL");
    free(x), free(y);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_between_every_pair_of_cuts),
        cmocka_unit_test(test_contiguous_shards_moved_into_every_layout),
        cmocka_unit_test(test_cuts_that_do_not_match_refused),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
