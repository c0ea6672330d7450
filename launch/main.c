/* main.c: the `ringattn` command: MPI start-up, dispatch (commands.c),
 * exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "signals.h"
#include "watchdog.h"
#include "simd.h"

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

/* Open MPI's MPI-IO (OMPIO), when the ranks of a job span nodes, opens
 * every file with a shared file pointer kept in a lock file beside it
 * ("FILE-JOB-PID.lock"). ringattn never uses shared file pointers, and a
 * killed job would leave that file next to the user's input. The user's
 * own setting wins. Before MPI_Init. */
static void mpi_env(void)
{
    setenv("OMPI_MCA_sharedfp", "^lockedfile", 0);
}

int main(int argc, char **argv)
{
    int provided;
    cli_streams_open(); /* before anything opens a file */
    mpi_env();
    cli_watchdog_start_mpi();
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    cli_signals_install();
    cli_ctx ctx = {.comm = MPI_COMM_WORLD};
    MPI_Comm_rank(ctx.comm, &ctx.rank);
    MPI_Comm_size(ctx.comm, &ctx.nranks);
    cli_watchdog_phase(&ctx, NULL, 0.0, 0.0); /* MPI is up */
    ra_simd_cap(getenv("RA_EXP")); /* "avx2" or "scalar" caps the SIMD path */
    char *cmdline = join_args(argc, argv);
    ctx.command_line = cmdline ? cmdline : "";

    int code = cli_global_setup(&ctx, &argc, argv);
    if (code == CLI_EXIT_OK) /* else cli_global_setup reported it */
        code = cli_dispatch(&ctx, argc, argv);
    cli_global_free(&ctx);
    free(cmdline);
    MPI_Finalize();
    return code;
}
