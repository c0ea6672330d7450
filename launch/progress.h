/* progress.h: progress lines of a long run on rank 0 (`run --progress`),
 * fed by the library's step callback (ra_params.on_step) and, within a
 * step, by its tile callback (ra_params.on_tick). */
#ifndef RA_PROGRESS_H
#define RA_PROGRESS_H

#include <stdio.h>

#include "cli.h"

/* The options (a group of run's table) and the state of the lines. */
typedef struct {
    int asked, refused, quiet; /* --progress, --no-progress, --quiet */
    double every;       /* --progress-every: seconds between lines */
    double after;       /* --progress-after: seconds of a pass after which
                           lines start without --progress */
    int on;             /* lines may be printed (rank 0) */
    double from;        /* seconds into the pass of the first line */
    double predicted;   /* seconds the forward pass should take */
    double start, last; /* MPI_Wtime of the pass's start, of the last line */
    int done, total;    /* steps done and in all (0: none reported yet) */
    FILE *out;
} cli_progress;

extern const cli_opt cli_progress_opts[];

/* --progress with --no-progress is refused (RA_ERR_ARG); --quiet wins over
 * --progress. */
ra_status progress_check(const cli_progress *pg);

/* The predicted seconds of a forward pass: the performance model's time for
 * p's strategy on this job (comm/perf/model.c, without I/O and masks: an
 * upper bound under masks), from the machine profile file (NULL: the built-in
 * one); for what the model does not cover, the FLOPs over the kernel's rate
 * per core times the cores in use. Collective. */
double progress_predict(const cli_ctx *ctx, const ra_shape *s,
                        const ra_params *p, const char *profile);

/* Decides whether rank 0 prints (never with --quiet or --no-progress;
 * from the start with --progress or when the pass is predicted to take
 * more than --progress-after seconds (10); otherwise once it has run that
 * long, whether or not stderr is a terminal: under mpirun it never is) and
 * points p->on_step at the step callback and p->on_tick at the tile
 * callback on every rank (each step and each tick is also a beat of the
 * phase watchdog, watchdog.h; only rank 0 prints, when on: a line every
 * `every` seconds even within a long step). Call just before the pass,
 * which then starts the clock (progress_start). */
void progress_setup(const cli_ctx *ctx, cli_progress *pg, const ra_shape *s,
                    ra_params *p, const char *profile);

/* Starts the clock of the lines progress_setup pointed p at (nothing
 * otherwise): call just before the pass. */
void progress_start(const ra_params *p);

/* The parameter-table line (rank 0): whether progress is on, and why. */
void progress_print_param(const cli_ctx *ctx, const cli_progress *pg);

#endif /* RA_PROGRESS_H */
