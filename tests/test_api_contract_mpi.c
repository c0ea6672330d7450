/* test_api_contract_mpi.c: the library's own contract for the functions of
 * ringattn.h that take a communicator (issue 39), at P = 1..4. Every
 * refusal is checked on every rank alike (the same status, the message
 * naming the field), and every accepted call against the fp64 reference.
 *   class 6:  huge tiles (block_q, block_kv up to INT64_MAX) are refused
 *   class 7:  options that differ across ranks are refused, naming the
 *             field, on every rank, instead of computing with each rank's
 *             own or hanging (ctest's TIMEOUT catches a hang)
 *   class 15: NULL operands and structs are refused; a rank that holds no
 *             rows may pass NULL for them
 *   class 16: threads beyond RA_THREADS_MAX are refused
 *   class 18: MPI_COMM_NULL is refused (before MPI_Init and after
 *             MPI_Finalize: test_api_noinit.c)
 *   class 19: windows of INT64_MAX keys compute as no window
 *   class 21: enum values outside their enums and a backward's NaN or +inf
 *             lse are refused */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support.h"

static int rank, nranks;

/* Odd sizes; G < H. */
static const ra_shape shape0 = {2, 13, 11, 4, 2, 8, 6, 0};

/* 1 when every rank's flag is 1. */
static int all(int flag)
{
    MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return flag;
}

/* The status every rank returned, or -1 when they differ; with want, also
 * -1 unless every rank's message holds want. */
static int agreed(ra_status st, const char *want)
{
    const int ok = !want || strstr(ra_error_message(), want) != NULL;
    int lo = ok ? (int)st : -1, hi = (int)st;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d %s: %s\n", nranks, ra_status_str(st),
               st == RA_OK ? "" : ra_error_message());
    return lo == hi ? lo : -1;
}

/* One call's inputs and options on this rank. */
typedef struct {
    problem p;
    local_part lp;
    ra_shape s;
    ra_numerics num;
    ra_exec exec;
    ra_masks masks;
    ra_params prm; /* num and exec joined, for the slices and the check */
} fixture;

/* Fresh inputs, default options (stall timeout 20 s) and this rank's
 * slices under the contiguous layout. */
static void fixture_make(fixture *f, const ra_shape *s, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    f->s = *s;
    problem_make(&f->p, s, seed);
    ra_numerics_default(&f->num);
    ra_exec_default(&f->exec);
    f->exec.layout = RA_LAYOUT_CONTIGUOUS;
    f->exec.stall_timeout = 20;
    ra_params_join(&f->num, &f->exec, &f->prm);
    local_part_make(&f->lp, &f->p, &f->prm, RA_LAYOUT_CONTIGUOUS, rank,
                    nranks);
}

static void fixture_free(fixture *f)
{
    local_part_free(&f->lp);
    problem_free(&f->p);
}

static ra_status forward(fixture *f)
{
    return ra_forward(MPI_COMM_WORLD, &f->s, &f->num, &f->exec, &f->masks,
                      &(ra_qkv){f->lp.q, f->lp.k, f->lp.v},
                      &(ra_out){f->lp.o, f->lp.lse, NULL}, NULL);
}

/* The forward's outputs on every rank against the fp64 reference of
 * params (over all ranks). */
static int forward_right(const fixture *f, const ra_params *params)
{
    const check_result mine = check_slice(&f->p, params, NULL, &f->lp.qs,
                                          f->lp.o, f->lp.lse);
    const check_result c = check_allreduce(MPI_COMM_WORLD, &mine);
    if (rank == 0)
        printf("#   rel_o=%.2e lse=%.2e bad=%lld\n", c.rel_o, c.max_lse,
               (long long)c.bad_inf);
    return check_ok(&c);
}

/* The backward's tensors of a fixture, after its forward. */
typedef struct {
    float *dout, *dq, *dk, *dv;
} grads_mem;

static void grads_make(grads_mem *g, const fixture *f)
{
    const ra_shape *s = &f->s;
    const int64_t n = f->lp.qs.count, m = f->lp.ks.count;
    g->dout = malloc(sizeof(float) * (size_t)(s->B * n * s->H * s->Dv + 1));
    g->dq = malloc(sizeof(float) * (size_t)(s->B * n * s->H * s->D + 1));
    g->dk = malloc(sizeof(float) * (size_t)(s->B * m * s->G * s->D + 1));
    g->dv = malloc(sizeof(float) * (size_t)(s->B * m * s->G * s->Dv + 1));
    ra_random_normal(7, RA_STREAM_V, 0, s->B * n * s->H * s->Dv, g->dout);
}

static void grads_free(grads_mem *g)
{
    free(g->dout);
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

static ra_status backward(fixture *f, const grads_mem *g,
                          const ra_additive_grads *dw)
{
    const ra_grads gr = {f->lp.o, f->lp.lse, g->dout, g->dq, g->dk, g->dv,
                         dw};
    return ra_backward(MPI_COMM_WORLD, &f->s, &f->num, &f->exec, &f->masks,
                       &(ra_qkv){f->lp.q, f->lp.k, f->lp.v}, &gr, NULL);
}

/* ---- class 15 --------------------------------------------------------- */

/* issue 39, class 15: a NULL operand on a rank that holds rows of it is
 * refused by name on every rank. */
static void test_class15_null_operands(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, &shape0, 15);
    const char *names[5] = {"in->q", "in->k", "in->v", "out->o", "out->lse"};
    for (int i = 0; i < 5; i++) {
        float *keep[5] = {f.lp.q, f.lp.k, f.lp.v, f.lp.o, f.lp.lse};
        float **slot[5] = {&f.lp.q, &f.lp.k, &f.lp.v, &f.lp.o, &f.lp.lse};
        if (rank == nranks - 1)
            *slot[i] = NULL;
        assert_int_equal(agreed(forward(&f), names[i]), RA_ERR_ARG);
        *slot[i] = keep[i];
    }
    assert_int_equal(agreed(ra_forward(MPI_COMM_WORLD, NULL, NULL, NULL, NULL,
                                       NULL, NULL, NULL), "shape"),
                     RA_ERR_ARG);
    assert_int_equal(agreed(ra_forward(MPI_COMM_WORLD, &f.s, NULL, NULL, NULL,
                                       NULL, NULL, NULL), "required"),
                     RA_ERR_ARG);
    assert_int_equal(agreed(forward(&f), NULL), RA_OK);
    grads_mem g;
    grads_make(&g, &f);
    float *keep = g.dk;
    if (rank == 0)
        g.dk = NULL;
    assert_int_equal(agreed(backward(&f, &g, NULL), "NULL"), RA_ERR_ARG);
    g.dk = keep;
    assert_int_equal(agreed(ra_backward(MPI_COMM_WORLD, &f.s, NULL, NULL,
                                        NULL, NULL, NULL, NULL), "required"),
                     RA_ERR_ARG);
    assert_int_equal(agreed(backward(&f, &g, NULL), NULL), RA_OK);
    grads_free(&g);
    fixture_free(&f);
}

/* issue 39, class 15: with fewer tokens than ranks, the ranks that hold
 * none pass NULL for every tensor, and the call is right. */
static void test_class15_empty_rank_null(void **state)
{
    (void)state;
    const ra_shape s = {1, 1, 2, 2, 1, 4, 3, 0};
    fixture f;
    fixture_make(&f, &s, 16);
    const int hold_q = f.lp.qs.count > 0, hold_k = f.lp.ks.count > 0;
    ra_qkv in = {hold_q ? f.lp.q : NULL, hold_k ? f.lp.k : NULL,
                 hold_k ? f.lp.v : NULL};
    const ra_out out = {hold_q ? f.lp.o : NULL, hold_q ? f.lp.lse : NULL,
                        NULL};
    ra_status st = ra_forward(MPI_COMM_WORLD, &f.s, &f.num, &f.exec, NULL,
                              &in, &out, NULL);
    assert_int_equal(agreed(st, NULL), RA_OK);
    assert_true(forward_right(&f, &f.prm));
    grads_mem g;
    grads_make(&g, &f);
    const ra_grads gr = {out.o, out.lse, hold_q ? g.dout : NULL,
                         hold_q ? g.dq : NULL, hold_k ? g.dk : NULL,
                         hold_k ? g.dv : NULL, NULL};
    st = ra_backward(MPI_COMM_WORLD, &f.s, &f.num, &f.exec, NULL, &in, &gr,
                     NULL);
    assert_int_equal(agreed(st, NULL), RA_OK);
    grads_free(&g);
    fixture_free(&f);
}

/* issue 39, class 15: the other functions that take a communicator refuse
 * NULLs on every rank. */
static void test_class15_null_structs(void **state)
{
    (void)state;
    MPI_Comm comm = MPI_COMM_WORLD;
    assert_int_equal(agreed(ra_comm_nodes(comm, NULL), "nodes"), RA_ERR_ARG);
    assert_int_equal(agreed(ra_comm_ring_order(comm, 1, NULL), "ring_comm"),
                     RA_ERR_ARG);
    assert_int_equal(agreed(ra_strategy_check(comm, NULL, NULL, NULL, 0),
                            "shape"), RA_ERR_ARG);
    assert_int_equal(agreed(ra_mha_forward(comm, NULL, NULL, NULL, NULL, NULL,
                                           NULL, NULL), "shape"), RA_ERR_ARG);
    const ra_shape s = shape0;
    assert_int_equal(agreed(ra_mha_forward(comm, &s, NULL, NULL, NULL, NULL,
                                           NULL, NULL), "io"), RA_ERR_ARG);
    ra_shape got;
    assert_int_equal(agreed(ra_h5_read_shape(comm, NULL, NULL, &got, NULL),
                            "path"), RA_ERR_ARG);
    assert_int_equal(agreed(ra_h5_gen(comm, NULL, 0, &s, RA_DTYPE_F32, 1,
                                      NULL), "path"), RA_ERR_ARG);
    assert_int_equal(agreed(ra_h5_write_outputs(comm, "never.h5", 0, &s, NULL,
                                                NULL, NULL), "meta"),
                     RA_ERR_ARG);
    assert_int_equal(agreed(ra_h5_read_inputs(comm, NULL, NULL, &s, NULL,
                                              NULL, NULL, NULL), "path"),
                     RA_ERR_ARG);
    ra_h5_masks hm;
    assert_int_equal(agreed(ra_h5_read_masks(comm, NULL, NULL, &s,
                                             RA_LAYOUT_CONTIGUOUS, NULL, &hm),
                            "path"), RA_ERR_ARG);
}

/* ---- classes 6, 16, 18, 21 ------------------------------------------- */

/* issue 39, class 6 (and 20's "cannot allocate the ring buffers"): tiles
 * beyond RA_BLOCK_MAX are refused by the option's name; class 16: threads
 * beyond RA_THREADS_MAX likewise, through the layer too. */
static void test_class6_16_bounds(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, &shape0, 6);
    const int64_t huge[] = {(int64_t)RA_BLOCK_MAX + 1, (int64_t)1 << 31,
                            (int64_t)1 << 60, (int64_t)1 << 62, INT64_MAX,
                            -1};
    for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
        f.exec.block_kv = huge[i];
        assert_int_equal(agreed(forward(&f), "exec.block_kv"), RA_ERR_ARG);
        f.exec.block_kv = 0;
        f.exec.block_q = huge[i];
        assert_int_equal(agreed(forward(&f), "exec.block_q"), RA_ERR_ARG);
        assert_int_equal(agreed(ra_strategy_check(MPI_COMM_WORLD, &f.s,
                                                  &f.num, &f.exec, 0),
                                "exec.block_q"), RA_ERR_ARG);
        f.exec.block_q = 0;
    }
    f.exec.block_kv = 3; /* odd small tiles are fine */
    assert_int_equal(agreed(forward(&f), NULL), RA_OK);
    assert_true(forward_right(&f, &f.prm));
    f.exec.block_kv = 0;
    const int threads[] = {100000, RA_THREADS_MAX + 1, -1};
    for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
        f.exec.threads = threads[i];
        assert_int_equal(agreed(forward(&f), "exec.threads"), RA_ERR_ARG);
        const ra_mha layer = {8, 8, 8, NULL, NULL, NULL, NULL,
                              NULL, NULL, NULL, NULL, 0};
        const ra_mha_io io = {NULL, NULL, NULL};
        assert_int_equal(agreed(ra_mha_forward(MPI_COMM_WORLD, &f.s, &f.num,
                                               &f.exec, NULL, &layer, &io,
                                               NULL), "exec.threads"),
                         RA_ERR_ARG);
    }
    fixture_free(&f);
}

/* issue 39, class 18: MPI_COMM_NULL is refused, not fatal. */
static void test_class18_comm_null(void **state)
{
    (void)state;
    const MPI_Comm none = MPI_COMM_NULL;
    const ra_shape s = shape0;
    ra_nodes nodes;
    MPI_Comm ring;
    ra_shape got;
    assert_int_equal(ra_forward(none, &s, NULL, NULL, NULL, NULL, NULL, NULL),
                     RA_ERR_ARG);
    assert_non_null(strstr(ra_error_message(), "MPI_COMM_NULL"));
    assert_int_equal(ra_backward(none, &s, NULL, NULL, NULL, NULL, NULL,
                                 NULL), RA_ERR_ARG);
    assert_int_equal(ra_strategy_check(none, &s, NULL, NULL, 0), RA_ERR_ARG);
    assert_int_equal(ra_mha_forward(none, &s, NULL, NULL, NULL, NULL, NULL,
                                    NULL), RA_ERR_ARG);
    assert_int_equal(ra_comm_nodes(none, &nodes), RA_ERR_ARG);
    assert_int_equal(ra_comm_ring_order(none, 1, &ring), RA_ERR_ARG);
    assert_int_equal(ra_h5_read_shape(none, "x.h5", NULL, &got, NULL),
                     RA_ERR_ARG);
    assert_int_equal(ra_h5_gen(none, "x.h5", 0, &s, RA_DTYPE_F32, 1, NULL),
                     RA_ERR_ARG);
    assert_int_equal(ra_h5_write_outputs(none, "x.h5", 0, &s, NULL, NULL,
                                         NULL), RA_ERR_ARG);
    assert_true(all(1));
}

/* issue 39, class 21: every enum of ra_numerics and ra_exec outside its
 * values is refused by the field's name. */
static void test_class21_enums(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, &shape0, 21);
    const ra_numerics num = f.num;
    const ra_exec exec = f.exec;
    const char *want[] = {"num.score", "num.rope", "num.precision",
                          "num.align", "exec.layout", "exec.strategy",
                          "exec.gemm", "exec.wire"};
    for (int i = 0; i < 8; i++) {
        f.num = num;
        f.exec = exec;
        switch (i) {
        case 0: f.num.score = (ra_score)99; break;
        case 1: f.num.rope = (ra_rope)9; break;
        case 2: f.num.precision = (ra_precision)5; break;
        case 3: f.num.align = (ra_align)3; break;
        case 4: f.exec.layout = (ra_layout)17; break;
        case 5: f.exec.strategy = (ra_strategy)99; break;
        case 6: f.exec.gemm = (ra_gemm)9; break;
        default: f.exec.wire = (ra_wire)7; break;
        }
        assert_int_equal(agreed(forward(&f), want[i]), RA_ERR_ARG);
        assert_int_equal(agreed(ra_strategy_check(MPI_COMM_WORLD, &f.s,
                                                  &f.num, &f.exec, 0),
                                want[i]), RA_ERR_ARG);
    }
    fixture_free(&f);
}

/* issue 39, class 21: a backward whose lse holds NaN or +inf on one rank
 * is refused on every rank; -inf (a row that sees no key) is not. */
static void test_class21_lse(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, &shape0, 22);
    assert_int_equal(agreed(forward(&f), NULL), RA_OK);
    grads_mem g;
    grads_make(&g, &f);
    const int last = rank == nranks - 1;
    const float bad[2] = {NAN, INFINITY};
    const float keep = f.lp.lse[0];
    for (int i = 0; i < 2; i++) {
        if (last)
            f.lp.lse[0] = bad[i];
        assert_int_equal(agreed(backward(&f, &g, NULL),
                                last ? (i ? "+inf" : "NaN") : "lse"),
                         RA_ERR_ARG);
        f.lp.lse[0] = keep;
    }
    /* a row that sees no key: q_lens cut batch 0 short, its lse -inf */
    const int64_t q_lens[2] = {0, shape0.N};
    f.masks.q_lens = q_lens;
    assert_int_equal(agreed(forward(&f), NULL), RA_OK);
    assert_true(all(f.lp.qs.count == 0 || isinf(f.lp.lse[0])));
    assert_int_equal(agreed(backward(&f, &g, NULL), NULL), RA_OK);
    grads_free(&g);
    fixture_free(&f);
}

/* ---- class 19 --------------------------------------------------------- */

/* issue 39, class 19: windows of INT64_MAX keys (the largest "no limit")
 * on either side give the result of no window, in every layout and
 * strategy, forward and backward, against the fp64 reference. */
static void test_class19_window_max(void **state)
{
    (void)state;
    const ra_layout lay[] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                             RA_LAYOUT_STRIPED, RA_LAYOUT_BALANCED};
    for (int c = 0; c < 8; c++) {
        fixture f;
        fixture_make(&f, &shape0, 190 + (uint64_t)c);
        f.num.causal = c & 1;
        f.num.window = 1;
        f.num.window_left = INT64_MAX;
        f.num.window_right = c & 2 ? 0 : INT64_MAX;
        f.exec.layout = lay[c / 2];
        f.exec.strategy = c == 5 ? RA_STRATEGY_ALLGATHER : RA_STRATEGY_RING;
        local_part_free(&f.lp);
        ra_params_join(&f.num, &f.exec, &f.prm);
        local_part_make(&f.lp, &f.p, &f.prm, f.exec.layout, rank, nranks);
        assert_int_equal(agreed(forward(&f), NULL), RA_OK);
        ra_params ref = f.prm; /* the reference without the window */
        ref.num.window = 0;
        ref.num.causal = f.num.causal;
        if (c & 2) /* right 0 is causal's own limit */
            ref.num.causal = 1;
        assert_true(forward_right(&f, &ref));
        if (f.exec.strategy == RA_STRATEGY_RING) {
            grads_mem g;
            grads_make(&g, &f);
            assert_int_equal(agreed(backward(&f, &g, NULL), NULL), RA_OK);
            grads_free(&g);
        }
        fixture_free(&f);
    }
}

/* ---- class 7 ---------------------------------------------------------- */

static const float w_q[3 * 8] = {0.1f, -0.2f, 0.3f, 0.05f, 0.2f, 0.1f,
                                 -0.1f, 0.4f, 0.2f, 0.1f, -0.3f, 0.1f};
static const float w_k[3 * 8] = {0.2f, 0.1f, -0.1f, 0.3f, -0.2f, 0.1f,
                                  0.1f, 0.2f, 0.1f, -0.1f, 0.2f, 0.3f};
static float w_v[3] = {0.5f, -0.25f, 0.75f};
static float w_v_other[3] = {0.5f, -0.25f, 0.5f};

/* Case `which` of the options that differ: the options every rank
 * passes, then (mine: on the last rank) what that rank changes; returns
 * the field the refusal must name. */
static const char *differ_numerics(int which, int mine, fixture *f)
{
    static const double slopes[2][4] = {{0.5, 0.25, 0.125, 0.0625},
                                        {0.5, 0.25, 0.125, 0.03}};
    static const ra_additive add[2] = {{3, w_q, w_k, w_v},
                                       {3, w_q, w_k, w_v_other}};
    ra_numerics *n = &f->num;
    switch (which) {
    case 0: n->scale = mine ? 0.25 : 0.125; return "num.scale";
    case 1: n->causal = mine; return "num.causal";
    case 2: n->window = mine; n->window_left = 3; return "num.window";
    case 3: n->window = 1; n->window_left = mine ? 4 : 3;
            return "num.window_left";
    case 4: n->window = 1; n->window_right = mine ? 4 : 3;
            return "num.window_right";
    case 5: n->score = mine ? RA_SCORE_GAUSSIAN : RA_SCORE_DOT;
            return "num.score";
    case 6: n->score = RA_SCORE_GAUSSIAN; n->sigma = mine ? 3 : 2;
            return "num.sigma";
    case 7: n->rope = mine ? RA_ROPE_HALF : RA_ROPE_NONE; return "num.rope";
    case 8: n->rope = RA_ROPE_HALF; n->rope_base = mine ? 500 : 10000;
            return "num.rope_base";
    case 9: n->alibi = 1; n->alibi_slopes = slopes[mine];
            return "num.alibi_slopes";
    case 10: n->alibi = mine; return "num.alibi";
    case 11: n->causal = 1; /* a rule for the alignment to move */
             n->align = mine ? RA_ALIGN_SEQUENCE : RA_ALIGN_TENSOR;
             return "num.align";
    case 12: n->nonfinite = mine; return "num.nonfinite";
    case 13: n->precision = mine ? RA_PRECISION_BF16 : RA_PRECISION_FP32;
             return "num.precision";
    case 14: n->score = RA_SCORE_ADDITIVE; n->additive = &add[mine];
             return "num.additive.w_v";
    default: return NULL;
    }
}

static const char *differ_exec(int which, int mine, fixture *f)
{
    static const int64_t lens[2][2] = {{5, 11}, {5, 10}};
    ra_exec *e = &f->exec;
    switch (which) {
    case 15: e->strategy = mine ? RA_STRATEGY_ALLGATHER : RA_STRATEGY_RING;
             return "exec.strategy";
    case 16: e->strategy = mine ? RA_STRATEGY_ULYSSES : RA_STRATEGY_TREE;
             return "exec.strategy";
    case 17: e->layout = mine ? RA_LAYOUT_STRIPED : RA_LAYOUT_CONTIGUOUS;
             return "exec.layout";
    case 18: e->block_kv = mine ? 16 : 0; return "exec.block_kv";
    case 19: e->block_q = mine ? 5 : 7; return "exec.block_q";
    case 20: e->wire = mine ? RA_WIRE_BF16 : RA_WIRE_AUTO;
             return "exec.wire";
    case 21: e->stall_timeout = mine ? 30 : 20; return "exec.stall_timeout";
    case 22: e->gemm = mine ? RA_GEMM_OPENBLAS : RA_GEMM_AUTO;
             return "exec.gemm";
    case 23: f->masks.q_lens = lens[mine]; return "masks.q_lens";
    case 24: f->masks.kv_lens = mine ? lens[0] : NULL;
             return "masks.kv_lens";
    case 25: f->s.N = mine ? 12 : 13; return "shape.N";
    case 26: f->s.G = mine ? 4 : 2; return "shape.G";
    default: return NULL;
    }
}

enum { DIFFER_CASES = 27 };

/* issue 39, class 7: each option that the last rank passes differently is
 * refused on every rank with RA_ERR_ARG, naming it (before the fix: each
 * rank computed with its own, or the call hung). */
static void test_class7_options_differ(void **state)
{
    (void)state;
    for (int which = 0; which < DIFFER_CASES; which++) {
        fixture f;
        fixture_make(&f, &shape0, 700 + (uint64_t)which);
        const int mine = nranks > 1 && rank == nranks - 1;
        const char *field = differ_numerics(which, mine, &f);
        if (!field)
            field = differ_exec(which, mine, &f);
        if (rank == 0)
            printf("# case %d: %s\n", which, field);
        const ra_status st = forward(&f);
        if (nranks > 1) {
            assert_int_equal(agreed(st, field), RA_ERR_ARG);
            assert_true(all(strstr(ra_error_message(), "options differ "
                                   "across ranks") != NULL));
        } else {
            assert_int_equal(agreed(st, NULL), RA_OK);
        }
        fixture_free(&f);
    }
}

/* issue 39, class 7: the message shows rank 0's value and the differing
 * rank's; ra_strategy_check, ra_backward and ra_mha_forward agree too;
 * threads and mem_limit are each rank's own. */
static void test_class7_calls(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, &shape0, 77);
    const int last = nranks > 1 && rank == nranks - 1;
    const ra_status fwd_st = forward(&f);
    assert_int_equal(agreed(fwd_st, NULL), RA_OK);
    char want[96];
    snprintf(want, sizeof want, "num.scale (rank 0: 0.125, rank %d: 0.25)",
             nranks - 1);
    f.num.scale = last ? 0.25 : 0.125;
    if (nranks > 1) {
        assert_int_equal(agreed(forward(&f), want), RA_ERR_ARG);
        grads_mem g;
        grads_make(&g, &f);
        assert_int_equal(agreed(backward(&f, &g, NULL), "num.scale"),
                         RA_ERR_ARG);
        grads_free(&g);
        f.num.scale = NAN;
        f.exec.strategy = last ? RA_STRATEGY_TREE : RA_STRATEGY_RING;
        assert_int_equal(agreed(ra_strategy_check(MPI_COMM_WORLD, &f.s,
                                                  &f.num, &f.exec, 0),
                                "exec.strategy"), RA_ERR_ARG);
        f.exec.strategy = RA_STRATEGY_RING;
    }
    f.num.scale = NAN;
    f.exec.threads = last ? 2 : 1;
    f.exec.mem_limit = last ? (int64_t)1 << 30 : 0;
    assert_int_equal(agreed(forward(&f), NULL), RA_OK);
    assert_true(forward_right(&f, &f.prm));
    fixture_free(&f);
}

/* issue 39, class 7 (no rank hangs): a rank that never comes to a call
 * is found by the others' stall watchdog at the start of the call (before:
 * they waited in MPI_Comm_dup for ever, whatever stall_timeout said).
 * Once they gave up, the absent rank joins the duplication they left in
 * flight, so that the job can go on. */
static void test_class7_absent_rank(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, &shape0, 78);
    const int absent = nranks > 1 && rank == nranks - 1;
    f.exec.stall_timeout = 1;
    int ok = 1, token = 0;
    if (!absent) {
        const ra_status st = forward(&f);
        ok = nranks == 1 ? st == RA_OK
                         : st == RA_ERR_MPI &&
                               strstr(ra_error_message(), "stalled at the "
                                      "start of the call") != NULL;
        if (rank == 0)
            printf("# P=%d %s: %s\n", nranks, ra_status_str(st),
                   ra_error_message());
        if (nranks > 1)
            MPI_Send(&token, 1, MPI_INT, nranks - 1, 39, MPI_COMM_WORLD);
    } else {
        for (int i = 0; i < nranks - 1; i++)
            MPI_Recv(&token, 1, MPI_INT, MPI_ANY_SOURCE, 39, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Comm late; /* the others' duplicate stays theirs, unfreed */
        MPI_Comm_dup(MPI_COMM_WORLD, &late);
    }
    assert_true(all(ok));
    fixture_free(&f);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class15_null_operands),
        cmocka_unit_test(test_class15_empty_rank_null),
        cmocka_unit_test(test_class15_null_structs),
        cmocka_unit_test(test_class6_16_bounds),
        cmocka_unit_test(test_class18_comm_null),
        cmocka_unit_test(test_class21_enums),
        cmocka_unit_test(test_class21_lse),
        cmocka_unit_test(test_class19_window_max),
        cmocka_unit_test(test_class7_options_differ),
        cmocka_unit_test(test_class7_calls),
        cmocka_unit_test(test_class7_absent_rank),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
