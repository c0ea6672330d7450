/* cmd_bench.c: `ringattn bench`: the forward pass on in-memory random
 * inputs, measured honestly: warm-up passes, barriers before each timed
 * pass, per-rank min/avg/max, the same processes' large-sgemm rate and
 * oneDNN matmul peak as the yardsticks, a comm-only ring for bandwidth,
 * peak RSS, and a sampled fp64 check of every configuration's output.
 * Rank 0 alone prints. parse -> validate -> set up -> measure -> report;
 * comm/perf/bench_sweep.c measures the configurations into their rows
 * and prints them. */
#include <stdio.h>
#include <stdlib.h>

#include "agree.h"
#include "bench.h"
#include "call.h"
#include "placement.h"
#include "plan.h"

/* ---- options ------------------------------------------------------------ */

/* Parses "1024,2048,4096" into o->seqs: no empty item, none after a
 * trailing comma, at least one. */
static int parse_seq_list(const cli_opt *opt, const char *text, void *base)
{
    bench_opts *o = base;
    const int n = cli_parse_i64_list(opt->name, text, 1, (int64_t)1 << 40,
                                     o->seqs, BENCH_MAX_SEQS, "lengths");
    o->nseq = n > 0 ? n : 0;
    return n > 0 ? 0 : -1;
}

static const char *const modes[] = {"ring", "naive", "both", NULL};

#define B_AT(f) offsetof(bench_opts, f)

static const cli_opt bench_own[] = {
    {.name = "--seq", .kind = CLI_CUSTOM, .meta = "LIST", .fn = parse_seq_list,
     .def = "4096", .help = "query lengths, comma separated"},
    CLI_OPT_INT(bench_opts, "--additive-hidden", "A", additive_hidden, 1,
                1 << 16, "64", "hidden size of random additive weights"),
    CLI_OPT_CHOICE(bench_opts, "--mode", "MODE", mode, modes, NULL, "ring",
                   "ring, naive (materialising) or both"),
    CLI_OPT_FLAG(bench_opts, "--no-poll", p.no_poll,
                 "no progress of transfers between tiles"),
    CLI_OPT_FLAG(bench_opts, "--no-yardsticks", no_yardsticks,
                 "skip the sgemm and peak runs (their columns n/a)"),
    CLI_OPT_INT(bench_opts, "--warmup", "W", warmup, 0, INT32_MAX, "1",
                "untimed passes first"),
    CLI_OPT_INT(bench_opts, "--reps", "R", reps, 1, INT32_MAX, "5",
                "timed passes; the median is reported"),
    CLI_OPT_INT(bench_opts, "--check-rows", "K", check_rows, 0, INT32_MAX, "3",
                "query rows per rank checked in fp64"),
    CLI_OPT_INT(bench_opts, "--seed", "S", seed, 0, INT32_MAX, "1",
                "input seed"),
    CLI_OPT_FLAG(bench_opts, "--sinks", sinks,
                 "sinks as gen --sinks; plain rates beside (+features)"),
    CLI_OPT_PROFILE(bench_opts, profile),
    {0},
};

static const cli_spec bench_spec = {
    .name = "bench",
    .usage = "usage: mpirun -np P ringattn bench [options]\n"
             "\n"
             "Times the forward pass on random in-memory inputs on P ranks\n"
             "and prints one row per configuration (--strategy all: each).\n",
    .groups = {{cli_shape_opts, B_AT(cs)},
               {cli_forward_opts, B_AT(p)},
               {cli_pass_opts, B_AT(p)},
               {bench_own, 0},
               {cli_random_mask_opts, B_AT(rm)},
               {cli_table_opts, B_AT(tab)}},
    .epilog = bench_columns,
    .globals = CLI_GLOBAL_RING,
};

/* The whole option parser (the fuzz harness calls it): 0, or -1 with a
 * message; *help when --help was given. */
int parse_bench(bench_opts *o, int argc, char **argv, int *help)
{
    const int r = cli_parse(&bench_spec, o, argc, argv);
    *help = r == CLI_HELP;
    return r < 0 ? -1 : 0;
}

/* ---- the driver ------------------------------------------------------------ */

/* The place of the ranks, as a row states it. */
bench_place bench_place_of(const cli_ctx *ctx)
{
    return (bench_place){ctx->nodes.nodes, ctx->nodes.ranks_per_node_max,
                         ctx->node_aware};
}

/* A configuration's operands (bench_alloc), against the memory limit. */
typedef struct {
    const cli_ctx *ctx;
    cli_tensors t;
} bench_mem;

static ra_status operands_alloc(void *arg, const ra_shape *s,
                                const ra_params *p, bench_operands *x)
{
    bench_mem *m = arg;
    const ra_status st = cli_tensors_alloc(&m->t, s, p, m->ctx);
    const cli_tensors *t = &m->t;
    *x = (bench_operands){t->qs, t->ks, t->q, t->k, t->v, t->o, t->lse};
    return st;
}

static void operands_release(void *arg)
{
    cli_tensors_free(&((bench_mem *)arg)->t);
}

/* The run of o as comm/perf/bench_sweep.c measures it. */
static void sweep_of(const cli_ctx *ctx, bench_opts *o, bench_mem *m,
                     bench_sweep *w)
{
    const int strategy = (int)o->p.exec.strategy;
    *w = (bench_sweep){o->cs.shape, o->cs.seq_kv_set, o->seqs, o->nseq,
        {&o->p, (uint64_t)o->seed, o->rm.lens, o->rm.segment_avg,
         o->check_rows}, o->sinks, o->warmup, o->reps, o->mode != 1,
        o->mode != 0, o->no_yardsticks, o->p.exec.layout == RA_LAYOUT_AUTO,
        strategy == CLI_STRATEGY_ALL    ? BENCH_ALL
        : strategy == CLI_STRATEGY_AUTO ? BENCH_AUTO : BENCH_GIVEN,
        o->profile};
    w->place = bench_place_of(ctx);
    w->ops = (bench_alloc){operands_alloc, operands_release, m};
    m->ctx = ctx;
    if (w->which != BENCH_GIVEN)
        o->p.exec.strategy = ra_call_choice_strategy(&o->p);
}

static void print_echo(const cli_ctx *ctx, const bench_sweep *w,
                       const bench_yard *yard)
{
    printf("# ringattn bench %s\n", RA_VERSION_STRING);
    printf("# %-12s %d\n", "ranks", ctx->nranks);
    cli_print_job(ctx, 12);
    bench_sweep_echo(stdout, w, yard);
    printf("# %-12s %s\n", "command", ctx->command_line);
    fflush(stdout);
}

/* Every check before the work: the modes, every shape, the output files
 * (replaced when they exist, as before), the picks of --strategy auto;
 * the ranks agree. */
static ra_status bench_validate(const cli_ctx *ctx, bench_opts *o,
                                bench_sweep *w)
{
    o->p.exec.layout = w->naive && w->layout_auto /* the baseline's own */
                           ? RA_LAYOUT_CONTIGUOUS
                           : ra_params_layout(&o->p, o->rm.segment_avg > 0);
    ra_status st = w->naive ? bench_naive_check(w) : RA_OK;
    for (int i = 0; i < o->nseq && st == RA_OK; i++) {
        const ra_shape s = bench_sweep_shape(w, i);
        bench_operands x;
        st = cli_params_check(&o->p, &s, NULL);
        if (st == RA_OK)
            st = ra_call_check_ranks(&s, &o->p, ctx->nranks);
        /* before the yardsticks and every config: the tensors fit the
         * limit and the address space (allocated untouched, then freed) */
        if (st == RA_OK)
            st = w->ops.alloc(w->ops.arg, &s, &o->p, &x);
        w->ops.release(w->ops.arg);
    }
    if (st == RA_OK)
        st = ctx->rank == 0 ? cli_tables_check(&o->tab, NULL, o->profile)
                            : RA_OK;
    st = ra_agree(ctx->comm, st);
    if (st == RA_OK) {
        const plan_job j = plan_job_of(ctx);
        st = bench_sweep_plan(&j, w, ctx->rank == 0 ? stderr : NULL);
    }
    return st;
}

/* Measures every configuration; rank 0 prints the rows as they come. */
static ra_status bench_measure(const cli_ctx *ctx, const bench_sweep *w,
                               bench_result *rows, int *nrows)
{
    bench_yard yard;
    bench_run_yardsticks(ctx->comm, w->gen.p, w->no_yardsticks, &yard);
    if (ctx->rank == 0) {
        print_echo(ctx, w, &yard);
        bench_print_header(stdout);
    }
    const ra_status st = bench_sweep_run(ctx->comm, w, &yard,
                                         ctx->rank == 0 ? stdout : NULL,
                                         rows, nrows);
    if (st == RA_ERR_MPI) /* a stalled ring: the others wait for a
                             stopped rank */
        cli_abort(ctx, ra_error_message());
    return st;
}

/* The JSON and CSV files and the verdict: exit 1 when a row failed. */
static ra_status bench_report(const cli_ctx *ctx, const bench_opts *o,
                              const bench_result *rows, int nrows, int *pass)
{
    const ra_status st = bench_tables_write(ctx, &o->tab, rows, nrows);
    *pass = 1;
    for (int i = 0; i < nrows; i++)
        *pass &= rows[i].pass;
    return ra_agree(ctx->comm, st);
}

int cmd_bench(const cli_ctx *ctx, int argc, char **argv)
{
    bench_opts o = {0};
    bench_sweep w;
    bench_mem m = {0};
    int nrows = 0, pass = 0;
    cli_shape_default(&o.cs);
    ra_params_default(&o.p);
    const int code = cli_parse_or_exit(ctx, &bench_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    cli_shape_finish(&o.cs);
    cli_params_finish(&o.p);
    sweep_of(ctx, &o, &m, &w);
    bench_result *rows = calloc((size_t)bench_sweep_rows(&w), sizeof *rows);
    ra_status st = ra_agree(ctx->comm, rows ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "bench: out of "
                                                         "memory"));
    if (st == RA_OK)
        st = bench_validate(ctx, &o, &w);
    if (st == RA_OK) {
        cli_placement_warn(ctx, ra_params_threads(&o.p));
        st = bench_logits_make(ctx->comm, &w, o.additive_hidden, &o.p,
                               &o.logits);
    }
    if (st == RA_OK)
        st = bench_measure(ctx, &w, rows, &nrows);
    if (st == RA_OK) { /* with the results: what they are worth */
        cli_oversubscribed_warn(ctx, ra_params_threads(&o.p), "times are "
                                "shares of a core, not this machine's speed");
        st = bench_report(ctx, &o, rows, nrows, &pass);
    }
    free(rows);
    bench_logits_free(&o.logits);
    if (st != RA_OK)
        return cli_fail_status(ctx, st);
    return pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}
