/* cmd_probe.c: `ringattn probe`: measure the machine profile the
 * performance model predicts from (comm/perf/profile.h), print it as a
 * table (comm/perf/probe_text.c) and write it as JSON. parse -> validate
 * (the rates asked, comm/perf/probe_ask.c) -> measure (comm/perf/
 * probe_run.c, and the I/O rates here) -> report; `--show FILE` reads a
 * profile back instead of measuring. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agree.h"
#include "cli.h"
#include "h5probe.h"
#include "placement.h"
#include "probe.h"
#include "profile_json.h"

enum {
    PROBE_IO_ROWS = 4096, /* query rows per rank of the I/O probe (16 MiB) */
    PROBE_MAX_DIMS = 16,
};

typedef struct {
    const char *out, *dir, *scores, *gemms, *precisions, *show;
    int64_t dims[PROBE_MAX_DIMS];
    int ndims;
    double seconds;
    int force;
} probe_opts;

/* Parses "64,128" into o->dims. */
static int parse_dims(const cli_opt *opt, const char *text, void *base)
{
    probe_opts *o = base;
    const int n = cli_parse_i64_list(opt->name, text, 1, 1024, o->dims,
                                     PROBE_MAX_DIMS, "head dims");
    o->ndims = n > 0 ? n : 0;
    return n > 0 ? 0 : -1;
}

static const cli_opt probe_own[] = {
    CLI_OPT_TEXT(probe_opts, "--out", "FILE", out, NULL,
                 "write the profile as JSON to FILE"),
    CLI_OPT_FLAG(probe_opts, "--force", force,
                 "replace an existing --out file"),
    CLI_OPT_TEXT(probe_opts, "--dir", "DIR", dir, ".",
                 "directory whose parallel HDF5 rates are measured"),
    {.name = "--dim", .kind = CLI_CUSTOM, .meta = "LIST", .fn = parse_dims,
     .def = "64,128",
     .help = "head dims (D = Dv) whose kernel rates are measured"},
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

/* The options and the paths, agreed over the ranks. */
static ra_status probe_validate(const cli_ctx *ctx, const probe_opts *o,
                                ra_profile *p)
{
    char scratch[4200];
    ra_status st = probe_rates_parse(p, o->dims, o->ndims, o->scores,
                                     o->gemms, o->precisions);
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

/* Every measurement, in the order the table shows them: comm/perf/'s,
 * then the parallel HDF5 rates of --dir. */
static ra_status probe_measure(const cli_ctx *ctx, const probe_opts *o,
                               ra_profile *p)
{
    const double t0 = MPI_Wtime();
    p->oversubscribed = cli_oversubscribed_warn(
        ctx, 1, "every rate measured is a share of a core; the profile "
        "records it and plan warns when it uses it");
    ra_status st = probe_run(ctx->comm, &ctx->nodes, o->seconds, p);
    if (st != RA_OK)
        return st;
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
        probe_yardsticks(ctx->comm, &p, yard);
    if (st == RA_OK && ctx->rank == 0)
        probe_print(stdout, &p, yards ? yard : NULL);
    /* rank 0 writes the profile whole (the earlier file kept on a failure) */
    if (st == RA_OK && o.out)
        st = ra_agree(ctx->comm, ctx->rank != 0 ? RA_OK
                      : h5io_text_write(o.out, o.force, profile_write_json, &p));
    if (st == RA_OK && ctx->rank == 0 && o.out)
        printf("ringattn probe: wrote %s\n", o.out);
    return st == RA_OK ? CLI_EXIT_OK : cli_fail_status(ctx, st);
}
