/* progress.h: progress lines of a long run on rank 0 (`run --progress`),
 * fed by the library's step callback (ra_params.on_step). */
#ifndef RA_PROGRESS_H
#define RA_PROGRESS_H

#include <stdio.h>

#include "cli.h"

/* The options (a group of run's table) and the state of the lines. */
typedef struct {
    int asked, quiet;   /* --progress, --quiet */
    double every;       /* --progress-every: seconds between lines */
    int on;             /* lines are printed (rank 0) */
    double predicted;   /* seconds the forward pass should take */
    double start, last; /* MPI_Wtime of the pass's start, of the last line */
    FILE *out;
} cli_progress;

extern const cli_opt cli_progress_opts[];

/* The rule: never with --quiet; always with --progress; otherwise only
 * when stderr is a terminal and the pass should take more than about ten
 * seconds. */
int progress_wanted(double predicted_seconds, int asked, int quiet,
                    int stderr_is_tty);

/* The predicted seconds of a forward pass: the performance model's time for
 * p's strategy on this job (comm/model.c, without I/O and masks: an upper
 * bound under masks), from the machine profile file (NULL: the built-in
 * one); for what the model does not cover, the FLOPs over the kernel's rate
 * per core times the cores in use. Collective. */
double progress_predict(const cli_ctx *ctx, const ra_shape *s,
                        const ra_params *p, const char *profile);

/* Decides whether rank 0 prints (progress_wanted) and points p->on_step
 * at the step callback on every rank (each step is also a beat of the
 * phase watchdog, watchdog.h; only rank 0 prints, when on); call just
 * before the pass, which then starts the clock (progress_start). */
void progress_setup(const cli_ctx *ctx, cli_progress *pg, const ra_shape *s,
                    ra_params *p, const char *profile);

/* Starts the clock of the lines progress_setup pointed p at (nothing
 * otherwise): call just before the pass. */
void progress_start(const ra_params *p);

/* The parameter-table line (rank 0): whether progress is on, and why. */
void progress_print_param(const cli_ctx *ctx, const cli_progress *pg);

#endif /* RA_PROGRESS_H */
