/* cmd_bench_backward.c: `ringattn bench --backward`: the speed of
 * ra_backward on random in-memory slices, against the same run's sgemm
 * and oneDNN peak.
 * parse -> validate -> set up (the tensors) -> measure (comm/perf/
 * bench_run.c: one forward for o and lse, warm-up, then timed passes
 * between barriers) -> report (rank 0, every parameter echoed first, then
 * bench's columns, JSON and CSV, bench_report.c). */
#include <stdio.h>

#include "agree.h"
#include "bench.h"
#include "driver.h"

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

/* The shape and parameters checked (agreed), and the additive score's
 * random weights made. */
static ra_status bb_validate(const cli_ctx *ctx, bb_opts *o,
                             cli_pass_data *d)
{
    cli_shape_finish(&o->cs);
    d->s = o->cs.shape;
    d->in = "(random)";
    d->out = "(none)";
    d->backward = 1;
    cli_pass_layout(d, &o->p, 0);
    ra_status st = cli_params_check(&o->p, &d->s, NULL); /* the shape too */
    if (st == RA_OK)
        st = ctx->rank == 0 ? cli_tables_check(&o->tab, NULL, NULL) : RA_OK;
    st = ra_agree(ctx->comm, st);
    if (st == RA_OK && o->p.num.score == RA_SCORE_ADDITIVE) {
        h5io_additive *si = &d->score_in;
        st = bench_additive_make(ctx->comm, (uint64_t)o->seed,
                                 o->additive_hidden, d->s.D, &si->mem,
                                 &si->additive);
        o->p.num.additive = &si->additive;
    }
    return st;
}

static ra_status bb_alloc(const cli_ctx *ctx, const bb_opts *o,
                          cli_pass_data *d)
{
    const int64_t A =
        o->p.num.score == RA_SCORE_ADDITIVE ? o->p.num.additive->A : 0;
    ra_status st = cli_tensors_alloc(&d->t, &d->s, &o->p, ctx);
    if (st == RA_OK)
        st = cli_grads_alloc(d, A, "bench --backward", ctx,
                             o->p.exec.mem_limit);
    return ra_agree(ctx->comm, st);
}

/* This run's yardsticks (summed over the ranks; the peak in the run's
 * precision), then the passes measured into r (comm/perf/bench_run.c). */
static ra_status bb_measure(const cli_ctx *ctx, const bb_opts *o,
                            cli_pass_data *d, bench_yard *yard,
                            bench_result *r)
{
    const cli_tensors *t = &d->t;
    cli_grads *g = &d->g;
    bench_run_yardsticks(ctx->comm, &o->p, o->no_yardsticks, yard);
    const bench_config c = {&d->s, {&o->p, (uint64_t)o->seed, 0, 0, 0},
                            o->warmup, o->reps, 0, 1, o->no_yardsticks, yard,
                            bench_place_of(ctx)};
    const bench_operands x = {
        t->qs, t->ks, t->q, t->k, t->v, t->o, t->lse, g->dout, g->dq, g->dk,
        g->dv, o->p.num.score == RA_SCORE_ADDITIVE ? &g->dw_grads : NULL};
    const ra_status st = bench_config_run(ctx->comm, &c, &x, r);
    if (st == RA_ERR_MPI)
        cli_pass_stalled(ctx, d);
    return st;
}

static ra_status bb_report(const cli_ctx *ctx, const bb_opts *o,
                           const bench_yard *yard, const bench_result *r)
{
    if (ctx->rank == 0) {
        bench_print_yard(stdout, yard);
        bench_print_header(stdout);
        bench_print_row(stdout, r);
    }
    return ra_agree(ctx->comm, bench_tables_write(ctx, &o->tab, r, 1));
}

int cmd_bench_backward(const cli_ctx *ctx, int argc, char **argv)
{
    bb_opts o = {0};
    cli_pass_data d = {0};
    bench_yard yard;
    bench_result r;
    cli_shape_default(&o.cs);
    const int code = cli_parse_pass(ctx, &bb_spec, &o, &o.p, argc, argv);
    if (code >= 0)
        return code;
    cli_pass_begin(ctx, &d, &o.p);
    ra_status st = bb_validate(ctx, &o, &d);
    if (st == RA_OK)
        st = bb_alloc(ctx, &o, &d);
    if (st == RA_OK) {
        cli_pass_echo(ctx, &d, &o.p);
        st = bb_measure(ctx, &o, &d, &yard, &r);
    }
    cli_pass_writing(ctx, &d, &o.p);
    if (st == RA_OK)
        st = bb_report(ctx, &o, &yard, &r);
    return cli_pass_end(ctx, &d, st);
}
