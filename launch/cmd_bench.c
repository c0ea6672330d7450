/* cmd_bench.c: `ringattn bench`: the forward pass on in-memory random
 * inputs, measured honestly: warm-up passes, barriers before each timed
 * pass, per-rank min/avg/max, the same processes' large-sgemm rate and
 * oneDNN matmul peak as the yardsticks, a comm-only ring for bandwidth,
 * peak RSS, and a sampled fp64 check of every configuration's output.
 * Rank 0 alone prints. parse -> validate -> set up -> measure -> report;
 * comm/perf/bench_run.c measures each configuration into its row. */
#include <stdio.h>
#include <stdlib.h>

#include "agree.h"
#include "bench.h"
#include "call.h"
#include "gemm_env.h"
#include "placement.h"
#include "plan.h"
#include "simd.h"

/* ---- options ------------------------------------------------------------ */

/* Parses "1024,2048,4096" into o->seqs: no empty item, none after a
 * trailing comma, at least one. */
static int parse_seq_list(const cli_opt *opt, const char *text, void *base)
{
    bench_opts *o = base;
    const int n = cli_parse_i64_list(opt->name, text, 1, (int64_t)1 << 40,
                                     o->seqs, MAX_SEQS, "lengths");
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
    o->ring = o->mode != 1;
    o->naive = o->mode != 0;
    return r < 0 ? -1 : 0;
}

/* ---- one configuration ---------------------------------------------------- */

/* The place of the ranks, as a row states it. */
bench_place bench_place_of(const cli_ctx *ctx)
{
    return (bench_place){ctx->nodes.nodes, ctx->nodes.ranks_per_node_max,
                         ctx->node_aware};
}

/* Measures one configuration (comm/perf/bench_run.c) on tensors of this
 * rank, and the plain one beside into *plain (NULL: none); the ranks
 * agree, but on a stalled ring, which ends the job. */
static ra_status run_config(const cli_ctx *ctx, const bench_opts *o,
                            const ra_shape *s, int naive,
                            const bench_yard *yard, bench_result *res,
                            bench_result *plain)
{
    cli_tensors t;
    ra_status st = ra_agree(ctx->comm, cli_tensors_alloc(&t, s, &o->p, ctx));
    const bench_config c = {
        s, {&o->p, (uint64_t)o->seed, o->rm.lens, o->rm.segment_avg,
            o->check_rows}, o->warmup, o->reps, naive, 0, o->no_yardsticks,
        yard, bench_place_of(ctx), plain};
    const bench_operands x = {t.qs, t.ks, t.q, t.k, t.v, t.o, t.lse};
    if (st == RA_OK && (st = bench_config_run(ctx->comm, &c, &x, res)) ==
                       RA_ERR_MPI)
        cli_abort(ctx, ra_error_message()); /* a stalled ring: the others
                                               wait for a stopped rank */
    cli_tensors_free(&t);
    return st;
}

/* The echo's line of the score features and sinks. */
static void print_logits(const bench_opts *o)
{
    printf("# %-12s", "logits");
    for (int i = 0; i < ra_score_feature_count; i++)
        printf(" %s %g,", ra_score_features[i].name,
               ra_feature_get(&o->p.num, i));
    printf(" sinks %s; a plain pass beside each\n",
           o->sinks ? "unit-normal" : "none");
}

/* ---- the driver ------------------------------------------------------------ */

static void print_echo(const cli_ctx *ctx, const bench_opts *o,
                       const bench_yard *yard)
{
    const ra_shape *s = &o->cs.shape;
    printf("# ringattn bench %s\n", RA_VERSION_STRING);
    printf("# %-12s %d\n", "ranks", ctx->nranks);
    cli_print_job(ctx, 12);
    printf("# %-12s %d per rank\n", "threads", ra_params_threads(&o->p));
    printf("# %-12s B=%lld H=%lld G=%lld D=%lld Dv=%lld M=%s\n", "shape",
           (long long)s->B, (long long)s->H, (long long)s->G, (long long)s->D,
           (long long)s->Dv, o->cs.seq_kv_set ? "fixed" : "N");
    printf("# %-12s", "seq");
    for (int i = 0; i < o->nseq; i++)
        printf(" %lld", (long long)o->seqs[i]);
    printf("\n# %-12s %s\n", "causal",
           o->p.num.causal ? "yes (GFLOP/s count the "
                             "visible half only)"
                           : "no");
    if (o->p.num.window)
        printf("# %-12s left %lld, right %lld\n", "window",
               (long long)o->p.num.window_left,
               (long long)o->p.num.window_right);
    if (o->rm.lens || o->rm.segment_avg)
        printf("# %-12s%s%s\n", "masks", o->rm.lens ? " random lens" : "",
               o->rm.segment_avg ? " random segments" : "");
    if (o->rm.segment_avg)
        printf("# %-12s mean length %lld\n", "segments",
               (long long)o->rm.segment_avg);
    if (ra_features_on(&o->p.num) || o->sinks)
        print_logits(o);
    printf("# %-12s %s%s\n", "layout", ra_layout_name(o->p.exec.layout),
           o->layout_auto ? " (auto)" : "");
    printf("# %-12s %s\n", "strategy",
           o->all_strategies  ? "all (a row for each that applies)"
           : o->auto_strategy ? "auto (the plan's pick per length)"
                              : ra_strategy_name(o->p.exec.strategy));
    for (int i = 0; o->auto_strategy && i < o->nseq; i++) {
        printf("# %-12s %s, chosen by the plan for N=%lld\n", "auto",
               ra_strategy_name((ra_strategy)o->picked[i]),
               (long long)o->seqs[i]);
        if (o->predicted[i] > 0) /* 0: no prediction, the ring ran */
            printf("# %-12s %.4f s, %s\n", "predicted", o->predicted[i],
                   o->profile ? o->profile : "built-in profile, not probed");
    }
    printf("# %-12s %s%s\n", "mode",
           o->ring && o->naive ? "ring and naive" : o->ring ? "ring" : "naive",
           o->p.no_poll ? " (no polling)" : "");
    printf("# %-12s %lld warm-up, %lld timed (median)\n", "passes",
           (long long)o->warmup, (long long)o->reps);
    printf("# %-12s %s\n", "exp", ra_exp2_impl());
    printf("# %-12s %s\n", "gemm", ra_gemm_name(ra_gemm_pick(o->p.exec.gemm)));
    printf("# %-12s %s, K/V as %s between ranks\n", "precision",
           ra_precision_name(o->p.num.precision),
           ra_params_wire_bf16(&o->p) ? "bf16" : "fp32");
    bench_print_yard(stdout, yard);
    printf("# %-12s %s\n", "command", ctx->command_line);
    fflush(stdout);
}

/* The shape of configuration i. */
static ra_shape config_shape(const bench_opts *o, int i)
{
    ra_shape s = o->cs.shape;
    s.N = o->seqs[i];
    if (!o->cs.seq_kv_set)
        s.M = s.N;
    return s;
}

/* What --mode naive/both cannot run (issue 39, class 20): the
 * materialising baseline (comm/perf/baseline.c) computes the dot score in
 * fp32 on the contiguous layout, causal at most; any other option is
 * refused by name, never run in fp32 and reported as applied. */
static ra_status naive_check(const bench_opts *o)
{
    const ra_params *p = &o->p;
    const ra_score_feature *f = ra_features_first(&p->num);
    const char *opt = p->exec.layout != RA_LAYOUT_CONTIGUOUS  ? "--layout"
                      : p->num.window                         ? "--window"
                      : o->rm.lens                            ? "--lens"
                      : o->rm.segment_avg                     ? "--segments"
                      : p->num.score != RA_SCORE_DOT          ? "--score"
                      : p->num.precision != RA_PRECISION_FP32 ? "--precision"
                      : p->exec.wire == RA_WIRE_BF16          ? "--wire"
                      : p->num.rope != RA_ROPE_NONE           ? "--rope"
                      : p->num.alibi                          ? "--alibi"
                      : f                                     ? f->option
                      : o->sinks                              ? "--sinks"
                                                              : NULL;
    if (!opt)
        return RA_OK;
    return ra_error_set(RA_ERR_ARG, "%s: --mode naive/both runs the "
                        "materialising baseline, which takes the contiguous "
                        "layout, the dot score in fp32 and causal masks "
                        "only (use --mode ring)", opt);
}

/* Every check before the work: the modes, every shape, the output files
 * (replaced when they exist, as before); the ranks agree. */
static ra_status bench_validate(const cli_ctx *ctx, bench_opts *o)
{
    o->layout_auto = o->p.exec.layout == RA_LAYOUT_AUTO;
    o->p.exec.layout = o->naive && o->layout_auto /* the baseline's own */
                           ? RA_LAYOUT_CONTIGUOUS
                           : ra_params_layout(&o->p, o->rm.segment_avg > 0);
    ra_status st = o->naive ? naive_check(o) : RA_OK;
    for (int i = 0; i < o->nseq && st == RA_OK; i++) {
        const ra_shape s = config_shape(o, i);
        st = cli_params_check(&o->p, &s, NULL);
        if (st == RA_OK)
            st = cli_ulysses_check(&o->p, &s, ctx->nranks);
        /* before the yardsticks and every config: the tensors fit the
         * limit and the address space (allocated untouched, then freed) */
        cli_tensors t;
        if (st == RA_OK && (st = cli_tensors_alloc(&t, &s, &o->p, ctx)) == RA_OK)
            cli_tensors_free(&t);
    }
    if (st == RA_OK)
        st = ctx->rank == 0 ? cli_tables_check(&o->tab, NULL, o->profile)
                            : RA_OK;
    st = ra_agree(ctx->comm, st);
    for (int i = 0; i < o->nseq && st == RA_OK && !o->all_strategies; i++) {
        const ra_shape s = config_shape(o, i); /* collective */
        ra_params p = o->p;
        model_result pick;
        if (o->auto_strategy &&
            (st = plan_pick(ctx, &s, &p, NULL, o->profile, &pick)) == RA_OK) {
            o->picked[i] = (int)pick.strategy;
            o->predicted[i] = pick.t_total;
        }
        if (st == RA_OK)
            st = ra_call_strategy_check(ctx->comm, &s, &p,
                                        o->rm.segment_avg > 0);
    }
    return st;
}

/* With score features or sinks, the rate of the same configuration
 * without them (bench_config.plain) beside the row's. */
static void print_plain(const bench_opts *one, const bench_result *with,
                        const bench_result *plain)
{
    const ra_score_feature *f = ra_features_first(&one->p.num);
    if (f || one->p.num.sinks)
        printf("# plain: %s N=%lld %.1f GFLOP/s; with %s%s %.1f GFLOP/s "
               "(%.2f of plain)%s\n",
               with->mode, (long long)with->s.N, plain->gflops,
               f ? f->name : "", one->p.num.sinks ? " sinks" : "",
               with->gflops, with->gflops / plain->gflops,
               plain->pass ? "" : ", plain FAIL");
}

/* The additive score's random weights and --sinks's random sinks
 * (comm/perf/bench_additive.c). */
static ra_status bench_setup(const cli_ctx *ctx, bench_opts *o)
{
    ra_status st = o->sinks ? bench_sinks_make(ctx->comm, (uint64_t)o->seed,
                                               o->cs.shape.H, &o->sinks_mem)
                            : RA_OK;
    o->p.num.sinks = o->sinks_mem;
    if (st != RA_OK || o->p.num.score != RA_SCORE_ADDITIVE)
        return st;
    st = bench_additive_make(ctx->comm, (uint64_t)o->seed, o->additive_hidden,
                             o->cs.shape.D, &o->additive_mem, &o->additive);
    o->p.num.additive = &o->additive;
    return st;
}

/* Measures every configuration; rank 0 prints the rows as they come. */
static ra_status bench_measure(const cli_ctx *ctx, const bench_opts *o,
                               bench_result *rows, int *nrows)
{
    bench_yard yard;
    /* the peak in the kernels' precision */
    bench_yardsticks(ctx->comm, ra_params_threads(&o->p),
                     o->p.num.precision == RA_PRECISION_BF16, o->no_yardsticks,
                     &yard);
    if (ctx->rank == 0) {
        print_echo(ctx, o, &yard);
        bench_print_header(stdout);
    }
    ra_status st = RA_OK;
    for (int i = 0; i < o->nseq && st == RA_OK; i++) {
        const ra_shape s = config_shape(o, i);
        for (int k = 0; k <= RA_STRATEGY_COUNT && st == RA_OK; k++) {
            const int naive = k == RA_STRATEGY_COUNT;
            bench_opts one = *o;
            if (!naive && o->all_strategies)
                model_use_strategy(&one.p, (ra_strategy)k);
            if (!naive && o->auto_strategy)
                model_use_strategy(&one.p, (ra_strategy)o->picked[i]);
            if (!(naive ? o->naive : o->ring) ||
                (!naive && (o->all_strategies ? !bench_strategy_applies(
                                &one.p, &s, ctx->nranks) : k > 0)))
                continue;
            bench_result plain;
            st = run_config(ctx, &one, &s, naive, &yard, &rows[*nrows],
                            naive ? NULL : &plain);
            if (st == RA_OK && ctx->rank == 0)
                bench_print_row(stdout, &rows[*nrows]);
            if (st == RA_OK && ctx->rank == 0 && !naive)
                print_plain(&one, &rows[*nrows], &plain);
            if (st == RA_OK && ctx->rank == 0 && !naive && o->auto_strategy &&
                o->predicted[i] > 0)
                printf("# plan: %s predicted %.4f s, measured %.4f s "
                       "(measured/predicted %.2f)\n", rows[*nrows].mode,
                       o->predicted[i], rows[*nrows].seconds_median,
                       rows[*nrows].seconds_median / o->predicted[i]);
            *nrows += st == RA_OK;
        }
    }
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
    int help = 0, nrows = 0, pass = 0;
    cli_shape_default(&o.cs);
    ra_params_default(&o.p);
    if (parse_bench(&o, argc, argv, &help) != 0)
        return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
    if (help) {
        if (ctx->rank == 0)
            cli_help(&bench_spec, stdout);
        return CLI_EXIT_OK;
    }
    cli_shape_finish(&o.cs);
    cli_params_finish(&o.p);
    if ((int)o.p.exec.strategy == CLI_STRATEGY_ALL ||
        (int)o.p.exec.strategy == CLI_STRATEGY_AUTO) {
        o.all_strategies = (int)o.p.exec.strategy == CLI_STRATEGY_ALL;
        o.auto_strategy = !o.all_strategies;
        o.p.exec.strategy = cli_choice_checked_as(&o.p);
    }
    bench_result *rows = calloc((size_t)((1 + RA_STRATEGY_COUNT) * o.nseq),
                                sizeof *rows);
    ra_status st = ra_agree(ctx->comm, rows ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "bench: out of "
                                                         "memory"));
    if (st == RA_OK)
        st = bench_validate(ctx, &o);
    if (st == RA_OK) {
        cli_placement_warn(ctx, ra_params_threads(&o.p));
        st = bench_setup(ctx, &o);
    }
    if (st == RA_OK)
        st = bench_measure(ctx, &o, rows, &nrows);
    if (st == RA_OK) { /* with the results: what they are worth */
        cli_oversubscribed_warn(ctx, ra_params_threads(&o.p), "times are "
                                "shares of a core, not this machine's speed");
        st = bench_report(ctx, &o, rows, nrows, &pass);
    }
    free(rows);
    free(o.additive_mem);
    free(o.sinks_mem);
    if (st != RA_OK)
        return cli_fail_status(ctx, st);
    return pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}
