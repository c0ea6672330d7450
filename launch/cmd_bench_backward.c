/* cmd_bench_backward.c: `ringattn bench --backward`: the speed of
 * ra_backward on random in-memory slices, against the same run's sgemm.
 * parse -> validate -> set up (tensors, one forward for o and lse) ->
 * measure (warm-up, then timed passes between barriers) -> report (rank 0,
 * every parameter echoed first, min/avg/max over the ranks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "bench.h"
#include "cli.h"
#include "driver.h"
#include "internal.h"
#include "placement.h"

typedef struct {
    cli_shape cs;
    ra_params p;
    int64_t warmup, reps, seed, additive_hidden;
} bb_opts;

static const cli_opt bb_own[] = {
    CLI_OPT_INT(bb_opts, "--warmup", "W", warmup, 0, 1000, "1",
                "untimed passes first"),
    CLI_OPT_INT(bb_opts, "--reps", "R", reps, 1, 1000, "3",
                "timed passes (the median is reported)"),
    CLI_OPT_INT(bb_opts, "--seed", "S", seed, 0, INT64_MAX, "1",
                "seed of the random inputs"),
    CLI_OPT_INT(bb_opts, "--additive-hidden", "A", additive_hidden, 1, 65536,
                "64", "hidden size of random additive weights"),
    CLI_OPT_FLAG(bb_opts, "--no-poll", p.no_poll,
                 "do not progress transfers between tiles (shows what\n"
                 "overlap is worth)"),
    {0},
};

static const cli_spec bb_spec = {
    .name = "bench --backward",
    .usage =
    "usage: mpirun -np P ringattn bench --backward [options]\n"
    "\n"
    "Times ra_backward on random q, k, v, dO (o and lse from one forward\n"
    "pass) and reports seconds, GFLOP/s (2.5x the forward's useful FLOPs:\n"
    "five products per tile), the fraction of the same run's sgemm rate,\n"
    "busy time per rank, exposed communication and peak memory.\n",
    .groups = {{cli_seq_opts, offsetof(bb_opts, cs)},
               {cli_shape_opts, offsetof(bb_opts, cs)},
               {bb_own, 0}, {cli_forward_opts, offsetof(bb_opts, p)}},
};

/* Per rank: median wall time, busy (compute) time and wait of the passes. */
typedef struct {
    double total, busy, wait;
} bb_times;

/* A run's tensors (q k v o lse and dout dq dk dv, in d) and results. */
typedef struct {
    cli_pass_data d;
    double model_bytes; /* tensors + the ring's buffers of ra_backward */
    double sgemm;       /* this rank's sgemm GFLOP/s */
    bb_times med;
} bb_state;

/* Before parsing: the shape's defaults. */
static ra_status bb_init(const cli_ctx *ctx, bb_opts *o, bb_state *b)
{
    cli_shape_default(&o->cs);
    return RA_OK;
}

/* The shape and parameters checked (agreed), and the additive score's
 * random weights made. */
static ra_status bb_validate(const cli_ctx *ctx, bb_opts *o, bb_state *b)
{
    cli_shape_finish(&o->cs);
    b->d.s = o->cs.shape;
    b->d.in = "(random)";
    b->d.out = "(none)";
    cli_pass_layout(&b->d, &o->p, 0);
    ra_status st = ra_shape_check(&b->d.s);
    if (st == RA_OK)
        st = cli_params_check(&o->p, &b->d.s, NULL);
    st = ra_agree(ctx->comm, st);
    if (st == RA_OK && o->p.score == RA_SCORE_ADDITIVE) {
        cli_score_inputs *si = &b->d.score_in;
        st = bench_additive_make(ctx->comm, (uint64_t)o->seed,
                                 o->additive_hidden, b->d.s.D, &si->mem,
                                 &si->additive);
        o->p.additive = &si->additive;
    }
    return st;
}

static ra_status bb_alloc(const cli_ctx *ctx, const bb_opts *o, bb_state *b)
{
    const ra_shape *s = &b->d.s;
    cli_tensors *t = &b->d.t;
    const int64_t A = o->p.score == RA_SCORE_ADDITIVE ? o->p.additive->A : 0;
    ra_status st = cli_tensors_alloc(t, s, o->p.layout, ctx, o->p.mem_limit);
    if (st == RA_OK)
        st = cli_grads_alloc(&b->d, A, "bench --backward", ctx,
                             o->p.mem_limit);
    if (st != RA_OK)
        return st;
    int64_t mmax = 0;
    for (int r = 0; r < ctx->nranks; r++) {
        const int64_t c = ra_layout_slice(o->p.layout, s->M, r,
                                          ctx->nranks).count;
        mmax = c > mmax ? c : mmax;
    }
    /* q k v o lse dout dq dk dv, then 2 K/V buffers and 3 dk|dv ones */
    b->model_bytes = 4.0 * ((double)(2 * (t->nq + t->nk + t->nv + t->no) +
                                     t->nl) +
                            5.0 * s->B * mmax * s->G * (s->D + s->Dv));
    ra_random_slice((uint64_t)o->seed, RA_STREAM_Q, s->B, s->N, s->H * s->D,
                    &t->qs, t->q);
    ra_random_slice((uint64_t)o->seed, RA_STREAM_K, s->B, s->M, s->G * s->D,
                    &t->ks, t->k);
    ra_random_slice((uint64_t)o->seed, RA_STREAM_V, s->B, s->M, s->G * s->Dv,
                    &t->ks, t->v);
    ra_random_slice((uint64_t)o->seed, RA_STREAM_DO, s->B, s->N, s->H * s->Dv,
                    &t->qs, b->d.g.dout);
    return RA_OK;
}

static ra_status bb_setup(const cli_ctx *ctx, bb_opts *o, bb_state *b)
{
    return ra_agree(ctx->comm, bb_alloc(ctx, o, b));
}

/* The warm-up and timed passes after one forward for o and lse:
 * b->med. */
static ra_status bb_measure(const cli_ctx *ctx, const bb_opts *o,
                            bb_state *b)
{
    const ra_shape *s = &b->d.s;
    const cli_tensors *t = &b->d.t;
    const cli_grads *g = &b->d.g;
    double times[3][1000];
    ra_timing tm;
    const int additive = o->p.score == RA_SCORE_ADDITIVE;
    ra_status st = ra_forward_ex(ctx->comm, s, &o->p, NULL, t->q, t->k, t->v,
                                 t->o, t->lse, NULL);
    for (int64_t rep = -o->warmup; st == RA_OK && rep < o->reps; rep++) {
        MPI_Barrier(ctx->comm);
        st = ra_backward_ex(ctx->comm, s, &o->p, NULL, t->q, t->k, t->v,
                            t->o, t->lse, g->dout, g->dq, g->dk, g->dv,
                            additive ? &g->dw_grads : NULL, &tm);
        if (rep >= 0) {
            times[0][rep] = tm.total;
            times[1][rep] = tm.compute;
            times[2][rep] = tm.comm_wait;
        }
    }
    if (st == RA_ERR_MPI)
        cli_abort(ctx, ra_error_message());
    if (st == RA_OK)
        b->med = (bb_times){bench_median(times[0], o->reps),
                            bench_median(times[1], o->reps),
                            bench_median(times[2], o->reps)};
    return st;
}

/* This run's sgemm rate, then the passes. */
static ra_status bb_compute(const cli_ctx *ctx, bb_opts *o, bb_state *b)
{
    b->sgemm = bench_sgemm_rate(ctx->comm, ra_params_threads(&o->p));
    bench_rss_reset();
    return bb_measure(ctx, o, b);
}

static ra_status bb_report(const cli_ctx *ctx, bb_opts *o, bb_state *b)
{
    const bb_times *med = &b->med;
    const spread wall = bench_spread(ctx->comm, med->total);
    const spread busy = bench_spread(ctx->comm, med->busy);
    const spread wait = bench_spread(ctx->comm, med->wait / med->total);
    const spread rss = bench_spread(ctx->comm, bench_rss_peak());
    const spread model = bench_spread(ctx->comm, b->model_bytes);
    double sg_all = 0.0;
    MPI_Allreduce(&b->sgemm, &sg_all, 1, MPI_DOUBLE, MPI_SUM, ctx->comm);
    if (ctx->rank != 0)
        return RA_OK;
    const double flops = ra_backward_flops(&b->d.s, &o->p, NULL);
    const double gf = flops / wall.max * 1e-9;
    printf("# backward  seconds  GFLOP/s  sgemm GFLOP/s  of sgemm  busy "
           "min/max s  busy max/min  exposed comm max  peak RSS MB max  "
           "model MB max\n");
    printf("  %-8s  %7.3f  %7.1f  %13.1f  %8.3f  %6.3f/%-6.3f  %12.3f  "
           "%15.3f  %15.1f  %12.1f\n", o->p.causal ? "causal" : "full",
           wall.max, gf, sg_all, gf / sg_all, busy.min, busy.max,
           busy.min > 0 ? busy.max / busy.min : 0.0, wait.max,
           rss.max / 1048576.0, model.max / 1048576.0);
    return RA_OK;
}

CLI_PASS_STEPS(bb, bb_opts, bb_state)
CLI_PASS_STEP(bb_init, bb_opts, bb_state)

static const cli_pass bb_pass = {CLI_PASS_FIELDS(bb, bb_opts, bb_state),
                                 .init = bb_init_step};

int cmd_bench_backward(const cli_ctx *ctx, int argc, char **argv)
{
    return cli_pass_run(ctx, &bb_pass, argc, argv);
}
