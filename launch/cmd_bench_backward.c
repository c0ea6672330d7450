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
#include "internal.h"
#include "placement.h"

typedef struct {
    cli_shape cs;
    ra_params p;
    int64_t warmup, reps, seed, additive_hidden;
    int backward;
    float *additive_mem; /* the additive score's random weights */
    ra_additive additive;
} bb_opts;

static const cli_opt bb_own[] = {
    {.name = "--warmup", .kind = CLI_INT, .meta = "W",
     .offset = CLI_FIELD(bb_opts, warmup, int64_t), .lo = 0, .hi = 1000,
     .def = "1", .help = "untimed passes first"},
    {.name = "--reps", .kind = CLI_INT, .meta = "R",
     .offset = CLI_FIELD(bb_opts, reps, int64_t), .lo = 1, .hi = 1000,
     .def = "3", .help = "timed passes (the median is reported)"},
    {.name = "--seed", .kind = CLI_INT, .meta = "S",
     .offset = CLI_FIELD(bb_opts, seed, int64_t), .lo = 0, .hi = INT64_MAX,
     .def = "1", .help = "seed of the random inputs"},
    {.name = "--additive-hidden", .kind = CLI_INT, .meta = "A",
     .offset = CLI_FIELD(bb_opts, additive_hidden, int64_t), .lo = 1,
     .hi = 65536, .def = "64",
     .help = "hidden size of random additive weights"},
    {.name = "--no-poll", .kind = CLI_FLAG,
     .offset = CLI_FIELD(bb_opts, p.no_poll, int),
     .help = "do not progress transfers between tiles (shows what\n"
     "overlap is worth)"},
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
               {cli_backward_opts, offsetof(bb_opts, backward)},
               {bb_own, 0}, {cli_forward_opts, offsetof(bb_opts, p)}},
};

/* A rank's tensors: q k v o lse of cli_tensors, and dout dq dk dv. */
typedef struct {
    cli_tensors t;
    float *mem, *dout, *dq, *dk, *dv;
    double model_bytes; /* tensors + the ring's buffers of ra_backward */
} bb_state;

static ra_status bb_alloc(const cli_ctx *ctx, const bb_opts *o, bb_state *b)
{
    const ra_shape *s = &o->cs.shape;
    ra_status st = cli_tensors_alloc(&b->t, s, o->p.layout, ctx->rank,
                                     ctx->nranks);
    const int64_t n = b->t.qs.count, m = b->t.ks.count;
    const int64_t no = s->B * n * s->H * s->Dv, nq = s->B * n * s->H * s->D;
    const int64_t nk = s->B * m * s->G * s->D, nv = s->B * m * s->G * s->Dv;
    const int64_t total = no + nq + nk + nv + 64;
    b->mem = st == RA_OK ? malloc(sizeof(float) * (size_t)total) : NULL;
    if (st == RA_OK && !b->mem)
        st = ra_error_set(RA_ERR_NOMEM, "bench --backward: cannot allocate "
                          "the gradients of rank %d", ctx->rank);
    if (st != RA_OK)
        return st;
    b->dout = b->mem;
    b->dq = b->dout + no + 16;
    b->dk = b->dq + nq + 16;
    b->dv = b->dk + nk + 16;
    int64_t mmax = 0;
    for (int r = 0; r < ctx->nranks; r++) {
        const int64_t c = ra_layout_slice(o->p.layout, s->M, r,
                                          ctx->nranks).count;
        mmax = c > mmax ? c : mmax;
    }
    /* q k v o lse dout dq dk dv, then 2 K/V buffers and 3 dk|dv ones */
    b->model_bytes = 4.0 * ((double)(b->t.nq + b->t.nk + b->t.nv + b->t.no +
                                     b->t.nl) + no + nq + nk + nv +
                            5.0 * s->B * mmax * s->G * (s->D + s->Dv));
    ra_random_slice((uint64_t)o->seed, RA_STREAM_Q, s->B, s->N, s->H * s->D,
                    &b->t.qs, b->t.q);
    ra_random_slice((uint64_t)o->seed, RA_STREAM_K, s->B, s->M, s->G * s->D,
                    &b->t.ks, b->t.k);
    ra_random_slice((uint64_t)o->seed, RA_STREAM_V, s->B, s->M, s->G * s->Dv,
                    &b->t.ks, b->t.v);
    ra_random_slice((uint64_t)o->seed, RA_STREAM_DO, s->B, s->N, s->H * s->Dv,
                    &b->t.qs, b->dout);
    return RA_OK;
}

/* Per rank: median wall time, busy (compute) time and wait of the passes. */
typedef struct {
    double total, busy, wait;
} bb_times;

static ra_status bb_measure(const cli_ctx *ctx, const bb_opts *o,
                            bb_state *b, bb_times *med)
{
    const ra_shape *s = &o->cs.shape;
    double t[3][1000];
    ra_timing tm;
    const int64_t A = o->p.score == RA_SCORE_ADDITIVE ? o->additive.A : 0;
    float *dw = malloc(sizeof(float) * (size_t)(A * (2 * s->D + 1) + 1));
    const ra_additive_grads dwg = {dw, dw + A * s->D, dw + 2 * A * s->D};
    ra_status st = ra_agree(ctx->comm, dw ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "bench --backward: "
                                           "out of memory"));
    if (st == RA_OK)
        st = ra_forward_ex(ctx->comm, s, &o->p, NULL, b->t.q, b->t.k, b->t.v,
                           b->t.o, b->t.lse, NULL);
    for (int64_t rep = -o->warmup; st == RA_OK && rep < o->reps; rep++) {
        MPI_Barrier(ctx->comm);
        st = ra_backward_ex(ctx->comm, s, &o->p, NULL, b->t.q, b->t.k,
                            b->t.v, b->t.o, b->t.lse, b->dout, b->dq, b->dk,
                            b->dv, A ? &dwg : NULL, &tm);
        if (rep >= 0) {
            t[0][rep] = tm.total;
            t[1][rep] = tm.compute;
            t[2][rep] = tm.comm_wait;
        }
    }
    free(dw);
    if (st == RA_ERR_MPI)
        cli_abort(ctx, ra_error_message());
    if (st == RA_OK)
        *med = (bb_times){bench_median(t[0], o->reps),
                          bench_median(t[1], o->reps),
                          bench_median(t[2], o->reps)};
    return st;
}

static void bb_report(const cli_ctx *ctx, const bb_opts *o, const bb_state *b,
                      const bb_times *med, double sgemm)
{
    const ra_shape *s = &o->cs.shape;
    const spread wall = bench_spread(ctx->comm, med->total);
    const spread busy = bench_spread(ctx->comm, med->busy);
    const spread wait = bench_spread(ctx->comm, med->wait / med->total);
    const spread rss = bench_spread(ctx->comm, bench_rss_peak());
    const spread model = bench_spread(ctx->comm, b->model_bytes);
    double sg_all = 0.0;
    MPI_Allreduce(&sgemm, &sg_all, 1, MPI_DOUBLE, MPI_SUM, ctx->comm);
    if (ctx->rank != 0)
        return;
    const double flops = ra_backward_flops(s, &o->p, NULL);
    const double gf = flops / wall.max * 1e-9;
    printf("# backward  seconds  GFLOP/s  sgemm GFLOP/s  of sgemm  busy "
           "min/max s  busy max/min  exposed comm max  peak RSS MB max  "
           "model MB max\n");
    printf("  %-8s  %7.3f  %7.1f  %13.1f  %8.3f  %6.3f/%-6.3f  %12.3f  "
           "%15.3f  %15.1f  %12.1f\n", o->p.causal ? "causal" : "full",
           wall.max, gf, sg_all, gf / sg_all, busy.min, busy.max,
           busy.min > 0 ? busy.max / busy.min : 0.0, wait.max,
           rss.max / 1048576.0, model.max / 1048576.0);
}

int cmd_bench_backward(const cli_ctx *ctx, int argc, char **argv)
{
    bb_opts o = {0};
    cli_shape_default(&o.cs);
    const int code = cli_parse_pass(ctx, &bb_spec, &o, &o.p, argc, argv);
    if (code >= 0)
        return code;
    cli_shape_finish(&o.cs);
    const int layout_auto = o.p.layout == RA_LAYOUT_AUTO;
    o.p.layout = ra_params_layout(&o.p, 0);
    ra_status st = ra_shape_check(&o.cs.shape);
    if (st == RA_OK)
        st = cli_params_check(&o.p, &o.cs.shape, NULL);
    st = ra_agree(ctx->comm, st);
    if (st == RA_OK && o.p.score == RA_SCORE_ADDITIVE) {
        st = bench_additive_make(ctx->comm, (uint64_t)o.seed,
                                 o.additive_hidden, o.cs.shape.D,
                                 &o.additive_mem, &o.additive);
        o.p.additive = &o.additive;
    }
    bb_state b = {0};
    bb_times med = {0};
    if (st == RA_OK)
        st = ra_agree(ctx->comm, bb_alloc(ctx, &o, &b));
    if (st == RA_OK) {
        cli_placement_warn(ctx, ra_params_threads(&o.p));
        cli_print_params(ctx, &o.cs.shape, &o.p, layout_auto, "(random)",
                         "(none)");
        const double sgemm = bench_sgemm_rate(ctx->comm,
                                              ra_params_threads(&o.p));
        bench_rss_reset();
        st = bb_measure(ctx, &o, &b, &med);
        if (st == RA_OK)
            bb_report(ctx, &o, &b, &med, sgemm);
    }
    cli_tensors_free(&b.t);
    free(b.mem);
    free(o.additive_mem);
    return st == RA_OK ? CLI_EXIT_OK : cli_fail_status(ctx, st);
}
