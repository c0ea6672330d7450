/* main.c: the `ringattn` command: MPI start-up, dispatch, exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "signals.h"
#include "simd.h"

static const char usage_head[] =
    "usage: ringattn <command> [options]   (launch with mpirun/srun for P ranks)\n"
    "\n"
    "commands:\n";

static const char usage_tail[] =
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

/* The subcommands, in the order --help lists them. */
static const struct {
    const char *name;
    cli_command *fn;
    const char *summary; /* one line of --help */
} commands[] = {
    {"gen", cmd_gen, "write random inputs /q /k /v to an HDF5 file"},
    {"run", cmd_run, "ring attention from an input file to an output file"},
    {"verify", cmd_verify, "check an output file against the fp64 reference"},
    {"info", cmd_info, "show the datasets and attributes of a file"},
    {"bench", cmd_bench, "measure the forward pass on in-memory inputs"},
    {"plot-map", cmd_plot, "draw the attention map of an output file as a PNG"},
    {"probe", cmd_probe, "measure this allocation's machine profile (JSON)"},
    {"plan", cmd_plan,
     "predict time, memory and bytes of each strategy before a run"},
};
enum { NCOMMANDS = sizeof commands / sizeof *commands };

static void usage_print(FILE *out)
{
    fputs(usage_head, out);
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fputs(usage_tail, out);
}

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

/* Runs the command argv[1] names, with its own argv (from the name on). */
static int dispatch(const cli_ctx *ctx, int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].fn(ctx, argc - 1, argv + 1);
    if (strcmp(cmd, "--version") == 0)
        return cli_version(ctx);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
        strcmp(cmd, "help") == 0) {
        if (ctx->rank == 0)
            usage_print(stdout);
        return CLI_EXIT_OK;
    }
    char names[256] = "";
    for (int i = 0; i < NCOMMANDS; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                 i ? ", " : "", commands[i].name);
    if (ctx->rank == 0)
        fprintf(stderr, "ringattn: %s%s%s (commands: %s; see ringattn "
                "--help)\n", argc > 1 ? "unknown command '" : "no command",
                argc > 1 ? cmd : "", argc > 1 ? "'" : "", names);
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
