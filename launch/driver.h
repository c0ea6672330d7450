/* driver.h: what the pass drivers (run, run --mha, run --backward, bench
 * --backward) share: the data they own, and the phases around their own
 * steps (the watchdog, the parameter table). */
#ifndef RA_DRIVER_H
#define RA_DRIVER_H

#include "cli.h"
#include "h5io.h"
#include "resume.h"
#include "watchdog.h"

/* A rank's gradient buffers (io/run_pass.h). */
typedef h5io_grads cli_grads;

/* What every pass driver owns between validate and report, freed by
 * cli_pass_data_free; a driver of a pass from files keeps its buffers in
 * an h5io_pass (io/run_pass.h) and copies the shape here once set up. */
typedef struct {
    ra_shape s;
    int layout_auto;            /* p.layout was chosen by the library */
    const char *in, *out;       /* the files named in the parameter table */
    cli_tensors t;
    cli_grads g;
    h5io_additive score_in;     /* the additive score's weights */
    int backward;               /* the pass computes gradients (set before
                                   cli_pass_echo) */
    const char *profile;        /* the run's --profile, or NULL */
    double stall_given;         /* --stall-timeout, NaN when not given */
    char stall_how[400];        /* how the stall timeout was found */
} cli_pass_data;

void cli_pass_data_free(cli_pass_data *d);

/* Resolves p->layout (RA_LAYOUT_AUTO: by the segments) and records in d
 * whether it was chosen. */
void cli_pass_layout(cli_pass_data *d, ra_params *p, int segmented);

/* Allocates d->g for d->t's slices with A additive hidden units (0: none)
 * (h5io_grads_alloc, against limit: --mem-limit, or 0). Not collective. */
ra_status cli_grads_alloc(cli_pass_data *d, int64_t A, const char *command,
                          const cli_ctx *ctx, int64_t limit);

/* The request rq (io/run_pass.h; the options fill the rest) of a pass of
 * kind on the ranks of ctx under p's memory limit. */
void cli_pass_ctx(const cli_ctx *ctx, h5io_pass_req *rq, h5io_pass_kind kind,
                  const ra_params *p);

/* After h5io_pass_open: p's checks that are the command line's (those of
 * cli_params_check but the library's) and d->profile read (refused when
 * it cannot be), then mine (the driver's own checks), agreed, then
 * h5io_pass_inputs. */
ra_status cli_pass_inputs(const cli_ctx *ctx, cli_pass_data *d, h5io_pass *j,
                          ra_params *p, ra_status mine);

/* A pass from files to files (run, run --backward, run --mha): what
 * cli_pass_main runs between the shared phases. */
typedef struct {
    cli_pass_data d;
    h5io_pass j;
    h5io_resume ckpt;           /* --checkpoint, --resume (none: zeroed) */
    double t_read, t_total;     /* the read (with the checkpoint's check),
                                   the read to the output written */
} cli_pass;

/* Its steps: validate (every check that needs no compute, ending with
 * h5io_pass_open and cli_pass_inputs; agreed), print after the parameter
 * table (or NULL), report after the output is written (rank 0 prints). */
typedef struct {
    const cli_spec *spec;
    ra_status (*validate)(const cli_ctx *ctx, void *opts, cli_pass *r);
    ra_status (*print)(const cli_ctx *ctx, void *opts, cli_pass *r);
    ra_status (*report)(const cli_ctx *ctx, void *opts, cli_pass *r);
} cli_pass_driver;

/* The driver of drv on the options opts (whose ra_params is p) and its
 * state r (zeroed): parse, cli_pass_begin, validate, the set-up (
 * h5io_pass_setup, the checkpoint's key), cli_pass_echo, print, the read
 * (a non-finite value of run's refused naming --allow-nonfinite), the
 * call (a stall ends the job), cli_pass_writing, report, the checkpoint's
 * end, cli_pass_end: the exit code. */
int cli_pass_main(const cli_ctx *ctx, const cli_pass_driver *drv, void *opts,
                  ra_params *p, cli_pass *r, int argc, char **argv);

/* The phases of a pass driver, each watched (watchdog.h). A driver is
 * plain code (cli_pass_main's, or bench --backward's): parse
 * (cli_parse_pass), cli_pass_begin, validate, set up, cli_pass_echo,
 * compute, cli_pass_writing, report, its own release, then cli_pass_end
 * with the first failure. */

/* What the stall timeout of a pass rests on (cli_stall_timeout): the
 * predicted forward_s seconds of a forward pass of s under p on nranks
 * ranks (progress_predict, from profile; NULL: the built-in one), for
 * the backward (backward 1) grown by its FLOPs and its kernel's lower
 * rate; its beats are the strategy's steps. Pure. */
cli_stall_basis cli_pass_basis(const ra_shape *s, const ra_params *p,
                               int nranks, double forward_s, int backward,
                               const char *profile);

/* Before validating: --stall-timeout as parsed (NaN: not given; every
 * value given is honoured, 600 and 0 included) kept in d, p's left at the
 * library's default until cli_pass_echo; the set-up phase watched. */
void cli_pass_begin(const cli_ctx *ctx, cli_pass_data *d, ra_params *p);

/* After setting up: the stall timeout (cli_stall_timeout: given, or
 * derived from the prediction of d's pass with d->profile; collective),
 * p->on_step and p->on_tick beats of the watchdog when the driver set no
 * step callback, the pass
 * phase watched, then from rank 0 the placement warning and the parameter
 * table of d with the stall line (its value and how it was found). */
void cli_pass_echo(const cli_ctx *ctx, cli_pass_data *d, ra_params *p);

/* A stalled pass (RA_ERR_MPI from the library: transfers still in
 * flight; h5io_pass.stalled): the library's message and how the timeout
 * was found, then the job ended (cli_abort). */
void cli_pass_stalled(const cli_ctx *ctx, const cli_pass_data *d);

/* Before the report: the write of the output watched. */
void cli_pass_writing(const cli_ctx *ctx, const cli_pass_data *d,
                      const ra_params *p);

/* The watch ended and d freed (cli_pass_data_free): the exit code of st,
 * its message printed on a failure. */
int cli_pass_end(const cli_ctx *ctx, cli_pass_data *d, ra_status st);

#endif /* RA_DRIVER_H */
