/* main.c: the `ringattn` command: MPI start-up, dispatch, exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "signals.h"
#include "simd.h"

static const char usage[] =
    "usage: ringattn <command> [options]   (launch with mpirun/srun for P ranks)\n"
    "\n"
    "commands:\n"
    "  gen      write random inputs /q /k /v to an HDF5 file\n"
    "  run      ring attention from an input file to an output file\n"
    "  verify   check an output file against the fp64 reference\n"
    "  info     show the datasets and attributes of a file\n"
    "  bench    measure the forward pass on in-memory inputs\n"
    "  plot-map draw the attention map of an output file as a PNG\n"
    "  probe    measure this allocation's machine profile (JSON)\n"
    "  plan     predict time, memory and bytes of each strategy before a run\n"
    "\n"
    "global options (any command):\n"
    "  --ring-order node|mpirun   order the ring node by node so that each\n"
    "                   step crosses each node boundary once (default), or\n"
    "                   keep the launcher's rank order\n"
    "  --align BYTES    start datasets of 64 KiB or more at multiples of BYTES\n"
    "                   (the parallel file system's stripe size)\n"
    "  --mpiio-hint KEY=VALUE   an MPI-IO hint for every file (repeatable;\n"
    "                   also from RINGATTN_MPIIO_HINTS=\"k=v;k=v\", which the\n"
    "                   flags override)\n"
    "\n"
    "`ringattn <command> --help` describes each one; `ringattn --version`\n"
    "names the version and the BLAS, MPI, HDF5 and SIMD path of this build.\n";

/* argv joined by spaces, arguments with spaces or quotes single-quoted. */
static char *join_args(int argc, char **argv)
{
    size_t len = 1;
    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) * 4 + 3;
    char *s = malloc(len), *p = s;
    if (!s)
        return NULL;
    for (int i = 0; i < argc; i++) {
        int quote = strpbrk(argv[i], " \t'\"") != NULL || argv[i][0] == '\0';
        if (i)
            *p++ = ' ';
        if (quote)
            *p++ = '\'';
        for (const char *c = argv[i]; *c; c++) {
            if (*c == '\'') { /* close, escaped quote, reopen */
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *c;
            }
        }
        if (quote)
            *p++ = '\'';
    }
    *p = '\0';
    return s;
}

typedef int (*command_fn)(const cli_ctx *ctx, int argc, char **argv);

static const struct {
    const char *name;
    command_fn fn;
} commands[] = {
    {"gen", cmd_gen},     {"run", cmd_run},     {"verify", cmd_verify},
    {"info", cmd_info},   {"bench", cmd_bench}, {"plot-map", cmd_plot},
    {"probe", cmd_probe}, {"plan", cmd_plan},
};

/* Runs the command argv[1] names, with its own argv (from the name on). */
static int dispatch(const cli_ctx *ctx, int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].fn(ctx, argc - 1, argv + 1);
    if (strcmp(cmd, "--version") == 0)
        return cli_version(ctx);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
        strcmp(cmd, "help") == 0) {
        if (ctx->rank == 0)
            fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    if (ctx->rank == 0)
        fprintf(stderr, "ringattn: %s%s%s (commands: gen, run, verify, info, "
                "bench, plot-map, probe, plan; see ringattn --help)\n",
                argc > 1 ? "unknown command '" : "no command",
                argc > 1 ? cmd : "", argc > 1 ? "'" : "");
    return CLI_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    int provided;
    cli_mpi_env();
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    cli_signals_install();
    cli_ctx ctx = {.comm = MPI_COMM_WORLD};
    MPI_Comm_rank(ctx.comm, &ctx.rank);
    MPI_Comm_size(ctx.comm, &ctx.nranks);
    ra_simd_cap(getenv("RA_EXP")); /* "avx2" or "scalar" caps the SIMD path */
    char *cmdline = join_args(argc, argv);
    ctx.command_line = cmdline ? cmdline : "";

    int code = cli_global_setup(&ctx, &argc, argv);
    if (code == CLI_EXIT_OK) /* else cli_global_setup reported it */
        code = dispatch(&ctx, argc, argv);
    cli_global_free(&ctx);
    free(cmdline);
    MPI_Finalize();
    return code;
}
