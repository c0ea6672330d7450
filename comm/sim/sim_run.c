/* sim_run.c: one configuration of ringattn-sim on the simulated cluster
 * (sim_run.h): set up (ring order, strategy check, cost) -> tensors ->
 * passes -> check -> bench's row. What bench does too is bench's code
 * (comm/perf/): the inputs, masks, pass records, times and verdict. */
#include <math.h>
#include <smpi/smpi.h>
#include <string.h>

#include "agree.h"
#include "band.h"
#include "bench_run.h"
#include "call.h"
#include "model.h"
#include "profile_json.h"
#include "sim_hooks.h"
#include "sim_run.h"

/* The tensors' element counts, in the order of tensor_slot. */
static void tensor_counts(const ra_shape *s, int64_t n, int64_t m, int bwd,
                          int64_t c[SIM_SLOTS])
{
    const int64_t B = s->B;
    const int64_t all[SIM_SLOTS] = {B * n * s->H * s->D,
                                    B * m * s->G * s->D,
                                    B * m * s->G * s->Dv,
                                    B * n * s->H * s->Dv,
                                    B * s->H * n,
                                    bwd ? B * n * s->H * s->Dv : 0,
                                    bwd ? B * n * s->H * s->D : 0,
                                    bwd ? B * m * s->G * s->D : 0,
                                    bwd ? B * m * s->G * s->Dv : 0};
    memcpy(c, all, sizeof all);
}

/* A rank's tensors are sim_buffer_alloc's slots 0 .. SIM_SLOTS - 1. */
static float **tensor_slot(bench_operands *t, int i)
{
    float **slots[SIM_SLOTS] = {&t->q,    &t->k,  &t->v,  &t->o, &t->lse,
                                &t->dout, &t->dq, &t->dk, &t->dv};
    return slots[i];
}

static void tensors_free(bench_operands *t, int folded)
{
    for (int i = 0; i < SIM_SLOTS; i++)
        if (*tensor_slot(t, i))
            sim_buffer_free(*tensor_slot(t, i), folded);
}

/* This rank's slices, one allocation each (folded at scale), filled with
 * the seed's inputs in exact mode. */
static ra_status tensors_make(const sim_ctx *x, const sim_config *c,
                              bench_operands *t)
{
    const ra_shape *s = &c->s;
    const int folded = c->mode == SIM_SCALE;
    memset(t, 0, sizeof *t);
    t->qs = ra_params_slice(&c->p, x->layout, s->N, x->rank, x->P);
    t->ks = ra_params_slice(&c->p, x->layout, s->M, x->rank, x->P);
    int64_t n[SIM_SLOTS];
    tensor_counts(s, t->qs.count, t->ks.count, c->backward, n);
    for (int i = 0; i < SIM_SLOTS; i++)
        if (n[i] > 0 &&
            !(*tensor_slot(t, i) =
                  sim_buffer_alloc(sizeof(float) * (size_t)n[i], i, folded)))
            return ra_error_set(RA_ERR_NOMEM, "the rank's slices (%lld floats)",
                                (long long)n[i]);
    if (!folded) /* folded buffers hold nothing meaningful */
        bench_inputs_make((uint64_t)c->seed, s, c->backward, t);
    return RA_OK;
}

/* What the hooks inject: the kernel rate of the run's kernel key in
 * c->profile's probe (else this machine's built-in profile,
 * comm/perf/profile.c) or c->rate; the model's own per-pair cost
 * (ra_pair_flops) and fixed step cost. A profile without the rate is
 * refused by name. */
static ra_status cost_setup(sim_ctx *x, const sim_config *c)
{
    char why[512];
    profile_default(&x->pf);
    if (c->profile && profile_read_json(c->profile, &x->pf, why, sizeof why))
        return ra_error_set(RA_ERR_INPUT, "--profile: %s", why);
    const profile_kernel_key key = profile_key_of(&c->p, c->s.D, c->s.Dv);
    x->rate = c->rate > 0 ? c->rate : profile_kernel_rate(&x->pf, &key);
    if (!(x->rate > 0))
        return ra_error_set(RA_ERR_INPUT,
                            "--profile %s: no kernel rate for "
                            "D=%lld, %s (ringattn probe --dim %lld, or --rate)",
                            c->profile ? c->profile : "(built-in)",
                            (long long)c->s.D, key.precision,
                            (long long)c->s.D);
    const sim_cost cost = {c->mode == SIM_SCALE,
                           ra_pair_flops(&c->s, &c->p) / (double)c->s.H /
                               x->rate,
                           x->pf.step_seconds};
    return sim_hooks_set(&cost);
}

ra_status sim_setup(sim_ctx *x, const sim_config *c)
{
    ra_status st = ra_comm_ring_order(MPI_COMM_WORLD, c->node_aware, &x->comm);
    if (st != RA_OK)
        return st;
    MPI_Comm_rank(x->comm, &x->rank);
    MPI_Comm_size(x->comm, &x->P);
    if ((st = ra_comm_nodes(x->comm, &x->nodes)) != RA_OK)
        return st;
    x->layout = ra_params_layout(&c->p, 0);
    st = ra_agree(x->comm, ra_call_strategy_check(x->comm, &c->s, &c->p, 0));
    if (st == RA_OK)
        st = ra_agree(x->comm, cost_setup(x, c));
    return st;
}

/* One pass on every rank; this rank's simulated seconds in *sec, the
 * call's own timing in *tm. */
static ra_status one_pass(const sim_ctx *x, const sim_config *c, int backward,
                          bench_operands *t, const ra_masks *mk, ra_timing *tm,
                          double *sec)
{
    *tm = (ra_timing){0};
    const ra_qkv in = {t->q, t->k, t->v};
    MPI_Barrier(x->comm);
    sim_hooks_call_begin();
    const double t0 = MPI_Wtime();
    if (c->mode == SIM_SCALE && x->pf.call_seconds > 0)
        smpi_execute(x->pf.call_seconds);
    ra_status st =
        backward ? ra_call_backward(x->comm, &c->s, &c->p, mk, &in,
                                    &(ra_grads){t->o, t->lse, t->dout, t->dq,
                                                t->dk, t->dv, NULL},
                                    tm)
                 : ra_call_forward(x->comm, &c->s, &c->p, mk, &in,
                                   &(ra_out){t->o, t->lse, NULL}, tm);
    *sec = MPI_Wtime() - t0;
    return st;
}

/* The timed passes (a forward first for the backward's o and lse), each
 * recorded as bench records its own (the driver's seconds as the wall:
 * they include the call's fixed cost injected at scale). */
static ra_status passes(const sim_ctx *x, const sim_config *c,
                        bench_operands *t, const ra_masks *mk, bench_reps *r)
{
    double sec = 0;
    ra_status st = c->backward ? one_pass(x, c, 0, t, mk, &r->tm, &sec) : RA_OK;
    for (int64_t rep = 0; rep < c->reps && st == RA_OK; rep++) {
        st = one_pass(x, c, c->backward, t, mk, &r->tm, &sec);
        bench_reps_record(r, rep);
        r->wall[rep] = sec;
    }
    return st;
}

/* The configuration as bench states it: no warm-up, no yardsticks. */
static bench_config bench_of(const sim_ctx *x, const sim_config *c)
{
    return (bench_config){
        .s = &c->s,
        .gen = {&c->p, (uint64_t)c->seed, 0, 0, c->check_rows},
        .reps = c->reps,
        .backward = c->backward,
        .no_yardsticks = 1,
        .place = {x->nodes.nodes, x->nodes.ranks_per_node_max, c->node_aware}};
}

/* Exact mode's verdict into res: the backward's gradients against fp64
 * (bench_check_backward) in fp32, else bench's own (the forward's sampled
 * fp64 check, a backward's finite gradients: error NaN). Collective. */
static void check(const sim_ctx *x, const sim_config *c,
                  const bench_operands *t, const bench_masks *bm,
                  bench_result *res)
{
    if (c->backward && c->p.num.precision == RA_PRECISION_FP32 &&
        !ra_params_wire_bf16(&c->p)) {
        const bench_bwd_check b =
            {x->comm,   x->rank,           x->P,  &c->s, &c->p,
             x->layout, (uint64_t)c->seed, t->dq, t->dk, t->dv};
        res->pass = bench_check_backward(&b, &res->max_rel_error);
        return;
    }
    const bench_config bc = bench_of(x, c);
    bench_row_verdict(x->comm, &bc, t, bm, res);
    if (c->backward)
        res->max_rel_error = NAN;
}

/* bench's row of the recorded passes (bench_row_begin) without what a
 * simulation cannot measure: the yardsticks, the comm-only ring and the
 * RSS (0, shown as 0 or null); a backward's row names its strategy; the
 * busiest rank's pairs, the FLOPs, the model's bytes; unchecked (NaN,
 * PASS) until check. Collective. */
static void sim_result(const sim_ctx *x, const sim_config *c,
                       const bench_operands *t, const bench_masks *bm,
                       bench_reps *r, bench_result *res)
{
    const bench_config bc = bench_of(x, c);
    bench_row_begin(x->comm, &bc, r, res);
    res->mode = ra_strategy_name(c->p.exec.strategy);
    const double pairs = bench_local_pairs(&bc.gen, &c->s, &t->qs, bm);
    MPI_Allreduce(&pairs, &res->pairs_max, 1, MPI_DOUBLE, MPI_MAX, x->comm);
    res->flops = c->backward
                     ? ra_params_backward_flops(&c->s, &c->p, &bm->view)
                     : ra_params_forward_flops(&c->s, &c->p, &bm->view);
    res->gflops = res->flops / res->seconds_median * 1e-9;
    res->model_bytes =
        bench_spread(x->comm,
                     model_rank_bytes(&c->s, &c->p, x->layout, x->P, x->rank))
            .max;
    res->max_rel_error = NAN;
    res->pass = 1;
}

ra_status sim_run(const sim_ctx *x, const sim_config *c, bench_result *res,
                  double *injected)
{
    bench_operands t;
    bench_masks bm = {0};
    bench_reps reps = {0};
    const bench_config bc = bench_of(x, c);
    ra_status st = tensors_make(x, c, &t);
    if (st == RA_OK)
        st = bench_masks_make(&bc.gen, &c->s, &t.qs, &t.ks, &bm);
    if (st == RA_OK)
        st = bench_reps_alloc(&reps, c->reps, "ringattn-sim");
    st = ra_agree(x->comm, st);
    if (st == RA_OK && (st = passes(x, c, &t, &bm.view, &reps)) == RA_ERR_MPI)
        return st; /* a stalled peer: the caller ends the job */
    if (st == RA_OK) {
        sim_result(x, c, &t, &bm, &reps, res);
        if (c->mode == SIM_EXACT)
            check(x, c, &t, &bm, res);
    }
    const double mine = sim_hooks_injected();
    MPI_Allreduce(&mine, injected, 1, MPI_DOUBLE, MPI_MAX, x->comm);
    tensors_free(&t, c->mode == SIM_SCALE);
    bench_masks_free(&bm);
    bench_reps_free(&reps);
    return st;
}

void sim_close(sim_ctx *x)
{
    MPI_Barrier(x->comm); /* every transfer has ended */
    if (x->rank == 0)
        sim_hooks_release();
    MPI_Comm_free(&x->comm);
}
