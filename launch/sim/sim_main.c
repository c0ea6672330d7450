/* sim_main.c: ringattn-sim, the engine's forward and backward passes on a
 * simulated cluster (SimGrid SMPI; docs/SIMULATION.md). Each rank makes its
 * slices in memory (random per global index, as `ringattn bench`, so the
 * same at every P), calls ra_call_forward (and ra_call_backward) on the
 * node-ordered communicator, and rank 0 prints a '#' echo of every
 * parameter, then one result row in simulated seconds. Exact mode checks
 * the output against the fp64 reference (bench_check.c); at scale the
 * hooks inject each kernel call's time (sim_hooks.c).
 * parse -> set up (ring order, strategy check, cost, tensors) -> passes ->
 * check -> report. */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <smpi/smpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "band.h"
#include "bench_check.h"
#include "bench_run.h"
#include "call.h"
#include "model.h"
#include "profile.h"
#include "profile_json.h"
#include "sim.h"
#include "tally.h"

/* One rank's slices: inputs, outputs, and for the backward dO and the
 * gradients; one allocation each, folded at scale. */
typedef struct {
    ra_slice qs, ks;
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
    int folded;
} sim_tensors;

typedef struct {
    MPI_Comm comm;
    int rank, P;
    ra_nodes nodes;
    ra_layout layout;
    ra_profile pf;
    double rate; /* kernel FLOP/s per core in use */
} sim_ctx;

/* Rank 0 prints one line and every rank ends with code. */
static int finish(int rank, int code, const char *line)
{
    if (rank == 0 && line)
        fprintf(stderr, "ringattn-sim: %s\n", line);
    MPI_Finalize();
    return code;
}

static int exit_code(ra_status st)
{
    return st == RA_ERR_ARG || st == RA_ERR_INPUT ? 2 : 1;
}

/* The tensors' element counts, in the order of sim_tensors' pointers. */
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

static float **tensor_slot(sim_tensors *t, int i)
{
    float **slots[SIM_SLOTS] = {&t->q,    &t->k,  &t->v,  &t->o, &t->lse,
                                &t->dout, &t->dq, &t->dk, &t->dv};
    return slots[i];
}

static void tensors_free(sim_tensors *t)
{
    for (int i = 0; i < SIM_SLOTS; i++)
        if (*tensor_slot(t, i))
            sim_buffer_free(*tensor_slot(t, i), t->folded);
}

/* This rank's slices, filled with the seed's inputs in exact mode. */
static ra_status tensors_make(const sim_ctx *x, const sim_opts *o,
                              sim_tensors *t)
{
    const ra_shape *s = &o->s;
    memset(t, 0, sizeof *t);
    t->folded = o->mode == SIM_SCALE;
    t->qs = ra_params_slice(&o->p, x->layout, s->N, x->rank, x->P);
    t->ks = ra_params_slice(&o->p, x->layout, s->M, x->rank, x->P);
    int64_t c[SIM_SLOTS];
    tensor_counts(s, t->qs.count, t->ks.count, o->backward, c);
    for (int i = 0; i < SIM_SLOTS; i++)
        if (c[i] > 0 &&
            !(*tensor_slot(t, i) =
                  sim_buffer_alloc(sizeof(float) * (size_t)c[i], i, t->folded)))
            return ra_error_set(RA_ERR_NOMEM, "the rank's slices (%lld floats)",
                                (long long)c[i]);
    const bench_operands in = {t->qs, t->ks, t->q, t->k, t->v,
                               t->o, t->lse, t->dout};
    if (!t->folded) /* folded buffers hold nothing meaningful */
        bench_inputs_make((uint64_t)o->seed, s, o->backward, &in);
    return RA_OK;
}

/* What the hooks inject: the kernel rate of the run's kernel key in
 * --profile's probe (else this machine's built-in profile,
 * comm/perf/profile.c) or --rate; the model's own per-pair cost
 * (ra_pair_flops) and fixed step cost. A profile without the rate is
 * refused by name. */
static ra_status cost_setup(sim_ctx *x, const sim_opts *o)
{
    char why[512];
    profile_default(&x->pf);
    if (o->profile && profile_read_json(o->profile, &x->pf, why, sizeof why))
        return ra_error_set(RA_ERR_INPUT, "--profile: %s", why);
    const profile_kernel_key key = profile_key_of(&o->p, o->s.D, o->s.Dv);
    x->rate = o->rate > 0 ? o->rate : profile_kernel_rate(&x->pf, &key);
    if (!(x->rate > 0))
        return ra_error_set(RA_ERR_INPUT,
                            "--profile %s: no kernel rate for "
                            "D=%lld, %s (ringattn probe --dim %lld, or --rate)",
                            o->profile ? o->profile : "(built-in)",
                            (long long)o->s.D, key.precision,
                            (long long)o->s.D);
    const sim_cost c = {o->mode == SIM_SCALE,
                        ra_pair_flops(&o->s, &o->p) / (double)o->s.H / x->rate,
                        x->pf.step_seconds};
    return sim_hooks_set(&c);
}

static void echo(const sim_ctx *x, const sim_opts *o)
{
    const ra_shape *s = &o->s;
    const ra_params *p = &o->p;
    printf("# ringattn-sim: the engine under SimGrid SMPI (simulated time)\n");
    printf("# %-14s%s\n", "mode",
           o->mode == SIM_EXACT
               ? "exact (kernels run; fp64 check)"
               : "scale (kernel time injected; buffers folded)");
    printf("# %-14s%s\n", "platform", o->platform);
    printf("# %-14s%d on %d nodes (%d-%d per node), ring order %s\n", "ranks",
           x->P, x->nodes.nodes, x->nodes.ranks_per_node_min,
           x->nodes.ranks_per_node_max, o->node_aware ? "node" : "mpirun");
    printf("# %-14sB=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld\n",
           "shape", (long long)s->B, (long long)s->N, (long long)s->M,
           (long long)s->H, (long long)s->G, (long long)s->D, (long long)s->Dv);
    printf("# %-14scausal=%d window=%s%lld,%lld\n", "mask", p->num.causal,
           p->num.window ? "" : "off ", (long long)p->num.window_left,
           (long long)p->num.window_right);
    printf("# %-14s%s, layout %s, precision %s, wire %s\n", "strategy",
           ra_strategy_name(p->exec.strategy), ra_layout_name(x->layout),
           ra_precision_name(p->num.precision), ra_wire_name(p->exec.wire));
    printf("# %-14s%s, reps %lld, seed %lld, check rows %lld\n", "pass",
           o->backward ? "backward" : "forward", (long long)o->reps,
           (long long)o->seed, (long long)o->check_rows);
    printf("# %-14s%.2f GFLOP/s per core (%s), step %.3g s\n", "kernel rate",
           x->rate * 1e-9,
           o->rate > 0  ? "--rate"
           : o->profile ? o->profile
                        : "built-in profile",
           x->pf.step_seconds);
}

/* One pass on every rank; this rank's simulated seconds in *sec, the
 * call's own timing in *tm. */
static ra_status one_pass(const sim_ctx *x, const sim_opts *o, int backward,
                          sim_tensors *t, const ra_masks *mk, ra_timing *tm,
                          double *sec)
{
    *tm = (ra_timing){0};
    const ra_qkv in = {t->q, t->k, t->v};
    MPI_Barrier(x->comm);
    sim_hooks_call_begin();
    const double t0 = MPI_Wtime();
    if (o->mode == SIM_SCALE && x->pf.call_seconds > 0)
        smpi_execute(x->pf.call_seconds);
    ra_status st =
        backward ? ra_call_backward(x->comm, &o->s, &o->p, mk, &in,
                                    &(ra_grads){t->o, t->lse, t->dout, t->dq,
                                                t->dk, t->dv, NULL},
                                    tm)
                 : ra_call_forward(x->comm, &o->s, &o->p, mk, &in,
                                   &(ra_out){t->o, t->lse, NULL}, tm);
    *sec = MPI_Wtime() - t0;
    return st;
}

/* The timed passes (a forward first for the backward's o and lse), each
 * recorded as bench records its own (the driver's seconds as the wall:
 * they include the call's fixed cost injected at scale). */
static ra_status passes(const sim_ctx *x, const sim_opts *o, sim_tensors *t,
                        const ra_masks *mk, bench_reps *r)
{
    double sec = 0;
    ra_status st = o->backward ? one_pass(x, o, 0, t, mk, &r->tm, &sec) : RA_OK;
    for (int64_t rep = 0; rep < o->reps && st == RA_OK; rep++) {
        st = one_pass(x, o, o->backward, t, mk, &r->tm, &sec);
        bench_reps_record(r, rep);
        r->wall[rep] = sec;
    }
    return st;
}

/* Exact mode's verdict: the forward against fp64 (bench's check), the
 * backward's gradients against fp64 (sim_check_bwd.c) in fp32, else
 * finite. Writes the error into *err; 1 pass, 0 fail. Collective. */
static int check(const sim_ctx *x, const sim_opts *o, const sim_tensors *t,
                 const bench_masks *bm, double *err)
{
    if (o->backward && o->p.num.precision == RA_PRECISION_FP32 &&
        !ra_params_wire_bf16(&o->p)) {
        const sim_bwd_check c =
            {x->comm,   x->rank,           x->P,  &o->s, &o->p,
             x->layout, (uint64_t)o->seed, t->dq, t->dk, t->dv};
        return sim_check_backward(&c, err);
    }
    if (o->backward) {
        int64_t c[SIM_SLOTS];
        tensor_counts(&o->s, t->qs.count, t->ks.count, 1, c);
        int bad = 0, any = 0;
        for (int i = 6; i < SIM_SLOTS; i++)
            for (int64_t j = 0; j < c[i]; j++)
                bad |= !isfinite((*tensor_slot((sim_tensors *)t, i))[j]);
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, x->comm);
        *err = NAN;
        return !any;
    }
    const bench_gen gen = {&o->p, (uint64_t)o->seed, 0, 0, o->check_rows};
    ra_tally mine = {0}, all = {0};
    bench_check_output(&gen, &o->s, &t->qs, bm, t->o, t->lse, &mine);
    if (ra_tally_allreduce(x->comm, &mine, &all) != RA_OK)
        all.bad_inf = 1;
    *err = all.rel_o;
    return ra_tally_ok(&all, RA_TOLERANCE);
}

/* bench's result of the run from the recorded passes, as cmd_bench.c's
 * config_result makes it, without what a simulation cannot measure: the
 * yardsticks, the comm-only ring and the RSS (0, shown as 0 or null).
 * Collective. */
static void sim_result(const sim_ctx *x, const sim_opts *o,
                       const sim_tensors *t, const bench_masks *bm,
                       bench_reps *r, double err, int verdict,
                       bench_result *res)
{
    const bench_gen gen = {&o->p, (uint64_t)o->seed, 0, 0, o->check_rows};
    memset(res, 0, sizeof *res);
    res->s = o->s;
    res->p = o->p;
    res->ranks = x->P;
    res->threads = ra_params_threads(&o->p);
    res->mode = ra_strategy_name(o->p.exec.strategy);
    ra_params_tiles(&o->p, &o->s, &res->block_q, &res->block_kv);
    const double pairs = bench_local_pairs(&gen, &o->s, &t->qs, bm);
    MPI_Allreduce(&pairs, &res->pairs_max, 1, MPI_DOUBLE, MPI_MAX, x->comm);
    res->flops = o->backward ? ra_params_backward_flops(&o->s, &o->p, &bm->view)
                             : ra_params_forward_flops(&o->s, &o->p, &bm->view);
    bench_times(x->comm, o->reps, r, res);
    res->nodes = x->nodes.nodes;
    res->ranks_per_node = x->nodes.ranks_per_node_max;
    res->node_aware = o->node_aware;
    res->gflops = res->flops / res->seconds_median * 1e-9;
    res->model_bytes =
        bench_spread(x->comm,
                     model_rank_bytes(&o->s, &o->p, x->layout, x->P, x->rank))
            .max;
    res->steps = r->tm.steps;
    res->max_rel_error = err;
    res->pass = verdict;
}

/* Rank 0: the result row, and --json's file. */
static ra_status report(const sim_ctx *x, const sim_opts *o,
                        const bench_result *res)
{
    double injected = sim_hooks_injected(), inj_max = 0;
    MPI_Reduce(&injected, &inj_max, 1, MPI_DOUBLE, MPI_MAX, 0, x->comm);
    if (x->rank != 0)
        return RA_OK;
    printf("# %5s %6s %-9s %-9s %9s %13s %10s %10s %9s %s\n", "P", "nodes",
           "mode", "strategy", "N", "sim_seconds", "GFLOP/s", "injected_s",
           "max_err", "verdict");
    const double err = res->max_rel_error;
    const sim_row row = {o->mode == SIM_EXACT ? "exact" : "scale", o->platform,
                         o->mode == SIM_SCALE ? "unchecked"
                         : !res->pass         ? "FAIL"
                         : isnan(err)         ? "PASS(finite)"
                                              : "PASS",
                         inj_max};
    printf("  %5d %6d %-9s %-9s %9lld %13.6f %10.3f %10.4f %9.2e %s\n", x->P,
           x->nodes.nodes, row.mode, res->mode, (long long)o->s.N,
           res->seconds_median, res->gflops, inj_max, err, row.verdict);
    fflush(stdout);
    if (o->json && sim_json_write(o->json, res, &row) != 0)
        return ra_error_set(RA_ERR_IO, "--json %s: %s", o->json,
                            strerror(errno));
    return RA_OK;
}

/* The communicator, the layout, the strategy's refusals, the cost. */
static ra_status ctx_setup(sim_ctx *x, const sim_opts *o)
{
    ra_status st = ra_comm_ring_order(MPI_COMM_WORLD, o->node_aware, &x->comm);
    if (st != RA_OK)
        return st;
    MPI_Comm_rank(x->comm, &x->rank);
    MPI_Comm_size(x->comm, &x->P);
    if ((st = ra_comm_nodes(x->comm, &x->nodes)) != RA_OK)
        return st;
    x->layout = ra_params_layout(&o->p, 0);
    st = ra_call_strategy_check(x->comm, &o->s, &o->p, 0);
    char why[512];
    if (st == RA_OK && x->rank == 0 && o->json &&
        sim_json_check(o->json, why, sizeof why) != 0)
        st = ra_error_set(RA_ERR_ARG, "%s", why);
    st = ra_agree(x->comm, st);
    if (st == RA_OK)
        st = ra_agree(x->comm, cost_setup(x, o));
    return st;
}

static int run(sim_ctx *x, const sim_opts *o)
{
    sim_tensors t;
    bench_masks bm = {0};
    bench_reps reps = {0};
    const bench_gen gen = {&o->p, (uint64_t)o->seed, 0, 0, o->check_rows};
    ra_status st = tensors_make(x, o, &t);
    if (st == RA_OK)
        st = bench_masks_make(&gen, &o->s, &t.qs, &t.ks, &bm);
    if (st == RA_OK)
        st = bench_reps_alloc(&reps, o->reps, "ringattn-sim");
    st = ra_agree(x->comm, st);
    double err = NAN;
    if (st == RA_OK && (st = passes(x, o, &t, &bm.view, &reps)) == RA_ERR_MPI)
        MPI_Abort(MPI_COMM_WORLD, 1); /* a stalled peer: nobody waits */
    int verdict = 1;
    if (st == RA_OK && o->mode == SIM_EXACT)
        verdict = check(x, o, &t, &bm, &err);
    bench_result res;
    if (st == RA_OK) {
        sim_result(x, o, &t, &bm, &reps, err, verdict, &res);
        st = ra_agree(x->comm, report(x, o, &res));
    }
    tensors_free(&t);
    bench_masks_free(&bm);
    bench_reps_free(&reps);
    MPI_Barrier(x->comm); /* every transfer has ended */
    if (x->rank == 0)
        sim_hooks_release();
    MPI_Comm_free(&x->comm);
    if (st != RA_OK)
        return finish(x->rank, exit_code(st), ra_error_message());
    return finish(x->rank, verdict ? 0 : 1, NULL);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    static _Thread_local sim_opts o; /* per rank, off the small stack */
    char why[512];
    const int rc = sim_options_parse(argc, argv, &o, why, sizeof why);
    if (rc == 1 && rank == 0)
        sim_options_usage();
    if (rc != 0)
        return finish(rank, rc == 1 ? 0 : rc, rc == 1 ? NULL : why);
    sim_ctx x = {0};
    const ra_status st = ctx_setup(&x, &o);
    if (st != RA_OK)
        return finish(rank, exit_code(st), ra_error_message());
    if (x.rank == 0) {
        echo(&x, &o);
        fflush(stdout);
    }
    const int code = run(&x, &o);
    return code;
}
