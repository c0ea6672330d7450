/* progress.c: progress lines of a long run on stderr of rank 0: "step
 * done/total, elapsed, ETA" after a step, "in step s/total, x% of its
 * tiles, elapsed, ETA" within one, every few seconds and once at the end. */
#include <stddef.h>

#include "internal.h"
#include "plan.h"
#include "profile.h"
#include "progress.h"
#include "signals.h"
#include "watchdog.h"

const cli_opt cli_progress_opts[] = {
    CLI_OPT_FLAG(cli_progress, "--progress", asked,
                 "progress lines on stderr from the start"),
    CLI_OPT_REAL(cli_progress, "--progress-after", "S", after, 0, 1e9, "10",
                 "lines once a pass has run S s"),
    CLI_OPT_FLAG(cli_progress, "--no-progress", refused, "no progress lines"),
    CLI_OPT_POSITIVE(cli_progress, "--progress-every", "S", every, 86400, "5",
                     "seconds between progress lines"),
    CLI_OPT_FLAG(cli_progress, "--quiet", quiet, "no progress lines"),
    {0},
};

ra_status progress_check(const cli_progress *pg)
{
    if (pg->asked && pg->refused)
        return ra_error_set(RA_ERR_ARG, "--progress, --no-progress: give "
                            "one of them");
    return RA_OK;
}

/* Whether rank 0 may print: the rule of progress_setup (progress.h). */
static int progress_wanted(const cli_progress *pg)
{
    return !pg->quiet && !pg->refused;
}

/* Whether the lines have started, `elapsed` s into the pass: from the
 * start with --progress or a long prediction, else once the pass has run
 * --progress-after seconds (issue 39, class 14: a prediction can be
 * wrong, the clock is not). */
static int progress_started(const cli_progress *pg, double elapsed)
{
    return pg->on && elapsed >= pg->from;
}

double progress_predict(const cli_ctx *ctx, const ra_shape *s,
                        const ra_params *p, const char *profile)
{
    model_result r;
    if (plan_predict(ctx, s, p, NULL, profile, &r) == RA_OK)
        return r.t_total;
    ra_profile prof; /* a strategy the model does not cover: FLOPs alone */
    profile_default(&prof);
    const profile_kernel_key key = profile_key_of(p, s->D, s->Dv);
    const double rate = profile_kernel_rate(&prof, &key);
    const double cores = (double)ctx->nranks * ra_params_threads(p);
    return rate > 0 ? ra_params_forward_flops(s, p, NULL) / (rate * cores)
                    : 0.0;
}

/* The step callback: a line when `every` has passed since the last one,
 * and always after the last step. */
static void progress_step(void *ctx, int done, int total)
{
    cli_progress *pg = ctx;
    const double now = MPI_Wtime(), elapsed = now - pg->start;
    cli_watchdog_beat();
    pg->done = done;
    pg->total = total;
    if (!progress_started(pg, elapsed) ||
        (done < total && now - pg->last < pg->every))
        return;
    pg->last = now;
    cli_streams_watch(); /* a line nobody reads may cost the job */
    const double eta = elapsed / done * (total - done);
    fprintf(pg->out, "ringattn run: step %d/%d, %.1f s elapsed, ETA %.1f s\n",
            done, total, elapsed, eta);
    fflush(pg->out);
}

/* The tile callback (every rank: a beat of the phase watchdog, so that a
 * long step's own work is never taken for a stall; rank 0, when on: a
 * line within a step when `every` has passed, with the share of the step's
 * tiles done). The ETA follows
 * the steps done when one has ended; before, the first step's own pace
 * (the end of that step), or the prediction while no tile is done. */
static void progress_tick(void *ctx, double share)
{
    cli_progress *pg = ctx;
    const double now = MPI_Wtime(), elapsed = now - pg->start;
    cli_watchdog_beat(); /* tiles done: this rank computes */
    if (!progress_started(pg, elapsed) || now - pg->last < pg->every ||
        (pg->total && pg->done >= pg->total))
        return;
    pg->last = now;
    cli_streams_watch();
    char total[24] = "?", eta[48] = "?";
    const double at = pg->done + share;
    if (pg->total > 0) {
        snprintf(total, sizeof total, "%d", pg->total);
        snprintf(eta, sizeof eta, "%.1f s", elapsed / at * (pg->total - at));
    } else if (share > 0) {
        snprintf(eta, sizeof eta, "%.1f s to the end of the step",
                 elapsed / share * (1.0 - share));
    } else if (pg->predicted > elapsed) {
        snprintf(eta, sizeof eta, "%.1f s (predicted)",
                 pg->predicted - elapsed);
    }
    fprintf(pg->out, "ringattn run: in step %d/%s, %.0f%% of its tiles, "
            "%.1f s elapsed, ETA %s\n", pg->done + 1, total, 100.0 * share,
            elapsed, eta);
    fflush(pg->out);
}

void progress_setup(const cli_ctx *ctx, cli_progress *pg, const ra_shape *s,
                    ra_params *p, const char *profile)
{
    pg->predicted = progress_predict(ctx, s, p, profile);
    pg->on = ctx->rank == 0 && progress_wanted(pg);
    pg->from = pg->asked || pg->predicted > pg->after ? 0.0 : pg->after;
    pg->out = stderr;
    pg->start = pg->last = MPI_Wtime();
    p->exec.on_step = progress_step;
    p->exec.on_tick = progress_tick;
    p->exec.on_step_ctx = pg;
}

void progress_start(const ra_params *p)
{
    if (p->exec.on_step != progress_step)
        return;
    cli_progress *pg = p->exec.on_step_ctx;
    pg->start = pg->last = MPI_Wtime();
    pg->done = pg->total = 0;
}

void progress_print_param(const cli_ctx *ctx, const cli_progress *pg)
{
    if (ctx->rank != 0)
        return;
    if (pg->on && pg->from == 0.0)
        printf("# %-10s on, every %g s (predicted %.1f s)\n",
               "progress", pg->every, pg->predicted);
    else if (pg->on)
        printf("# %-10s off for the first %g s (--progress-after; a short "
               "run, predicted %.3g s), then every %g s\n", "progress",
               pg->from, pg->predicted, pg->every);
    else
        printf("# %-10s off (%s; predicted %.1f s)\n", "progress",
               pg->quiet     ? "--quiet"
               : pg->refused ? "--no-progress"
                             : "a short run", pg->predicted);
}
