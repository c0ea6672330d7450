/* test_checkpoint_mpi.c: checkpoints of a call (ringattn.h, ra_checkpoint)
 * at P = 1..4, forward and backward, on the strategies with steps (ring;
 * ring-q, whose query blocks and their (o, lse) travel; hybrid, a ring
 * between head groups; the backward runs on the ring for each): a call
 * stopped at each step boundary in turn (RA_STOPPED, its state saved in
 * memory) and resumed from that state gives bitwise the o and lse (dq,
 * dk, dv) of the call never stopped, which are right against the fp64
 * reference (the resumed call's first step is the one after the loaded
 * boundary); a call that saves at every boundary and goes on gives the
 * same bits too. The cases cover causal with zigzag, a window with
 * balanced, RoPE with ALiBi and packed segments (whose ids the resumed
 * step fetches), bf16 (its K/V on a bf16 wire), on each strategy.
 * Refusals: the strategies without steps, the attention map, ranks that
 * load different steps. Verdicts are reduced over the ranks; rank 0
 * prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "call.h"
#include "support.h"
#include "support_bwd.h"

static int rank, nranks;

/* The saved state of one rank, and what the hooks do. */
typedef struct {
    int stop_at;         /* ask: RA_CKPT_STOP at this boundary; 0: never */
    int save_all;        /* ask: RA_CKPT_SAVE at every boundary */
    int step, nparts, saves;
    float *part[RA_STATE_PARTS_MAX];
    int64_t count[RA_STATE_PARTS_MAX];
    int skew;            /* load: rank 1 claims one step more */
    int first;           /* the first step a call reported done (on_step):
                            a resumed call's is the loaded step + 1 */
} memory;

static void hook_step(void *ctx, int done, int total)
{
    memory *m = ctx;
    (void)total;
    if (!m->first)
        m->first = done;
}

static int hook_ask(void *ctx, int done, int total)
{
    const memory *m = ctx;
    (void)total;
    if (m->stop_at == done)
        return RA_CKPT_STOP;
    return m->save_all ? RA_CKPT_SAVE : RA_CKPT_GO_ON;
}

static ra_status hook_save(void *ctx, const ra_state *st)
{
    memory *m = ctx;
    m->step = st->step;
    m->nparts = st->nparts;
    m->saves++;
    for (int i = 0; i < st->nparts; i++) {
        free(m->part[i]);
        m->count[i] = st->part[i].count;
        m->part[i] = malloc(sizeof(float) * (size_t)(m->count[i] + 1));
        memcpy(m->part[i], st->part[i].data,
               sizeof(float) * (size_t)m->count[i]);
    }
    return RA_OK;
}

static ra_status hook_load(void *ctx, ra_state *st)
{
    const memory *m = ctx;
    if (st->nparts != m->nparts)
        return ra_error_set(RA_ERR_INPUT, "test: %d parts, saved %d",
                            st->nparts, m->nparts);
    for (int i = 0; i < st->nparts; i++) {
        if (st->part[i].count != m->count[i])
            return ra_error_set(RA_ERR_INPUT, "test: part %s differs",
                                st->part[i].name);
        memcpy(st->part[i].data, m->part[i],
               sizeof(float) * (size_t)m->count[i]);
    }
    st->step = m->step + (m->skew && rank == 1);
    return RA_OK;
}

static void memory_free(memory *m)
{
    for (int i = 0; i < RA_STATE_PARTS_MAX; i++)
        free(m->part[i]);
    memset(m, 0, sizeof *m);
}

/* One case: options, layout, whether segments are given, the strategy
 * (hybrid: groups of 2 ranks when P is even and above 2, else of 1). */
typedef struct {
    const char *name;
    int causal, window, rope, alibi, bf16, segs;
    ra_layout layout;
    ra_strategy strategy;
} ckpt_case;

/* A rank's problem of one case: its slices, segment ids and the
 * backward's dout and gradients. */
typedef struct {
    ra_shape s;
    problem p;
    local_part lp;
    ra_params prm;
    int64_t *seg_full, *qseg, *kseg;
    ra_masks masks;
    size_t no, nl, nq, nk, nv;
    float *dout, *grads; /* dq, dk, dv one after the other */
} setup;

static void setup_make(setup *u, const ckpt_case *k, uint64_t seed)
{
    u->s = (ra_shape){.B = 2, .N = 61, .M = 61, .H = 4, .G = 2, .D = 16,
                      .Dv = 8};
    problem_make(&u->p, &u->s, seed);
    ra_params_default(&u->prm);
    u->prm.exec.layout = k->layout;
    u->prm.exec.strategy = k->strategy;
    if (k->strategy == RA_STRATEGY_HYBRID)
        u->prm.exec.ulysses_size = nranks > 2 && nranks % 2 == 0 ? 2 : 1;
    u->prm.num.causal = k->causal;
    u->prm.num.window = k->window;
    u->prm.num.window_left = 13;
    u->prm.num.window_right = 2;
    u->prm.num.rope = k->rope ? RA_ROPE_HALF : RA_ROPE_NONE;
    u->prm.num.alibi = k->alibi;
    u->prm.num.precision = k->bf16 ? RA_PRECISION_BF16 : RA_PRECISION_FP32;
    u->prm.exec.gemm = test_gemm();
    local_part_make(&u->lp, &u->p, &u->prm, k->layout, rank, nranks);
    const ra_shape *s = &u->s;
    u->seg_full = malloc(sizeof(int64_t) * (size_t)(s->B * s->N));
    for (int64_t i = 0; i < s->B * s->N; i++)
        u->seg_full[i] = (i % s->N) / 17; /* runs of 17 tokens */
    u->qseg = malloc(sizeof(int64_t) * (size_t)(s->B * u->lp.qs.count + 1));
    u->kseg = malloc(sizeof(int64_t) * (size_t)(s->B * u->lp.ks.count + 1));
    slice_gather(u->seg_full, s->B, s->N, 1, sizeof(int64_t), &u->lp.qs,
                 u->qseg);
    slice_gather(u->seg_full, s->B, s->M, 1, sizeof(int64_t), &u->lp.ks,
                 u->kseg);
    u->masks = (ra_masks){NULL, NULL, k->segs ? u->qseg : NULL,
                          k->segs ? u->kseg : NULL};
    u->no = (size_t)(s->B * u->lp.qs.count * s->H * s->Dv);
    u->nl = (size_t)(s->B * s->H * u->lp.qs.count);
    u->nq = (size_t)(s->B * u->lp.qs.count * s->H * s->D);
    u->nk = (size_t)(s->B * u->lp.ks.count * s->G * s->D);
    u->nv = (size_t)(s->B * u->lp.ks.count * s->G * s->Dv);
    u->dout = malloc(sizeof(float) * (u->no + 1));
    for (size_t i = 0; i < u->no; i++)
        u->dout[i] = (float)((int)((i * 7 + (size_t)rank) % 11) - 5) * 0.125f;
    u->grads = malloc(sizeof(float) * (u->nq + u->nk + u->nv + 1));
}

static void setup_free(setup *u)
{
    free(u->seg_full);
    free(u->qseg);
    free(u->kseg);
    free(u->dout);
    free(u->grads);
    local_part_free(&u->lp);
    problem_free(&u->p);
}

/* A forward (grads NULL) or backward call under hooks m (NULL: none);
 * results into u->lp.o, lse or u->grads. */
static ra_status call(setup *u, memory *m, int load, int backward,
                      const float *o, const float *lse, ra_timing *tm)
{
    ra_params prm = u->prm;
    const ra_checkpoint hooks = {hook_ask, hook_save,
                                 load ? hook_load : NULL, m};
    prm.exec.checkpoint = m ? &hooks : NULL;
    prm.exec.on_step = m ? hook_step : NULL;
    prm.exec.on_step_ctx = m;
    const ra_qkv in = {u->lp.q, u->lp.k, u->lp.v};
    if (!backward)
        return ra_call_forward(MPI_COMM_WORLD, &u->s, &prm, &u->masks, &in,
                               &(ra_out){u->lp.o, u->lp.lse, NULL}, tm);
    float *dq = u->grads, *dk = dq + u->nq, *dv = dk + u->nk;
    return ra_call_backward(MPI_COMM_WORLD, &u->s, &prm, &u->masks, &in,
                            &(ra_grads){o, lse, u->dout, dq, dk, dv, NULL},
                            tm);
}

/* This rank's results of the last call: o and lse, or the gradients. */
static size_t results_size(const setup *u, int backward)
{
    return backward ? u->nq + u->nk + u->nv : u->no + u->nl;
}

static void results_copy(const setup *u, int backward, float *out)
{
    if (backward) {
        memcpy(out, u->grads, sizeof(float) * results_size(u, 1));
        return;
    }
    memcpy(out, u->lp.o, sizeof(float) * u->no);
    memcpy(out + u->no, u->lp.lse, sizeof(float) * u->nl);
}

/* Stops at every boundary in turn and resumes, then saves at every one:
 * the count of runs whose bits differ from want on this rank (-1: a
 * status was wrong). */
static int stops_resumes(setup *u, int backward, int steps, const float *o,
                         const float *lse, const float *want)
{
    const size_t n = results_size(u, backward);
    float *got = malloc(sizeof(float) * (n + 1));
    int bad = 0;
    for (int stop = 1; stop <= steps; stop++) {
        memory m = {.stop_at = stop < steps ? stop : 0,
                    .save_all = stop == steps};
        ra_status st = call(u, &m, 0, backward, o, lse, NULL);
        if (stop < steps) {
            if (st != RA_STOPPED || m.step != stop)
                bad = -1;
            m.stop_at = 0;
            m.first = 0;
            st = call(u, &m, 1, backward, o, lse, NULL);
            if (m.first != stop + 1) /* it went on from the state */
                bad = -1;
        } else if (m.saves != steps - 1) {
            bad = -1;
        }
        if (st != RA_OK)
            bad = -1;
        results_copy(u, backward, got);
        if (bad >= 0 && memcmp(got, want, sizeof(float) * n) != 0)
            bad++;
        memory_free(&m);
    }
    free(got);
    return bad;
}

/* One case, forward and backward: 1 when every rank passed. */
static int case_run(const ckpt_case *k, uint64_t seed)
{
    setup u;
    setup_make(&u, k, seed);
    ra_timing tm = {0}, tb = {0};
    const size_t nf = results_size(&u, 0), nb = results_size(&u, 1);
    float *want_f = malloc(sizeof(float) * (nf + 1));
    float *want_b = malloc(sizeof(float) * (nb + 1));
    ra_status st = call(&u, NULL, 0, 0, NULL, NULL, &tm);
    results_copy(&u, 0, want_f);
    const test_masks global = {NULL, NULL, k->segs ? u.seg_full : NULL,
                               k->segs ? u.seg_full : NULL};
    check_result r = {0};
    if (st == RA_OK)
        r = check_slice(&u.p, &u.prm, &global, &u.lp.qs, u.lp.o, u.lp.lse);
    const check_result g = check_allreduce(MPI_COMM_WORLD, &r);
    const float *o = want_f, *lse = want_f + u.no;
    if (st == RA_OK)
        st = call(&u, NULL, 0, 1, o, lse, &tb);
    results_copy(&u, 1, want_b);
    const int bad_f = st == RA_OK ? stops_resumes(&u, 0, tm.steps, NULL,
                                                  NULL, want_f) : -1;
    const int bad_b = st == RA_OK ? stops_resumes(&u, 1, tb.steps, o, lse,
                                                  want_b) : -1;
    /* bf16 is judged bitwise against its own uninterrupted run only */
    int v[2] = {bad_f == 0 && bad_b == 0, check_ok(&g) || k->bf16}, all[2];
    MPI_Allreduce(v, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d %-30s steps %d, %d: stopped and resumed at each, "
               "forward %s, backward %s, fp64 rel_o %.2e %s\n", nranks,
               k->name, tm.steps, tb.steps, bad_f == 0 ? "bitwise" : "DIFFERS",
               bad_b == 0 ? "bitwise" : "DIFFERS", g.rel_o,
               all[0] && all[1] ? "PASS" : "FAIL");
    free(want_f);
    free(want_b);
    setup_free(&u);
    return all[0] && all[1];
}

static void test_resume_bitwise(void **state)
{
    (void)state;
    static const ckpt_case cases[] = {
        {"causal zigzag", 1, 0, 0, 0, 0, 0, RA_LAYOUT_ZIGZAG,
         RA_STRATEGY_RING},
        {"window balanced", 0, 1, 0, 0, 0, 0, RA_LAYOUT_BALANCED,
         RA_STRATEGY_RING},
        {"rope alibi segments", 1, 0, 1, 1, 0, 1, RA_LAYOUT_STRIPED,
         RA_STRATEGY_RING},
        {"bf16 causal window", 1, 1, 0, 0, 1, 0, RA_LAYOUT_CONTIGUOUS,
         RA_STRATEGY_RING},
        {"ring-q causal zigzag", 1, 0, 0, 0, 0, 0, RA_LAYOUT_ZIGZAG,
         RA_STRATEGY_RING_Q},
        {"ring-q rope alibi segments", 1, 0, 1, 1, 0, 1, RA_LAYOUT_STRIPED,
         RA_STRATEGY_RING_Q},
        {"ring-q bf16 window", 0, 1, 0, 0, 1, 0, RA_LAYOUT_BALANCED,
         RA_STRATEGY_RING_Q},
        {"hybrid causal window", 1, 1, 0, 0, 0, 0, RA_LAYOUT_ZIGZAG,
         RA_STRATEGY_HYBRID},
        {"hybrid rope alibi segments", 1, 0, 1, 1, 0, 1, RA_LAYOUT_STRIPED,
         RA_STRATEGY_HYBRID},
        {"hybrid bf16 causal", 1, 0, 0, 0, 1, 0, RA_LAYOUT_CONTIGUOUS,
         RA_STRATEGY_HYBRID},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        ok &= case_run(&cases[i], 4300u + (uint64_t)i);
    assert_true(ok);
}

/* The refusals: 1 when every rank got want with a message naming what. */
static int refused(ra_status st, ra_status want, const char *what)
{
    int ok = st == want && strstr(ra_error_message(), what) != NULL, all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# P=%d refused (%s): %s %s\n", nranks, what,
               ra_error_message(), all ? "PASS" : "FAIL");
    return all;
}

static void test_refusals(void **state)
{
    (void)state;
    const ckpt_case k = {"causal", 1, 0, 0, 0, 0, 0, RA_LAYOUT_CONTIGUOUS,
                         RA_STRATEGY_RING};
    setup u;
    setup_make(&u, &k, 4400u);
    memory m = {0};
    int ok = 1;
    static const ra_strategy stepless[] = {
        RA_STRATEGY_ALLGATHER, RA_STRATEGY_TREE, RA_STRATEGY_ULYSSES};
    for (size_t i = 0; i < sizeof stepless / sizeof *stepless; i++) {
        char want[64];
        snprintf(want, sizeof want, "strategy %s has no steps",
                 ra_strategy_name(stepless[i]));
        u.prm.exec.strategy = stepless[i];
        if (nranks != 3 || stepless[i] != RA_STRATEGY_ULYSSES) /* H = 4 */
            ok &= refused(call(&u, &m, 0, 0, NULL, NULL, NULL), RA_ERR_ARG,
                          want);
    }
    u.prm.exec.strategy = RA_STRATEGY_RING;
    int64_t heads[1] = {0};
    ra_attn_map am = {0, 2, heads, 1,
                      malloc(sizeof(float) * (size_t)(2 * u.s.B * u.s.M))};
    const ra_checkpoint hooks = {hook_ask, hook_save, NULL, &m};
    ra_params prm = u.prm;
    prm.exec.checkpoint = &hooks;
    ok &= refused(ra_call_forward(MPI_COMM_WORLD, &u.s, &prm, NULL,
                                  &(ra_qkv){u.lp.q, u.lp.k, u.lp.v},
                                  &(ra_out){u.lp.o, u.lp.lse, &am}, NULL),
                  RA_ERR_ARG, "attention map");
    if (nranks >= 3) { /* a state to load, on ranks that disagree */
        m.stop_at = 1;
        call(&u, &m, 0, 0, NULL, NULL, NULL);
        m.stop_at = 0;
        m.skew = 1;
        ok &= refused(call(&u, &m, 1, 0, NULL, NULL, NULL), RA_ERR_INPUT,
                      "loaded steps");
    }
    free(am.out);
    memory_free(&m);
    setup_free(&u);
    assert_true(ok);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_bitwise),
        cmocka_unit_test(test_refusals),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
