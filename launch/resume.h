/* resume.h: checkpoints of run and run --backward (docs/CHECKPOINT.md):
 * the options --checkpoint DIR[,S] and --resume DIR, the signals that ask
 * for a checkpoint and a stop (SIGUSR1, SIGTERM), and the library's hooks
 * (ringattn.h, ra_checkpoint) of io/ckpt_pass.h, which check, save and
 * load DIR/checkpoint.h5. */
#ifndef RA_RESUME_H
#define RA_RESUME_H

#include "ckpt_pass.h"
#include "cli.h"

/* The default seconds between two periodic checkpoints. */
#define CLI_CKPT_EVERY_DEFAULT 600.0

/* The options, a group of run and run --backward. */
typedef struct {
    const char *dir;    /* --checkpoint DIR, or NULL */
    double every;       /* its ,S: seconds between checkpoints */
    const char *resume; /* --resume DIR, or NULL */
    char dir_buf[PATH_MAX]; /* DIR without its ,S */
} cli_ckpt_args;
extern const cli_opt cli_ckpt_opts[];

/* In the validate step, before any work: h5io_resume_begin of the pass
 * ("forward" or "backward") into k (a stop asked by a signal, each save
 * printed), the handlers of SIGUSR1 and SIGTERM installed (they ask for a
 * stop at the next step boundary), p->checkpoint pointed at k's hooks
 * (the library refuses what takes no checkpoints). Agreed. Nothing when
 * neither option is given. */
ra_status cli_ckpt_begin(const cli_ctx *ctx, const cli_ckpt_args *a,
                         const char *pass, h5io_resume *k, ra_params *p);

/* After the pass: a stop (RA_STOPPED) becomes one line naming the
 * checkpoint and how to continue (exit CLI_EXIT_CHECKPOINTED); on success
 * (st RA_OK, the outputs published) the checkpoint file is removed and a
 * stop signal is caught and ignored until the process exits (the run is
 * done); otherwise the signals get their usual handlers back. Returns
 * st. */
ra_status cli_ckpt_end(h5io_resume *k, ra_status st);

#endif /* RA_RESUME_H */
