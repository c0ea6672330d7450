/* cmd_plot.c: `ringattn plot-map`: draws /attn_map of an output file as a
 * PNG heatmap with launch/plot-map.py (matplotlib). The script is run
 * directly (fork and execvp, argv as given, no shell), from rank 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "internal.h"

static const char plot_help[] =
    "usage: ringattn plot-map OUT.h5 MAP.png [--batch B] [--head I]\n"
    "                         [--width W] [--reduce max|mean]\n"
    "\n"
    "Draws the /attn_map of OUT.h5 (written by run --attn-map) as a heatmap:\n"
    "keys on x, queries on y, a colour scale. When M exceeds W pixels (default\n"
    "1000), each pixel column reduces a run of keys by max (default) or mean,\n"
    "as the image states. --head indexes the map's heads. Needs\n"
    "python3-matplotlib and python3-h5py.\n";

/* The script: $RINGATTN_SCRIPTS, the source tree, or the install tree. */
static const char *script_path(char *buf, size_t len)
{
    const char *dirs[3] = {getenv("RINGATTN_SCRIPTS"), RA_SOURCE_LAUNCH_DIR,
                           RA_INSTALL_SCRIPT_DIR};
    for (int i = 0; i < 3; i++) {
        if (!dirs[i])
            continue;
        snprintf(buf, len, "%s/plot-map.py", dirs[i]);
        if (access(buf, R_OK) == 0)
            return buf;
    }
    return NULL;
}

int cmd_plot(const cli_ctx *ctx, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0) {
            if (ctx->rank == 0)
                fputs(plot_help, stdout);
            return CLI_EXIT_OK;
        }
    if (argc < 3)
        return cli_fail(ctx, CLI_EXIT_USAGE, "plot-map: OUT.h5 and MAP.png are "
                                             "required (see ringattn plot-map "
                                             "--help)");
    int code = CLI_EXIT_OK;
    if (ctx->rank == 0) {
        char path[4096];
        if (!script_path(path, sizeof path)) {
            code = cli_fail(ctx, CLI_EXIT_RUNTIME, "plot-map: cannot find "
                            "plot-map.py (set RINGATTN_SCRIPTS to its folder)");
        } else {
            /* Debian's python3 carries the h5py and matplotlib packages;
             * RINGATTN_PYTHON picks another interpreter */
            const char *py = getenv("RINGATTN_PYTHON");
            if (!py)
                py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3"
                                                           : "python3";
            char **args = calloc((size_t)argc + 2, sizeof *args);
            args[0] = (char *)py;
            args[1] = path;
            for (int i = 1; i < argc; i++)
                args[i + 1] = argv[i];
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                execvp(py, args);
                fprintf(stderr, "ringattn: plot-map: cannot run %s\n", py);
                _exit(127);
            }
            int status = 0;
            if (pid < 0 || waitpid(pid, &status, 0) < 0 ||
                !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                code = CLI_EXIT_RUNTIME;
            free(args);
        }
    }
    MPI_Bcast(&code, 1, MPI_INT, 0, ctx->comm);
    return code;
}
