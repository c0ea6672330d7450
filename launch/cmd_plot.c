/* cmd_plot.c: `ringattn plot-map`: draws /attn_map of an output file as a
 * PNG heatmap with launch/plot-map.py (matplotlib). The options are checked
 * here, the output path too, before the script runs; the script is run
 * directly (fork and execvp, no shell), from rank 0, and its exit status
 * (2 bad input, 1 failure) is the command's. */
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agree.h"
#include "cli.h"
#include "internal.h"

typedef struct {
    const char *files[2]; /* OUT.h5, MAP.png */
    int64_t batch, head, width;
    double vmax;          /* 0: not given */
    int head_set, reduce, force, log;
} plot_opts;

static const char *const reductions[] = {"max", "mean", NULL};

static const cli_opt plot_own[] = {
    CLI_OPT_FORCE(plot_opts, force),
    CLI_OPT_INT(plot_opts, "--batch", "B", batch, 0, INT32_MAX, "0",
                "batch of the map"),
    {.name = "--head", .kind = CLI_INT, .meta = "I",
     .offset = CLI_FIELD(plot_opts, head, int64_t), .lo = 0, .hi = INT32_MAX,
     .seen = CLI_SEEN(plot_opts, head_set), .shown = "the map's first",
     .help = "model head number, one the map holds"},
    CLI_OPT_INT(plot_opts, "--width", "W", width, 1, 100000, "1000",
                "at most W pixel columns (runs of keys reduced)"),
    CLI_OPT_CHOICE(plot_opts, "--reduce", "max|mean", reduce, reductions,
                   NULL, "max",
                   "how a pixel column reduces its keys (peaks or mass)"),
    CLI_OPT_FLAG(plot_opts, "--log", log,
                 "logarithmic colour scale over six decades"),
    {.name = "--vmax", .kind = CLI_REAL, .meta = "V",
     .offset = CLI_FIELD(plot_opts, vmax, double), .open_lo = 1,
     .rhi = DBL_MAX, .shown = "the largest weight",
     .help = "top of the colour scale"},
    {0},
};

static const cli_spec plot_spec = {
    .name = "plot-map",
    .usage = "usage: ringattn plot-map OUT.h5 MAP.png [options]\n"
             "\n"
             "Draws the /attn_map of OUT.h5 (written by run --attn-map) as a\n"
             "heatmap: keys on x, queries on y, a colour scale. The PNG is\n"
             "written under a temporary name and renamed when complete. Needs\n"
             "python3-matplotlib and python3-h5py.\n",
    .groups = {{plot_own, 0}},
    CLI_POSITIONAL(plot_opts, files),
    .globals = CLI_GLOBAL_FILES,
};

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

/* Runs the script and returns its exit status (1 when it cannot run). */
static int plot_run(const plot_opts *o, const char *script)
{
    /* Debian's python3 carries the h5py and matplotlib packages;
     * RINGATTN_PYTHON picks another interpreter */
    const char *py = getenv("RINGATTN_PYTHON");
    if (!py)
        py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3"
                                                   : "python3";
    char batch[24], width[24], head[24], vmax[32];
    snprintf(batch, sizeof batch, "%lld", (long long)o->batch);
    snprintf(width, sizeof width, "%lld", (long long)o->width);
    snprintf(head, sizeof head, "%lld", (long long)o->head);
    snprintf(vmax, sizeof vmax, "%.17g", o->vmax);
    char *args[16] = {(char *)py, (char *)script, (char *)o->files[0],
                      (char *)o->files[1], "--batch", batch, "--width", width,
                      "--reduce", (char *)reductions[o->reduce]};
    int n = 10;
    if (o->head_set) {
        args[n++] = "--head";
        args[n++] = head;
    }
    if (o->vmax > 0) {
        args[n++] = "--vmax";
        args[n++] = vmax;
    }
    if (o->log)
        args[n++] = "--log";
    if (o->force)
        args[n++] = "--force";
    args[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execvp(py, args);
        fprintf(stderr, "ringattn: plot-map: cannot run %s\n", py);
        _exit(CLI_EXIT_RUNTIME);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        fprintf(stderr, "ringattn: plot-map: cannot start %s\n", py);
        return CLI_EXIT_RUNTIME;
    }
    if (!WIFEXITED(status)) {
        fprintf(stderr, "ringattn: plot-map: %s ended by signal %d\n", script,
                WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        return CLI_EXIT_RUNTIME;
    }
    return WEXITSTATUS(status) == CLI_EXIT_USAGE ? CLI_EXIT_USAGE
           : WEXITSTATUS(status) ? CLI_EXIT_RUNTIME : CLI_EXIT_OK;
}

/* Both files given, the output path checked against the input, the script
 * found (path, rank 0); the ranks agree. */
static ra_status plot_validate(const cli_ctx *ctx, const plot_opts *o,
                               char *path, size_t len)
{
    if (!o->files[1])
        return ra_error_set(RA_ERR_ARG, "plot-map: OUT.h5 and MAP.png are "
                            "required (see ringattn plot-map --help)");
    ra_status st = cli_output_agree(ctx, o->files[1], o->force,
                                    (const char *const[]){o->files[0], NULL});
    if (st == RA_OK && ctx->rank == 0 && !script_path(path, len))
        st = ra_error_set(RA_ERR_IO, "plot-map: cannot find plot-map.py (set "
                          "RINGATTN_SCRIPTS to its folder)");
    return ra_agree(ctx->comm, st);
}

int cmd_plot(const cli_ctx *ctx, int argc, char **argv)
{
    plot_opts o = {0};
    char path[4096];
    int code = cli_parse_or_exit(ctx, &plot_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    ra_status st = plot_validate(ctx, &o, path, sizeof path);
    if (st != RA_OK)
        return cli_fail_status(ctx, st);
    code = ctx->rank == 0 ? plot_run(&o, path) : CLI_EXIT_OK;
    MPI_Bcast(&code, 1, MPI_INT, 0, ctx->comm);
    return code;
}
