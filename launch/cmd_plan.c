/* cmd_plan.c: `ringattn plan`: what a forward pass would cost before it
 * runs. The problem comes from an input file's schema (and its masks) or
 * from gen's shape flags; the allocation from --ranks, --nodes, --threads
 * (or the running mpirun's); the rates from a machine profile. Rank 0
 * alone prints (comm/perf/plan_text.c), per strategy, whether it applies,
 * the predicted time in parts, peak memory and bytes per rank, and names
 * the fastest. parse -> validate -> set up (comm/perf/plan_run.c) ->
 * predict -> report. */
#include <stdlib.h>

#include "agree.h"
#include "plan.h"

typedef struct {
    cli_shape cs;
    ra_axes qkv_layout;     /* --qkv-layout: --in's order without axes */
    cli_tables tab;         /* --json, --csv */
    double link_rate;       /* bits/s between nodes; 0: the profile's */
    double link_latency;    /* s per message between nodes; 0: same */
    cli_random_masks rm;
    int64_t seed, additive_hidden;
    int max_seq;
    perf_plan w;            /* p, ranks, nodes, cores, kernel_rate, sweep,
                               profile, platform, in: options; 0 not
                               given */
    ra_h5_source src;       /* the default dataset names */
    ra_h5_masks h5m;        /* masks of --in */
    bench_masks bm;         /* or bench's random ones */
    ra_additive additive;   /* A only: the model needs no weights */
} plan_opts;

/* Parses "1,2,4" into o->sweep. */
static int parse_nodes_list(const cli_opt *opt, const char *text, void *base)
{
    plan_opts *o = base;
    const int n = cli_parse_i64_list(opt->name, text, 1, 4096, o->w.sweep,
                                     PLAN_MAX_SWEEP, "node counts");
    o->w.nsweep = n > 0 ? n : 0;
    return n > 0 ? 0 : -1;
}

static const cli_opt plan_own[] = {
    CLI_OPT_TEXT(plan_opts, "--in", "FILE", w.in, NULL,
                 "the problem of an input file (its shapes and masks)"),
    CLI_OPT_QKV_LAYOUT(plan_opts, qkv_layout),
    {.name = "--ranks", .kind = CLI_INT, .meta = "P",
     .offset = CLI_FIELD(plan_opts, w.ranks, int64_t), .lo = 1, .hi = 1 << 20,
     .shown = "this mpirun's", .help = "ranks of the job"},
    {.name = "--nodes", .kind = CLI_INT, .meta = "K",
     .offset = CLI_FIELD(plan_opts, w.nodes, int64_t), .lo = 1, .hi = 1 << 16,
     .shown = "this mpirun's or 1", .help = "nodes the ranks run on"},
    {.name = "--cores", .kind = CLI_INT, .meta = "C",
     .offset = CLI_FIELD(plan_opts, w.cores, int64_t), .lo = 1, .hi = 1 << 24,
     .shown = "machine's x nodes", .help = "cores the ranks share"},
    {.name = "--profile", .kind = CLI_TEXT, .meta = "FILE",
     .offset = CLI_FIELD(plan_opts, w.profile, const char *),
     .shown = "built-in", .help = "profile of `ringattn probe`"},
    CLI_OPT_POSITIVE(plan_opts, "--link-rate", "BITS", link_rate, 1e15, NULL,
                     "bits/s between nodes, in place of the profile's"),
    CLI_OPT_POSITIVE(plan_opts, "--link-latency", "S", link_latency, 1.0,
                     NULL, "latency between nodes, in place of the profile's"),
    CLI_OPT_TEXT(plan_opts, "--platform", "FILE", w.platform, NULL,
                 "a SimGrid platform: its nodes, cores, links"),
    CLI_OPT_POSITIVE(plan_opts, "--kernel-rate", "GFLOPS", w.kernel_rate, 1e9,
                     NULL, "GFLOP/s per core, in place of the profile's"),
    CLI_OPT_INT(plan_opts, "--seed", "S", seed, 0, INT64_MAX, "1",
                "seed of random masks"),
    CLI_OPT_INT(plan_opts, "--additive-hidden", "A", additive_hidden, 1,
                1 << 16, "64", "hidden size of the additive score"),
    {.name = "--sweep-nodes", .kind = CLI_CUSTOM, .meta = "LIST",
     .fn = parse_nodes_list,
     .help = "strong and weak scaling over these node counts"},
    CLI_OPT_FLAG(plan_opts, "--max-seq", max_seq,
                 "the longest N (= M) that fits in memory, per strategy"),
    {0},
};

static const cli_spec plan_spec = {
    .name = "plan",
    .usage = "usage: ringattn plan [--in FILE | --seq N ...] --ranks P "
             "[--nodes K] [options]\n"
             "\n"
             "Predicts a forward pass before it runs, for every strategy:\n"
             "whether it applies, time (compute + exposed communication +\n"
             "load imbalance + I/O), peak memory and bytes per rank.\n",
    .groups = {{cli_seq_opts, offsetof(plan_opts, cs)},
               {cli_shape_opts, offsetof(plan_opts, cs)},
               {cli_forward_opts, offsetof(plan_opts, w.p)},
               {plan_own, 0},
               {cli_random_mask_opts, offsetof(plan_opts, rm)},
               {cli_table_opts, offsetof(plan_opts, tab)}},
    .epilog =
    "Counts (visible pairs, bytes, model memory) are exact and equal what\n"
    "bench counts; times are estimates from the profile's rates. Fake nodes\n"
    "on one machine: --cores of that machine. --platform FILE: the links\n"
    "between nodes, the cores per node and at most its nodes, as\n"
    "ringattn-sim runs on them (docs/SIMULATION.md). Scores, strategies and\n"
    "layouts: ringattn run --help.\n",
    .globals = CLI_GLOBAL_FILES,
};

/* ---- set-up ---------------------------------------------------------------- */

/* The masks of the problem in natural order: read from --in, or made as
 * bench makes them. */
static ra_status plan_masks(plan_opts *o)
{
    if (!o->w.in)
        return plan_masks_random(&o->w, (uint64_t)o->seed, o->rm.lens,
                                 o->rm.segment_avg, &o->bm);
    const ra_status st = ra_h5_read_masks(MPI_COMM_SELF, o->w.in, &o->src,
                                          &o->w.s, RA_LAYOUT_CONTIGUOUS, NULL,
                                          &o->h5m);
    o->w.mk = (model_masks){o->h5m.q_lens, o->h5m.kv_lens, o->h5m.q_segments,
                            o->h5m.kv_segments};
    return st;
}

/* The options --platform stands for, refused beside it. */
static ra_status plan_platform(const plan_opts *o)
{
    const char *both = o->link_rate > 0      ? "--link-rate"
                       : o->link_latency > 0 ? "--link-latency"
                       : o->w.cores > 0      ? "--cores"
                                             : NULL;
    if (!o->w.platform || !both)
        return RA_OK;
    return ra_error_set(RA_ERR_ARG, "%s: --platform gives the links and "
                        "cores; one or the other", both);
}

/* The options that go together, and the problem's shape. */
static ra_status plan_problem(const cli_ctx *ctx, plan_opts *o)
{
    ra_status st = RA_OK;
    if (o->w.in && (o->rm.lens || o->rm.segment_avg))
        st = ra_error_set(RA_ERR_ARG, "--lens and --segments make random "
                          "masks; with --in the file's masks are used");
    if (st == RA_OK && o->max_seq && (o->tab.json || o->tab.csv ||
                                      o->w.nsweep))
        st = ra_error_set(RA_ERR_ARG, "--max-seq prints its own table; "
                          "--json, --csv and --sweep-nodes go without it");
    if (st == RA_OK && !o->w.in && o->qkv_layout != RA_AXES_NONE)
        st = ra_error_set(RA_ERR_ARG, "--qkv-layout: applies to the datasets "
                          "of --in, and none is given");
    o->src = (ra_h5_source){.axes = o->qkv_layout, .tuning = &ctx->tuning};
    if (st == RA_OK && o->w.in)
        st = ra_h5_read_shape(MPI_COMM_SELF, o->w.in, &o->src, &o->w.s, NULL);
    if (st == RA_OK && !o->w.in)
        o->w.s = o->cs.shape;
    if (st == RA_OK)
        st = cli_params_check(&o->w.p, &o->w.s, NULL);
    if (st == RA_OK && o->w.p.num.score == RA_SCORE_ADDITIVE) {
        o->additive.A = o->additive_hidden;
        o->w.p.num.additive = &o->additive;
    }
    return st;
}

/* The problem, the allocation and the profile; every check before any
 * prediction. Collective (the ranks agree). */
static ra_status plan_setup(const cli_ctx *ctx, plan_opts *o)
{
    perf_plan *w = &o->w;
    ra_status st = plan_problem(ctx, o);
    if (st == RA_OK)
        st = plan_platform(o);
    if (st == RA_OK)
        st = cli_tables_check(&o->tab, o->w.in, w->profile);
    if (st == RA_OK) /* --max-seq times nothing */
        st = plan_fit(w, ctx->nranks, ctx->nodes.nodes, o->link_rate,
                      o->link_latency, !o->max_seq);
    if (st == RA_OK && !o->max_seq)
        st = plan_masks(o);
    return ra_agree(ctx->comm, st);
}

/* ---- the driver ------------------------------------------------------------ */

/* The options into o: 0, or an exit code (--help, a refusal). */
static int plan_parse(const cli_ctx *ctx, plan_opts *o, int argc,
                      char **argv)
{
    cli_shape_default(&o->cs);
    ra_params_default(&o->w.p);
    const int code = cli_parse_or_exit(ctx, &plan_spec, o, argc, argv);
    if (code >= 0)
        return code;
    cli_shape_finish(&o->cs);
    cli_params_finish(&o->w.p);
    if ((int)o->w.p.exec.strategy == CLI_STRATEGY_AUTO ||
        (int)o->w.p.exec.strategy == CLI_STRATEGY_ALL) /* it tries each */
        o->w.p.exec.strategy = ra_call_choice_strategy(&o->w.p);
    o->w.layout_auto = o->w.p.exec.layout == RA_LAYOUT_AUTO;
    o->w.with_io = o->w.in != NULL;
    return -1;
}

/* Rank 0 prints the plan (or --max-seq's table) and writes --json and
 * --csv; every rank returns the same status. */
static ra_status plan_report(const cli_ctx *ctx, const plan_opts *o)
{
    ra_status st = RA_OK;
    if (ctx->rank == 0 && o->max_seq)
        plan_print_max_seq(stdout, &o->w);
    else if (ctx->rank == 0) {
        plan_print(stdout, &o->w);
        st = cli_tables_write(&o->tab, plan_json_write, plan_csv_write,
                              &o->w);
    }
    return ra_agree(ctx->comm, st);
}

int cmd_plan(const cli_ctx *ctx, int argc, char **argv)
{
    plan_opts *o = calloc(1, sizeof *o);
    if (!o)
        return cli_fail(ctx, CLI_EXIT_RUNTIME, "plan: out of memory");
    int code = plan_parse(ctx, o, argc, argv);
    ra_status st = code >= 0 ? RA_OK : plan_setup(ctx, o);
    if (code < 0 && st == RA_OK) {
        if (ctx->rank == 0)
            plan_profile_warning(stderr, o->w.profile, &o->w.pf);
        if (!o->max_seq) /* --max-seq times nothing */
            st = plan_evaluate(&o->w);
        if (st == RA_OK)
            st = plan_report(ctx, o);
    }
    if (code < 0)
        code = st == RA_OK ? CLI_EXIT_OK : cli_fail_status(ctx, st);
    ra_h5_masks_free(&o->h5m);
    bench_masks_free(&o->bm);
    free(o->w.sweeps);
    free(o);
    return code;
}
