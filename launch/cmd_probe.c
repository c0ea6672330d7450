/* cmd_probe.c: `ringattn probe`: measure the machine profile the
 * performance model predicts from (comm/perf/profile.h), print it as a table and
 * write it as JSON. parse -> validate -> measure -> report; `--show FILE`
 * reads a profile back instead of measuring. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agree.h"
#include "bench_measure.h"
#include "cli.h"
#include "gemm_env.h"
#include "h5io.h"
#include "h5probe.h"
#include "internal.h"
#include "placement.h"
#include "probe.h"
#include "profile_json.h"
#include "profile_write.h"

enum {
    PROBE_IO_ROWS = 4096, /* query rows per rank of the I/O probe (16 MiB) */
    PROBE_COMM_ITEMS = 10, /* two links, six collectives, the I/O, the
                              fixed costs */
    PROBE_ENGINES = 2,     /* openblas, onednn */
};

typedef struct {
    const char *out, *dir, *dims, *scores, *gemms, *precisions, *show;
    double seconds;
    int force;
} probe_opts;

static const cli_opt probe_own[] = {
    CLI_OPT_TEXT(probe_opts, "--out", "FILE", out, NULL,
                 "write the profile as JSON to FILE"),
    CLI_OPT_FLAG(probe_opts, "--force", force,
                 "replace an existing --out file"),
    CLI_OPT_TEXT(probe_opts, "--dir", "DIR", dir, ".",
                 "directory whose parallel HDF5 rates are measured"),
    CLI_OPT_TEXT(probe_opts, "--dim", "LIST", dims, "64,128",
                 "head dims (D = Dv) whose kernel rates are measured"),
    CLI_OPT_TEXT(probe_opts, "--score", "LIST", scores, "dot",
                 "scores whose kernel rates are measured"),
    CLI_OPT_TEXT(probe_opts, "--gemm", "LIST", gemms, "auto",
                 "tile engines measured (auto: this build's)"),
    CLI_OPT_TEXT(probe_opts, "--precision", "LIST", precisions, "fp32,bf16",
                 "precisions of the tile products measured (fp32, bf16)"),
    CLI_OPT_POSITIVE(probe_opts, "--seconds", "S", seconds, 3600, "8",
                     "about how long the measurements take in all"),
    CLI_OPT_TEXT(probe_opts, "--show", "FILE", show, NULL,
                 "measure nothing: print (and write to --out) FILE"),
    {0},
};

static const cli_spec probe_spec = {
    .name = "probe",
    .usage =
    "usage: mpirun -np P ringattn probe [--out profile.json] [options]\n"
    "\n"
    "Measures what the performance model needs, on the allocation a run\n"
    "will use (launch it as the run will be launched): the tiled forward\n"
    "kernel's FLOP/s per core for the head dims, scores, tile engines and\n"
    "precisions given, on full, masked (causal) and band (window) tiles,\n"
    "the fixed\n"
    "costs of a call and of a ring step, the\n"
    "latency and bandwidth of ring steps within a node and between nodes,\n"
    "all-to-all and all-gather rates, parallel HDF5 write and read rates of\n"
    "--dir, and the memory of a node. Rank 0 prints a table and writes the\n"
    "profile (with host names, date and versions) as JSON.\n",
    .groups = {{probe_own, 0}},
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

/* The engines of --gemm into g (auto: RINGATTN_GEMM's, else this
 * build's), each once and available; returns how many, or -1 with a
 * message. */
static int engines_parse(const probe_opts *o, ra_gemm g[PROBE_ENGINES])
{
    char buf[256];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", o->gemms);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        ra_gemm e;
        if (ra_gemm_parse(t, &e) != RA_OK || !ra_gemm_available(e)) {
            ra_error_set(RA_ERR_ARG, "--gemm: '%s' is not a list of engines "
                         "this build has (auto, openblas%s)", o->gemms,
                         ra_gemm_available(RA_GEMM_ONEDNN) ? ", onednn" : "");
            return -1;
        }
        if (e == RA_GEMM_AUTO && ra_gemm_env(&e) != RA_OK)
            return -1; /* RINGATTN_GEMM names no engine of this build */
        int seen = 0;
        for (int i = 0; i < n; i++)
            seen |= g[i] == e;
        if (!seen)
            g[n++] = e;
    }
    if (n == 0)
        ra_error_set(RA_ERR_ARG, "--gemm: '%s' names no engine (give auto, "
                     "openblas%s)", o->gemms,
                     ra_gemm_available(RA_GEMM_ONEDNN) ? ", onednn" : "");
    return n > 0 ? n : -1;
}

/* The scores of --score into scores; how many, or -1 with a message. */
static int scores_parse(const probe_opts *o, ra_score scores[3])
{
    char buf[256];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", o->scores);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (n == 3 || ra_score_parse(t, &scores[n]) != RA_OK) {
            ra_error_set(RA_ERR_ARG, "--score: '%s' is not a list of dot, "
                         "gaussian, additive", o->scores);
            return -1;
        }
        n++;
    }
    if (n == 0)
        ra_error_set(RA_ERR_ARG, "--score: '%s' names no score (give dot, "
                     "gaussian, additive or a list)", o->scores);
    return n > 0 ? n : -1;
}

/* The precisions of --precision into pr, each once; how many, or -1 with
 * a message. */
static int precisions_parse(const probe_opts *o, ra_precision pr[2])
{
    char buf[256];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", o->precisions);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        ra_precision e;
        if (ra_precision_parse(t, &e) != RA_OK) {
            ra_error_set(RA_ERR_ARG, "--precision: '%s' is not a list of "
                         "fp32, bf16", o->precisions);
            return -1;
        }
        if (n == 0 || (n == 1 && pr[0] != e)) /* each once: at most 2 */
            pr[n++] = e;
    }
    if (n == 0)
        ra_error_set(RA_ERR_ARG, "--precision: '%s' names no precision "
                     "(give fp32, bf16 or both)", o->precisions);
    return n > 0 ? n : -1;
}

/* Whether rates_parse found a rate to measure; else the option at fault:
 * --dim naming no dim, or --precision without fp32 for scores that are
 * all additive (measured in fp32 only). */
static ra_status rates_any(const probe_opts *o, const ra_profile *p)
{
    if (p->nrates > 0)
        return RA_OK;
    if (strspn(o->dims, ", ") == strlen(o->dims))
        return ra_error_set(RA_ERR_ARG, "--dim: '%s' names no head dim",
                            o->dims);
    return ra_error_set(RA_ERR_ARG, "--precision: %s alone measures nothing "
                        "for --score %s: the additive score is measured in "
                        "fp32 only (its scores are not tile products); add "
                        "fp32", o->precisions, o->scores);
}

/* The asked kernel rates: every dim with every score, engine, precision
 * and tile class (the additive score in fp32 only: its scores are not tile
 * products, and bf16 does not change them). */
static ra_status rates_parse(const probe_opts *o, ra_profile *p)
{
    char buf[256];
    ra_score scores[3];
    ra_gemm engines[PROBE_ENGINES];
    ra_precision prec[2];
    const int nscores = scores_parse(o, scores);
    const int nengines = nscores < 0 ? -1 : engines_parse(o, engines);
    const int nprec = nengines < 0 ? -1 : precisions_parse(o, prec);
    if (nprec < 0)
        return RA_ERR_ARG;
    snprintf(buf, sizeof buf, "%s", o->dims);
    p->nrates = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int64_t D;
        if (cli_parse_i64("--dim", t, 1, 1024, &D) != 0)
            return RA_ERR_ARG;
        const int per = nengines * nprec * PROFILE_CLASSES;
        for (int i = 0; i < nscores * per; i++) {
            const ra_score sc = scores[i / per];
            const ra_precision pr = prec[i / PROFILE_CLASSES % nprec];
            if (sc == RA_SCORE_ADDITIVE && pr != RA_PRECISION_FP32)
                continue;
            if (p->nrates == PROFILE_MAX_RATES)
                return ra_error_set(RA_ERR_ARG, "--dim, --score, --gemm, "
                                    "--precision: at most %d kernel rates "
                                    "(%d tile classes each)",
                                    PROFILE_MAX_RATES, PROFILE_CLASSES);
            profile_rate *r = &p->rate[p->nrates++];
            *r = (profile_rate){
                D, D, sc, engines[i / (nprec * PROFILE_CLASSES) % nengines],
                "", (profile_class)(i % PROFILE_CLASSES), 0.0};
            snprintf(r->precision, sizeof r->precision, "%s",
                     ra_precision_name(pr));
        }
    }
    return rates_any(o, p);
}

/* The options and the paths, agreed over the ranks. */
static ra_status probe_validate(const cli_ctx *ctx, const probe_opts *o,
                                ra_profile *p)
{
    char scratch[4200];
    ra_status st = rates_parse(o, p);
    if (st == RA_OK && strlen(o->dir) + 32 > sizeof scratch)
        st = ra_error_set(RA_ERR_ARG, "--dir: the path is too long");
    st = ra_agree(ctx->comm, st);
    if (st == RA_OK && o->out)
        st = cli_output_agree(ctx, o->out, o->force, NULL);
    snprintf(scratch, sizeof scratch, "%s/ringattn-probe.h5", o->dir);
    if (st == RA_OK) /* the directory can hold a file of ours */
        st = cli_output_agree(ctx, scratch, 1, NULL);
    return st;
}

/* Every measurement, in the order the table shows them. */
static ra_status probe_measure(const cli_ctx *ctx, const probe_opts *o,
                               ra_profile *p)
{
    probe_comms c;
    const double t0 = MPI_Wtime();
    const double share = o->seconds / (p->nrates + PROBE_COMM_ITEMS);
    ra_status st = probe_comms_make(ctx->comm, &ctx->nodes, share, &c);
    if (st != RA_OK)
        return st;
    probe_machine(&c, p);
    p->oversubscribed = cli_oversubscribed_warn(
        ctx, p->threads, "every rate measured is a share of a core; the "
        "profile records it and plan warns when it uses it");
    for (int i = 0; i < p->nrates; i++)
        p->rate[i].flops_per_core = probe_kernel(&c, &p->rate[i]);
    probe_fixed(&c, &p->call_seconds, &p->step_seconds);
    probe_links(&c, &p->intra, &p->inter);
    probe_collectives(&c, p);
    probe_comms_free(&c);
    double written, t_write, read, t_read;
    st = h5io_probe_rates(ctx->comm, o->dir, PROBE_IO_ROWS, &ctx->tuning,
                          &written, &t_write, &read, &t_read);
    p->io_write = st == RA_OK && t_write > 0 ? written / t_write : 0;
    p->io_read = st == RA_OK && t_read > 0 ? read / t_read : 0;
    p->measured = 1;
    snprintf(p->io_dir, sizeof p->io_dir, "%s", o->dir);
    cli_version_line(p->version, sizeof p->version);
    const time_t now = time(NULL);
    strftime(p->date, sizeof p->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (st == RA_OK && ctx->rank == 0)
        printf("# measured in %.1f s\n", MPI_Wtime() - t0);
    return st;
}

/* A rate in units of scale, or "-" when not measured. */
static const char *cell(double x, double scale, char *buf)
{
    if (x > 0)
        snprintf(buf, 32, "%.2f", x / scale);
    else
        snprintf(buf, 32, "-");
    return buf;
}

/* Rank 0: the profile as a table. */
static void probe_print(const ra_profile *p)
{
    char a[32], b[32];
    printf("# ringattn probe: %s\n# %d ranks on %d node%s (at most %d per "
           "node), %d thread%s per rank%s; %s\n# %s\n# hosts: %s\n",
           p->measured ? "measured" : "built-in default, not measured",
           p->ranks, p->nodes, p->nodes == 1 ? "" : "s", p->ranks_per_node,
           p->threads, p->threads == 1 ? "" : "s",
           p->oversubscribed ? ", oversubscribed" : "", p->date, p->version,
           p->hosts);
    printf("%-28s %8s %8s\n", "kernel (per core)", "D = Dv", "GFLOP/s");
    for (int i = 0; i < p->nrates; i++) {
        const profile_rate *r = &p->rate[i];
        char what[64];
        snprintf(what, sizeof what, "%s %s %s %s", ra_score_name(r->score),
                 r->gemm == RA_GEMM_AUTO ? "(engine not recorded)"
                                         : ra_gemm_name(r->gemm),
                 r->precision[0] ? r->precision : "fp32",
                 profile_class_name(r->cls));
        printf("  %-26s %8lld %8s\n", what, (long long)r->D,
               cell(r->flops_per_core, 1e9, a));
    }
    printf("%-28s %8s %8s\n", "fixed costs (ms)", "call", "step");
    printf("  %-26s %8s %8s\n", "forward", cell(p->call_seconds, 1e-3, a),
           cell(p->step_seconds, 1e-3, b));
    printf("%-28s %8s %8s\n", "ring step (per rank)", "lat us", "GB/s");
    printf("  %-26s %8s %8s\n", "within a node", cell(p->intra.latency, 1e-6,
           a), cell(p->intra.bandwidth, 1e9, b));
    printf("  %-26s %8s %8s\n", "between nodes", cell(p->inter.latency, 1e-6,
           a), cell(p->inter.bandwidth, 1e9, b));
    printf("%-28s %8s %8s\n", "collectives (GB/s per rank)", "node",
           "across");
    printf("  %-26s %8s %8s\n", "all-to-all (sent)",
           cell(p->alltoall_intra, 1e9, a), cell(p->alltoall_inter, 1e9, b));
    printf("  %-26s %8s %8s\n", "all-gather (received)",
           cell(p->allgather_intra, 1e9, a), cell(p->allgather_inter, 1e9, b));
    printf("  %-26s %8s %8s\n", "reduce-scatter (sent)",
           cell(p->reduce_scatter_intra, 1e9, a),
           cell(p->reduce_scatter_inter, 1e9, b));
    printf("%-28s %8s %8s\n", "parallel HDF5 (GB/s, all)", "write", "read");
    printf("  %-26s %8s %8s\n", p->io_dir, cell(p->io_write, 1e9, a),
           cell(p->io_read, 1e9, b));
    printf("%-28s %8s %8s\n", "memory per node", "",
           cell((double)p->mem_per_node, 1073741824.0, a));
    printf("  (GiB)\n");
}

static int profile_fill(FILE *f, const void *p)
{
    return profile_write_json(f, p);
}

/* Rank 0 writes the profile to path atomically (the earlier file kept on
 * a failure); every rank returns the verdict. */
static ra_status probe_write(const cli_ctx *ctx, const char *path, int force,
                             const ra_profile *p)
{
    ra_status st = RA_OK;
    if (ctx->rank == 0)
        st = h5io_text_write(path, force, profile_fill, p);
    return ra_agree(ctx->comm, st);
}

/* --show: rank 0 reads the profile; every rank agrees on the verdict. */
static ra_status probe_show(const cli_ctx *ctx, const probe_opts *o,
                            ra_profile *p)
{
    char err[512];
    ra_status st = RA_OK;
    if (ctx->rank == 0 && profile_read_json(o->show, p, err, sizeof err) != 0)
        st = ra_error_set(RA_ERR_INPUT, "%s", err);
    st = ra_agree(ctx->comm, st);
    if (st == RA_OK && o->out)
        st = cli_paths_agree(ctx, (const h5io_named_path[]){
            {"--show", o->show, 0}, {"--out", o->out, 1}, {NULL, NULL, 0}});
    if (st == RA_OK && o->out)
        st = cli_output_agree(ctx, o->out, o->force, NULL);
    return st;
}

/* A kernel rate's three yardsticks, FLOP/s per core: the core's
 * physical peak in its precision, oneDNN's 2048^3 matmul, and its own
 * tile products without the softmax (0: not measured). */
typedef struct {
    double core, peak, products;
    char loop_fp32[96], loop_bf16[96]; /* the loops (or why none) */
} probe_yard;

/* The yardsticks of every kernel rate of p, every rank at once, per core
 * (issue 44); the core and oneDNN's once per precision. Collective. */
static void probe_yards(const cli_ctx *ctx, const ra_profile *p,
                        probe_yard *y)
{
    bench_yard by[2];
    const double cores = (double)ctx->nranks * (p->threads > 0 ? p->threads
                                                               : 1);
    for (int bf16 = 0; bf16 < 2; bf16++)
        bench_yardsticks(ctx->comm, p->threads, bf16, 0, &by[bf16]);
    for (int i = 0; i < p->nrates; i++) {
        const profile_rate *r = &p->rate[i];
        const int bf16 = strcmp(r->precision, "bf16") == 0;
        const ra_shape s = {.B = 1, .N = 4096, .M = 4096, .H = 4, .G = 4,
                            .D = r->D, .Dv = r->Dv};
        ra_params q;
        ra_params_default(&q);
        q.num.score = r->score;
        q.num.sigma = 4.0;
        q.exec.gemm = r->gemm;
        q.num.precision = bf16 ? RA_PRECISION_BF16 : RA_PRECISION_FP32;
        y[i].core = by[bf16].core / cores * 1e9; /* FLOP/s, as the rate */
        y[i].peak = by[bf16].peak / cores * 1e9;
        y[i].products = bench_products_rate(ctx->comm, &s, &q, 0, 0) /
                        cores * 1e9;
        snprintf(y[i].loop_fp32, sizeof y[i].loop_fp32, "%s", by[0].loop);
        snprintf(y[i].loop_bf16, sizeof y[i].loop_bf16, "%s", by[1].loop);
    }
}

/* x / of as a cell ("-" when of is not measured). */
static const char *fraction(double x, double of, char *buf)
{
    if (of > 0)
        snprintf(buf, 32, "%.3f", x / of);
    else
        snprintf(buf, 32, "-");
    return buf;
}

/* Rank 0: each kernel rate as a fraction of its three yardsticks. */
static void probe_yards_print(const ra_profile *p, const probe_yard *y)
{
    char v[6][32];
    printf("%-28s %8s %8s %8s %8s %6s %6s %6s\n", "yardsticks (per core)",
           "D = Dv", "core", "peak", "prod", "f_core", "f_peak", "f_prod");
    for (int i = 0; i < p->nrates; i++) {
        const profile_rate *r = &p->rate[i];
        const double k = r->flops_per_core;
        char what[64];
        snprintf(what, sizeof what, "%s %s %s", ra_score_name(r->score),
                 r->precision[0] ? r->precision : "fp32",
                 profile_class_name(r->cls));
        printf("  %-26s %8lld %8s %8s %8s %6s %6s %6s\n", what,
               (long long)r->D,
               cell(y[i].core, 1e9, v[0]), cell(y[i].peak, 1e9, v[1]),
               cell(y[i].products, 1e9, v[2]), fraction(k, y[i].core, v[3]),
               fraction(k, y[i].peak, v[4]),
               fraction(k, y[i].products, v[5]));
    }
    printf("  (core: %s loop for fp32, %s for bf16)\n", y[0].loop_fp32,
           y[0].loop_bf16);
}

int cmd_probe(const cli_ctx *ctx, int argc, char **argv)
{
    probe_opts o = {0};
    int code = cli_parse_or_exit(ctx, &probe_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    ra_profile p;
    memset(&p, 0, sizeof p);
    ra_status st = o.show ? probe_show(ctx, &o, &p)
                          : probe_validate(ctx, &o, &p);
    if (st == RA_OK && !o.show)
        st = probe_measure(ctx, &o, &p);
    probe_yard yard[PROFILE_MAX_RATES];
    const int yards = st == RA_OK && !o.show && p.nrates > 0;
    if (yards)
        probe_yards(ctx, &p, yard);
    if (st == RA_OK && ctx->rank == 0)
        probe_print(&p);
    if (yards && ctx->rank == 0)
        probe_yards_print(&p, yard);
    if (st == RA_OK && o.out)
        st = probe_write(ctx, o.out, o.force, &p);
    if (st == RA_OK && ctx->rank == 0 && o.out)
        printf("ringattn probe: wrote %s\n", o.out);
    return st == RA_OK ? CLI_EXIT_OK : cli_fail_status(ctx, st);
}
