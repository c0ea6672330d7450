/* commands.c: what the `ringattn` command offers, in one place: its
 * subcommands, the modes that hand a subcommand's whole command line to
 * their own driver (run --mha, run --backward, ...), and the dispatch from
 * argv to the function that runs one. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "internal.h"

static const char usage_head[] =
    "usage: ringattn <command> [options]   (launch with mpirun/srun for P ranks)\n"
    "\n"
    "commands:\n";

static const char usage_tail[] =
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
     "predict each strategy's time, memory and bytes"},
};
enum { NCOMMANDS = sizeof commands / sizeof *commands };

const cli_mode cli_modes[] = {
    {"run", "--mha", cmd_run_mha,
     "the multi-head attention layer (/x or /x_q, /x_kv)"},
    {"run", "--backward", cmd_run_backward,
     "the backward pass: gradients dq, dk, dv from /do"},
    {"verify", "--backward", cmd_verify_backward,
     "check gradients against the fp64 reference"},
    {"bench", "--backward", cmd_bench_backward, "measure the backward pass"},
    {0},
};

/* `ringattn --help`: the subcommands, their modes, the global options. */
static void cli_usage(FILE *out)
{
    fputs(usage_head, out);
    for (int i = 0; i < NCOMMANDS; i++) {
        cli_help_row(out, 2, commands[i].name, commands[i].summary, NULL);
        for (const cli_mode *m = cli_modes; m->command; m++)
            if (strcmp(m->command, commands[i].name) == 0)
                cli_help_row(out, 4, m->flag, m->help, NULL);
    }
    cli_global_help(CLI_GLOBAL_RING | CLI_GLOBAL_FILES, out);
    fputs(usage_tail, out);
}

void cli_modes_help(const char *command, FILE *out)
{
    int any = 0;
    for (const cli_mode *m = cli_modes; m->command; m++) {
        if (strcmp(m->command, command) != 0)
            continue;
        if (!any++)
            fprintf(out, "\nmodes (each described by ringattn %s MODE "
                    "--help):\n", command);
        cli_help_row(out, 2, m->flag, m->help, NULL);
    }
}

/* The mode of command whose flag argv[1..argc) holds, or NULL; *other is
 * a second mode whose flag it also holds, or NULL. */
static const cli_mode *mode_of(const char *command, int argc, char **argv,
                               const cli_mode **other)
{
    const cli_mode *found = NULL;
    *other = NULL;
    for (const cli_mode *m = cli_modes; m->command; m++) {
        if (strcmp(m->command, command) != 0)
            continue;
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], m->flag) == 0) {
                if (found && found != m)
                    *other = m;
                else
                    found = m;
            }
    }
    return found;
}

/* Hands argv (from the subcommand's name on), less every copy of the
 * mode's flag, to the mode's driver. */
static int run_mode(const cli_ctx *ctx, const cli_mode *m, int argc,
                    char **argv)
{
    int kept = 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], m->flag) != 0)
            argv[kept++] = argv[i];
    argv[kept] = NULL;
    return m->fn(ctx, kept, argv);
}

static int unknown_command(const cli_ctx *ctx, int argc, const char *cmd)
{
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

/* `ringattn help --markdown` (not in --help): every subcommand's and mode's
 * help as Markdown, from the tables the parser reads; launch/reference.py
 * puts it into docs/REFERENCE.md. */
static int help_markdown(const cli_ctx *ctx)
{
    if (ctx->rank == 0) {
        fputs("```text\n", stdout);
        cli_usage(stdout);
        fputs("```\n\n", stdout);
    }
    cli_help_markdown(1);
    int rc = CLI_EXIT_OK;
    for (int i = 0; i < NCOMMANDS && rc == CLI_EXIT_OK; i++) {
        char *argv[] = {(char *)commands[i].name, "--help", NULL};
        rc = commands[i].fn(ctx, 2, argv);
        for (const cli_mode *m = cli_modes; m->command; m++)
            if (rc == CLI_EXIT_OK &&
                strcmp(m->command, commands[i].name) == 0)
                rc = m->fn(ctx, 2, argv);
    }
    cli_help_markdown(0);
    return rc;
}

int cli_dispatch(const cli_ctx *ctx, int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    for (int i = 0; i < NCOMMANDS; i++) {
        if (strcmp(cmd, commands[i].name) != 0)
            continue;
        const cli_mode *other;
        const cli_mode *m = mode_of(cmd, argc - 1, argv + 1, &other);
        if (other) {
            ra_error_set(RA_ERR_ARG, "%s: %s and %s exclude each other (see "
                         "ringattn %s --help)", cmd, m->flag, other->flag,
                         cmd);
            return cli_fail_status(ctx, RA_ERR_ARG);
        }
        return m ? run_mode(ctx, m, argc - 1, argv + 1)
                 : commands[i].fn(ctx, argc - 1, argv + 1);
    }
    if (strcmp(cmd, "--version") == 0)
        return cli_version(ctx);
    if (strcmp(cmd, "help") == 0 && argc == 3 &&
        strcmp(argv[2], "--markdown") == 0)
        return help_markdown(ctx);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
        strcmp(cmd, "help") == 0) {
        if (ctx->rank == 0)
            cli_usage(stdout);
        return CLI_EXIT_OK;
    }
    return unknown_command(ctx, argc, cmd);
}
