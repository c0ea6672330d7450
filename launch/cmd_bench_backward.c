/* cmd_bench_backward.c: `ringattn bench --backward`: the speed of
 * ra_backward on random in-memory slices, against the same run's sgemm
 * and oneDNN peak.
 * parse -> validate -> set up (tensors, one forward for o and lse) ->
 * measure (warm-up, then timed passes between barriers) -> report (rank 0,
 * every parameter echoed first, then bench's columns, JSON and CSV,
 * bench_report.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "call.h"
#include "bench.h"
#include "cli.h"
#include "driver.h"
#include "internal.h"
#include "placement.h"

typedef struct {
    cli_shape cs;
    ra_params p;
    int64_t warmup, reps, seed, additive_hidden;
    int no_yardsticks;
    cli_tables tab; /* --json, --csv */
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
                 "no progress of transfers between tiles"),
    CLI_OPT_FLAG(bb_opts, "--no-yardsticks", no_yardsticks,
                 "skip the sgemm and peak runs (their columns n/a)"),
    {0},
};

static const cli_spec bb_spec = {
    .name = "bench --backward",
    .usage =
    "usage: mpirun -np P ringattn bench --backward [options]\n"
    "\n"
    "Times ra_backward on random q, k, v, dO (o and lse from one forward\n"
    "pass) and prints one row with the columns of `ringattn bench`\n"
    "(mode backward).\n",
    .groups = {{cli_seq_opts, offsetof(bb_opts, cs)},
               {cli_shape_opts, offsetof(bb_opts, cs)},
               {bb_own, 0}, {cli_forward_opts, offsetof(bb_opts, p)},
               {cli_pass_opts, offsetof(bb_opts, p)},
               {cli_table_opts, offsetof(bb_opts, tab)}},
    .epilog =
    "Columns as in `ringattn bench --help`, except: GFLOP/s counts 2.5x the\n"
    "forward's useful FLOPs (five products per tile); MB_sent counts K/V and\n"
    "the travelling dK/dV; model_MB is the tensors, gradients and the ring's\n"
    "buffers; rel_err is not computed (0): the verdict is PASS when every\n"
    "gradient is finite (`run --backward` then `verify --backward` checks\n"
    "the values).\n",
    .globals = CLI_GLOBAL_RING,
};

/* A run's tensors (q k v o lse and dout dq dk dv, in d) and results. */
typedef struct {
    cli_pass_data d;
    double model_bytes; /* tensors + the ring's buffers of ra_backward */
    bench_yard yard;    /* the run's yardsticks */
    bench_reps reps;    /* the timed passes */
    int finite;         /* every gradient of this rank is finite */
} bb_state;

/* The shape and parameters checked (agreed), and the additive score's
 * random weights made. */
static ra_status bb_validate(const cli_ctx *ctx, bb_opts *o, bb_state *b)
{
    cli_shape_finish(&o->cs);
    b->d.s = o->cs.shape;
    b->d.in = "(random)";
    b->d.out = "(none)";
    b->d.backward = 1;
    cli_pass_layout(&b->d, &o->p, 0);
    ra_status st = ra_shape_check(&b->d.s);
    if (st == RA_OK)
        st = cli_params_check(&o->p, &b->d.s, NULL);
    if (st == RA_OK)
        st = bench_tables_check(ctx, &o->tab, NULL);
    st = ra_agree(ctx->comm, st);
    if (st == RA_OK && o->p.num.score == RA_SCORE_ADDITIVE) {
        h5io_additive *si = &b->d.score_in;
        st = bench_additive_make(ctx->comm, (uint64_t)o->seed,
                                 o->additive_hidden, b->d.s.D, &si->mem,
                                 &si->additive);
        o->p.num.additive = &si->additive;
    }
    return st;
}

static ra_status bb_alloc(const cli_ctx *ctx, const bb_opts *o, bb_state *b)
{
    const ra_shape *s = &b->d.s;
    cli_tensors *t = &b->d.t;
    const int64_t A =
        o->p.num.score == RA_SCORE_ADDITIVE ? o->p.num.additive->A : 0;
    ra_status st = cli_tensors_alloc(t, s, &o->p, ctx);
    if (st == RA_OK)
        st = cli_grads_alloc(&b->d, A, "bench --backward", ctx,
                             o->p.exec.mem_limit);
    if (st == RA_OK)
        st = bench_reps_alloc(&b->reps, o->reps, "bench --backward");
    if (st != RA_OK)
        return st;
    int64_t mmax = 0;
    for (int r = 0; r < ctx->nranks; r++) {
        const int64_t c =
            ra_params_slice(&o->p, o->p.exec.layout, s->M, r, ctx->nranks)
                .count;
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

/* 1 when the n floats of x are finite. */
static int all_finite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* The warm-up and timed passes after one forward for o and lse, into
 * b->reps; whether the last pass's gradients are finite. */
static ra_status bb_measure(const cli_ctx *ctx, const bb_opts *o,
                            bb_state *b)
{
    const ra_shape *s = &b->d.s;
    const cli_tensors *t = &b->d.t;
    const cli_grads *g = &b->d.g;
    const int additive = o->p.num.score == RA_SCORE_ADDITIVE;
    const ra_qkv in = {t->q, t->k, t->v};
    const ra_grads grads = {t->o, t->lse, g->dout, g->dq, g->dk, g->dv,
                            additive ? &g->dw_grads : NULL};
    ra_status st = ra_call_forward(ctx->comm, s, &o->p, NULL, &in,
                                   &(ra_out){t->o, t->lse, NULL}, NULL);
    for (int64_t rep = -o->warmup; st == RA_OK && rep < o->reps; rep++) {
        MPI_Barrier(ctx->comm);
        st = ra_call_backward(ctx->comm, s, &o->p, NULL, &in, &grads,
                              &b->reps.tm);
        if (rep >= 0)
            bench_reps_record(&b->reps, rep);
    }
    if (st == RA_ERR_MPI)
        cli_pass_stalled(ctx, &b->d);
    b->reps.rss = bench_rss_peak();
    b->finite = all_finite(g->dq, t->nq) && all_finite(g->dk, t->nk) &&
                all_finite(g->dv, t->nv);
    return st;
}

/* This run's yardsticks (summed over the ranks; the peak in the run's
 * precision), then the passes. */
static ra_status bb_compute(const cli_ctx *ctx, bb_opts *o, bb_state *b)
{
    bench_yardsticks(ctx->comm, ra_params_threads(&o->p),
                     o->p.num.precision == RA_PRECISION_BF16, o->no_yardsticks,
                     &b->yard);
    bench_rss_reset();
    return bb_measure(ctx, o, b);
}

/* The row of `ringattn bench` for this run. Collective. */
static void bb_result(const cli_ctx *ctx, const bb_opts *o, bb_state *b,
                      bench_result *r)
{
    memset(r, 0, sizeof *r);
    r->s = b->d.s;
    r->p = o->p;
    r->ranks = ctx->nranks;
    r->threads = ra_params_threads(&o->p);
    r->mode = "backward";
    ra_params_tiles(&o->p, &b->d.s, &r->block_q, &r->block_kv);
    r->flops = ra_params_backward_flops(&b->d.s, &o->p, NULL);
    bench_times(ctx->comm, o->reps, &b->reps, r);
    r->nodes = ctx->nodes.nodes;
    r->ranks_per_node = ctx->nodes.ranks_per_node_max;
    r->node_aware = ctx->node_aware;
    r->gflops = r->flops / r->seconds_median * 1e-9;
    r->sgemm_gflops = b->yard.sgemm;
    r->peak_gflops = b->yard.peak;
    r->core_gflops = b->yard.core;
    r->products_gflops = bench_products_rate(ctx->comm, &b->d.s, &o->p, 1,
                                             o->no_yardsticks);
    r->model_bytes = bench_spread(ctx->comm, b->model_bytes).max;
    r->ring_gbps =
        bench_ring_bandwidth(ctx->comm, &b->d.s, &o->p, o->p.exec.layout);
    r->steps = b->reps.tm.steps;
    int finite = b->finite;
    MPI_Allreduce(MPI_IN_PLACE, &finite, 1, MPI_INT, MPI_MIN, ctx->comm);
    r->pass = finite;
}

static ra_status bb_report(const cli_ctx *ctx, bb_opts *o, bb_state *b)
{
    bench_result r;
    bb_result(ctx, o, b, &r);
    if (ctx->rank == 0) {
        bench_print_yard(stdout, &b->yard);
        bench_print_header(stdout);
        bench_print_row(stdout, &r);
    }
    return ra_agree(ctx->comm, bench_tables_write(ctx, &o->tab, &r, 1));
}

int cmd_bench_backward(const cli_ctx *ctx, int argc, char **argv)
{
    bb_opts o = {0};
    bb_state b = {0};
    cli_shape_default(&o.cs);
    const int code = cli_parse_pass(ctx, &bb_spec, &o, &o.p, argc, argv);
    if (code >= 0)
        return code;
    cli_pass_begin(ctx, &b.d, &o.p);
    ra_status st = bb_validate(ctx, &o, &b);
    if (st == RA_OK)
        st = bb_setup(ctx, &o, &b);
    if (st == RA_OK) {
        cli_pass_echo(ctx, &b.d, &o.p);
        st = bb_compute(ctx, &o, &b);
    }
    cli_pass_writing(ctx, &b.d, &o.p);
    if (st == RA_OK)
        st = bb_report(ctx, &o, &b);
    bench_reps_free(&b.reps);
    return cli_pass_end(ctx, &b.d, st);
}
