/* cmd_plan.c: `ringattn plan`: what a forward pass would cost before it
 * runs. The problem comes from an input file's schema (and its masks) or
 * from gen's shape flags; the allocation from --ranks, --nodes, --threads
 * (or the running mpirun's); the rates from a machine profile. Prints, per
 * strategy, whether it applies, the predicted time in parts, peak memory
 * and bytes per rank, and names the fastest. parse -> validate -> set up
 * -> predict -> report; rank 0 alone prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "agree.h"
#include "h5io.h"
#include "internal.h"
#include "plan.h"
#include "plan_out.h"
#include "profile_json.h"


/* Parses "1,2,4" into o->sweep. */
static int parse_nodes_list(const cli_opt *opt, const char *text, void *base)
{
    plan_opts *o = base;
    const int n = cli_parse_i64_list(opt->name, text, 1, 4096, o->sweep,
                                     PLAN_MAX_SWEEP, "node counts");
    o->nsweep = n > 0 ? n : 0;
    return n > 0 ? 0 : -1;
}

static const cli_opt plan_own[] = {
    CLI_OPT_TEXT(plan_opts, "--in", "FILE", in, NULL,
                 "the problem of an input file (its shapes and masks)"),
    CLI_OPT_QKV_LAYOUT(plan_opts, qkv_layout),
    {.name = "--ranks", .kind = CLI_INT, .meta = "P",
     .offset = CLI_FIELD(plan_opts, ranks, int64_t), .lo = 1, .hi = 1 << 20,
     .shown = "this mpirun's", .help = "ranks of the job"},
    {.name = "--nodes", .kind = CLI_INT, .meta = "K",
     .offset = CLI_FIELD(plan_opts, nodes, int64_t), .lo = 1, .hi = 1 << 16,
     .shown = "this mpirun's or 1", .help = "nodes the ranks run on"},
    {.name = "--cores", .kind = CLI_INT, .meta = "C",
     .offset = CLI_FIELD(plan_opts, cores, int64_t), .lo = 1, .hi = 1 << 24,
     .shown = "machine's x nodes", .help = "cores the ranks share"},
    {.name = "--profile", .kind = CLI_TEXT, .meta = "FILE",
     .offset = CLI_FIELD(plan_opts, profile, const char *),
     .shown = "built-in", .help = "profile of `ringattn probe`"},
    CLI_OPT_POSITIVE(plan_opts, "--link-rate", "BITS", link_rate, 1e15, NULL,
                     "bits/s between nodes, in place of the profile's"),
    CLI_OPT_POSITIVE(plan_opts, "--link-latency", "S", link_latency, 1.0,
                     NULL, "latency between nodes, in place of the profile's"),
    CLI_OPT_TEXT(plan_opts, "--platform", "FILE", platform, NULL,
                 "a SimGrid platform: its nodes, cores, links"),
    CLI_OPT_POSITIVE(plan_opts, "--kernel-rate", "GFLOPS", kernel_rate, 1e9,
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
               {cli_forward_opts, offsetof(plan_opts, p)},
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
static ra_status plan_masks(const plan_opts *o, plan_state *w)
{
    const ra_shape *s = &w->s;
    const ra_slice qall = {1, {{0, s->N, 1}}, s->N};
    const ra_slice kall = {1, {{0, s->M, 1}}, s->M};
    ra_status st = RA_OK;
    if (o->in) {
        st = ra_h5_read_masks(MPI_COMM_SELF, o->in, &w->src, s,
                              RA_LAYOUT_CONTIGUOUS, NULL, &w->h5m);
        w->mk = (model_masks){w->h5m.q_lens, w->h5m.kv_lens,
                              w->h5m.q_segments, w->h5m.kv_segments};
        return st;
    }
    const bench_gen gen = {.seed = (uint64_t)o->seed, .lens = o->rm.lens,
                           .segment_avg = o->rm.segment_avg};
    st = bench_masks_make(&gen, s, &qall, &kall, &w->bm);
    w->mk = (model_masks){w->bm.q_lens, w->bm.kv_lens, w->bm.q_seg,
                          w->bm.kv_seg};
    return st;
}

/* The allocation at K nodes of P ranks (fake nodes share --cores). */
static model_alloc plan_alloc(const plan_opts *o, const plan_state *w,
                              int64_t P, int64_t K)
{
    const long nproc = w->pl.nodes > 0 ? w->pl.cores
                                        : sysconf(_SC_NPROCESSORS_ONLN);
    const int64_t cores = o->cores > 0 ? o->cores
                                       : K * (nproc > 0 ? nproc : 1);
    const profile_kernel_key key = profile_key_of(&o->p, w->s.D, w->s.Dv);
    const double rate = o->kernel_rate > 0
                            ? o->kernel_rate * 1e9
                            : profile_kernel_rate(&w->pf, &key);
    return (model_alloc){.P = (int)P, .nodes = (int)K, .cores = (int)cores,
                         .core_rate = rate};
}

/* --platform: its cluster read, the options it stands for refused beside
 * it, and by default one rank per node up to its nodes, as ringattn-sim
 * places ranks. Before the job's nodes are defaulted. */
static ra_status plan_platform(plan_opts *o, plan_state *w)
{
    char why[512];
    const char *both = o->link_rate > 0      ? "--link-rate"
                       : o->link_latency > 0 ? "--link-latency"
                       : o->cores > 0        ? "--cores"
                                             : NULL;
    if (!o->platform)
        return RA_OK;
    if (both)
        return ra_error_set(RA_ERR_ARG, "%s: --platform gives the links and "
                            "cores; one or the other", both);
    if (platform_read(o->platform, &w->pl, why, sizeof why) != 0)
        return ra_error_set(RA_ERR_INPUT, "%s", why);
    const ra_platform *pl = &w->pl;
    if (o->nodes == 0)
        o->nodes = o->ranks < pl->nodes ? o->ranks : pl->nodes;
    int64_t most = o->nodes;
    for (int i = 0; i < o->nsweep; i++)
        most = o->sweep[i] > most ? o->sweep[i] : most;
    if (most > pl->nodes)
        return ra_error_set(RA_ERR_ARG, "--platform %s: %lld nodes asked for "
                            "and the platform has %d", o->platform,
                            (long long)most, pl->nodes);
    if (o->ranks > o->nodes * pl->cores)
        return ra_error_set(RA_ERR_ARG, "--ranks: %lld ranks on %lld nodes "
                            "of %d cores (--platform %s)", (long long)o->ranks,
                            (long long)o->nodes, pl->cores, o->platform);
    return RA_OK;
}

/* The link between nodes: the platform's, or --link-rate and
 * --link-latency in place of the profile's; the collectives between nodes
 * then share that link (their measured rates are another machine's). */
static void plan_links(const plan_opts *o, plan_state *w)
{
    if (w->pl.nodes > 0)
        platform_link(&w->pl, &w->pf);
    if (o->link_rate > 0)
        w->pf.inter.bandwidth = o->link_rate / 8.0;
    if (o->link_latency > 0)
        w->pf.inter.latency = o->link_latency;
    if (w->pl.nodes > 0 || o->link_rate > 0) {
        w->pf.alltoall_inter = w->pf.allgather_inter = 0;
        w->pf.reduce_scatter_inter = 0;
    }
}

/* Whether the profile can time every allocation the plan predicts: the
 * job's and each of --sweep-nodes (--max-seq times nothing). */
static ra_status plan_profile_fits(const plan_opts *o, const plan_state *w)
{
    const int64_t per = o->ranks / o->nodes > 0 ? o->ranks / o->nodes : 1;
    ra_status st = RA_OK;
    for (int i = -1; i < o->nsweep && st == RA_OK && !o->max_seq; i++) {
        const int64_t K = i < 0 ? o->nodes : o->sweep[i];
        const model_alloc al = plan_alloc(o, w, i < 0 ? o->ranks : K * per,
                                          K);
        const profile_kernel_key key = profile_key_of(&o->p, w->s.D,
                                                      w->s.Dv);
        st = model_profile_check(o->profile, &w->pf, &al, &key,
                                 o->in != NULL);
    }
    return st;
}

/* The problem, the allocation and the profile; every check before any
 * prediction. Collective (the ranks agree). */
static ra_status plan_setup(const cli_ctx *ctx, plan_opts *o, plan_state *w)
{
    ra_status st = RA_OK;
    if (o->in && (o->rm.lens || o->rm.segment_avg))
        st = ra_error_set(RA_ERR_ARG, "--lens and --segments make random "
                          "masks; with --in the file's masks are used");
    if (st == RA_OK && o->max_seq && (o->tab.json || o->tab.csv || o->nsweep))
        st = ra_error_set(RA_ERR_ARG, "--max-seq prints its own table; "
                          "--json, --csv and --sweep-nodes go without it");
    if (st == RA_OK && !o->in && o->qkv_layout != RA_AXES_NONE)
        st = ra_error_set(RA_ERR_ARG, "--qkv-layout: applies to the datasets "
                          "of --in, and none is given");
    w->src = (ra_h5_source){.axes = o->qkv_layout, .tuning = &ctx->tuning};
    if (st == RA_OK && o->in)
        st = ra_h5_read_shape(MPI_COMM_SELF, o->in, &w->src, &w->s, NULL);
    if (st == RA_OK && !o->in)
        w->s = o->cs.shape;
    if (st == RA_OK)
        st = cli_params_check(&o->p, &w->s, NULL);
    if (st == RA_OK && o->p.num.score == RA_SCORE_ADDITIVE) {
        w->additive.A = o->additive_hidden;
        o->p.num.additive = &w->additive;
    }
    if (st == RA_OK && o->ranks == 0)
        o->ranks = ctx->nranks;
    if (st == RA_OK)
        st = plan_platform(o, w);
    if (st == RA_OK && o->nodes == 0)
        o->nodes = o->ranks == ctx->nranks ? ctx->nodes.nodes : 1;
    if (st == RA_OK && o->nodes > o->ranks)
        st = ra_error_set(RA_ERR_ARG, "--nodes: %lld nodes for %lld ranks "
                          "(at least one rank per node)",
                          (long long)o->nodes, (long long)o->ranks);
    if (st == RA_OK)
        st = h5io_paths_check((const h5io_named_path[]){
            {"--in", o->in, 0}, {"--profile", o->profile, 0},
            {"--json", o->tab.json, 1}, {"--csv", o->tab.csv, 1},
            {NULL, NULL, 0}});
    if (st == RA_OK && o->tab.json)
        st = h5io_output_check(o->tab.json, 1, (const char *const[]){o->in,
                                                               NULL});
    if (st == RA_OK && o->tab.csv)
        st = h5io_output_check(o->tab.csv, 1, (const char *const[]){o->in,
                                                              NULL});
    if (st == RA_OK)
        st = profile_load(o->profile, &w->pf);
    if (st == RA_OK)
        plan_links(o, w);
    if (st == RA_OK)
        st = plan_profile_fits(o, w);
    if (st == RA_OK && o->max_seq == 0)
        st = plan_masks(o, w);
    return ra_agree(ctx->comm, st);
}

/* ---- the driver ------------------------------------------------------------ */

static ra_status plan_parse(const cli_ctx *ctx, plan_opts *o, int argc,
                            char **argv, int *code)
{
    cli_shape_default(&o->cs);
    cli_params_default(&o->p);
    *code = cli_parse_or_exit(ctx, &plan_spec, o, argc, argv);
    if (*code >= 0)
        return RA_ERR_ARG;
    cli_shape_finish(&o->cs);
    if (cli_params_finish(&o->p) != RA_OK)
        return RA_ERR_ARG;
    if ((int)o->p.exec.strategy == CLI_STRATEGY_AUTO ||
        (int)o->p.exec.strategy == CLI_STRATEGY_ALL)
        o->p.exec.strategy = RA_STRATEGY_RING; /* the plan tries every one */
    return RA_OK;
}

int cmd_plan(const cli_ctx *ctx, int argc, char **argv)
{
    plan_opts o = {0};
    plan_state *w = calloc(1, sizeof *w);
    int code = -1;
    if (!w)
        return cli_fail(ctx, CLI_EXIT_RUNTIME, "plan: out of memory");
    ra_status st = plan_parse(ctx, &o, argc, argv, &code);
    if (code >= 0)
        goto done;
    if (st != RA_OK) {
        code = cli_fail_status(ctx, st);
        goto done;
    }
    w->layout_auto = o.p.exec.layout == RA_LAYOUT_AUTO;
    st = plan_setup(ctx, &o, w);
    if (st == RA_OK) {
        plan_profile_warn(ctx, o.profile, &w->pf);
        const double t0 = MPI_Wtime();
        const model_alloc al = plan_alloc(&o, w, o.ranks, o.nodes);
        if (o.max_seq)
            st = plan_report_max_seq(ctx, &o, w, &al);
        else
            st = model_evaluate(&w->s, &o.p, w->layout_auto, &w->mk, &al,
                                &w->pf, o.in != NULL, &w->table);
        w->seconds = MPI_Wtime() - t0;
        if (st == RA_OK && !o.max_seq && o.nsweep > 0)
            st = plan_sweep(&o, w);
        if (st == RA_OK && !o.max_seq)
            st = plan_report(ctx, &o, w);
    }
    code = st == RA_OK ? CLI_EXIT_OK : cli_fail_status(ctx, st);
done:
    ra_h5_masks_free(&w->h5m);
    bench_masks_free(&w->bm);
    free(w->sweep);
    free(w);
    return code;
}

/* The predicted scaling: at each node count, strong (the same problem)
 * and weak (N and M grown with the nodes from the first count). */
ra_status plan_sweep(const plan_opts *o, plan_state *w)
{
    const int64_t per = o->ranks / o->nodes > 0 ? o->ranks / o->nodes : 1;
    w->sweep = calloc((size_t)(2 * o->nsweep), sizeof(model_table));
    if (!w->sweep)
        return ra_error_set(RA_ERR_NOMEM, "plan: out of memory");
    for (int i = 0; i < 2 * o->nsweep; i++) {
        const int64_t K = o->sweep[i / 2], K0 = o->sweep[0];
        const int weak = i % 2;
        ra_shape s = w->s;
        if (weak) {
            s.N = s.N * K / K0;
            s.M = s.M * K / K0;
        }
        const model_alloc al = plan_alloc(o, w, K * per, K);
        const model_masks *mk = weak ? NULL : &w->mk;
        const ra_status st = model_evaluate(&s, &o->p, w->layout_auto, mk,
                                            &al, &w->pf, o->in != NULL,
                                            &w->sweep[i]);
        if (st != RA_OK)
            return st;
    }
    return RA_OK;
}
