/* progress.c: progress lines of a long run: "step done/total, elapsed,
 * ETA" on stderr of rank 0, every few seconds and once at the end. */
#include <stddef.h>
#include <unistd.h>

#include "plan.h"
#include "profile_json.h"
#include "progress.h"
#include "watchdog.h"

/* A pass predicted to take longer than this shows progress on a
 * terminal. */
#define PROGRESS_THRESHOLD 10.0

const cli_opt cli_progress_opts[] = {
    CLI_OPT_FLAG(cli_progress, "--progress", asked,
                 "progress lines on stderr (steps done, elapsed, ETA)"),
    CLI_OPT_POSITIVE(cli_progress, "--progress-every", "S", every, 86400, "5",
                     "seconds between progress lines"),
    CLI_OPT_FLAG(cli_progress, "--quiet", quiet, "no progress lines"),
    {0},
};

int progress_wanted(double predicted_seconds, int asked, int quiet,
                    int stderr_is_tty)
{
    if (quiet)
        return 0;
    if (asked)
        return 1;
    return stderr_is_tty && predicted_seconds > PROGRESS_THRESHOLD;
}

double progress_predict(const cli_ctx *ctx, const ra_shape *s,
                        const ra_params *p, const char *profile)
{
    model_result r;
    if (plan_predict(ctx, s, p, NULL, profile, &r) == RA_OK)
        return r.t_total;
    ra_profile prof; /* a strategy the model does not cover: FLOPs alone */
    profile_default(&prof);
    const double rate = profile_kernel_rate(&prof, s->D, s->Dv, p->score);
    const double cores = (double)ctx->nranks * ra_params_threads(p);
    return rate > 0 ? ra_forward_flops(s, p, NULL) / (rate * cores) : 0.0;
}

/* The step callback: a line when `every` has passed since the last one,
 * and always after the last step. */
static void progress_step(void *ctx, int done, int total)
{
    cli_progress *pg = ctx;
    const double now = MPI_Wtime(), elapsed = now - pg->start;
    cli_watchdog_beat();
    if (!pg->on || (done < total && now - pg->last < pg->every))
        return;
    pg->last = now;
    const double eta = elapsed / done * (total - done);
    fprintf(pg->out, "ringattn run: step %d/%d, %.1f s elapsed, ETA %.1f s\n",
            done, total, elapsed, eta);
    fflush(pg->out);
}

void progress_setup(const cli_ctx *ctx, cli_progress *pg, const ra_shape *s,
                    ra_params *p, const char *profile)
{
    pg->predicted = progress_predict(ctx, s, p, profile);
    pg->on = ctx->rank == 0 &&
             progress_wanted(pg->predicted, pg->asked, pg->quiet,
                             isatty(STDERR_FILENO));
    pg->out = stderr;
    pg->start = pg->last = MPI_Wtime();
    p->on_step = progress_step;
    p->on_step_ctx = pg;
}

void progress_start(const ra_params *p)
{
    if (p->on_step != progress_step)
        return;
    cli_progress *pg = p->on_step_ctx;
    pg->start = pg->last = MPI_Wtime();
}

void progress_print_param(const cli_ctx *ctx, const cli_progress *pg)
{
    if (ctx->rank != 0)
        return;
    if (pg->on)
        printf("# %-10s on, every %g s (predicted %.1f s)\n",
               "progress", pg->every, pg->predicted);
    else
        printf("# %-10s off (%s; predicted %.1f s)\n", "progress",
               pg->quiet ? "--quiet" : "stderr is not a terminal or the run "
               "is short", pg->predicted);
}
