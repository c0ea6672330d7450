/* resume.h: checkpoints of run and run --backward (docs/CHECKPOINT.md):
 * the options --checkpoint DIR[,S] and --resume DIR, the signals that ask
 * for a checkpoint and a stop (SIGUSR1, SIGTERM), and the library's hooks
 * (ringattn.h, ra_checkpoint) writing and reading DIR/checkpoint.h5. The
 * library saves nothing itself: the files and signals are all here. */
#ifndef RA_RESUME_H
#define RA_RESUME_H

#include <limits.h>

#include "checkpoint.h"
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

/* One run's checkpoints, from cli_ckpt_begin to cli_ckpt_end. */
typedef struct {
    const cli_ctx *ctx;
    const char *pass;        /* "forward" or "backward" */
    const char *dir;         /* where checkpoints go: --checkpoint's DIR,
                                else --resume's; NULL: none */
    double every;
    char path[PATH_MAX];     /* DIR/checkpoint.h5 */
    char from[PATH_MAX];     /* --resume's DIR/checkpoint.h5, or "" */
    h5io_ckpt_head head;     /* its attributes (rank 0's, agreed) */
    char key[H5IO_CKPT_KEY_LEN]; /* this run's options that change the
                                numbers, one "name=value" line each */
    const char *fingerprint; /* of the input read */
    double last;             /* MPI_Wtime of the start or the last save */
    int saved, step;         /* checkpoints written, the last one's step */
    ra_checkpoint hooks;
} cli_ckpt;

/* In the validate step, before any work: the directories (checkpoints
 * are written where an output could be), --resume's checkpoint read and
 * checked against this pass and P (RA_ERR_ARG naming what differs), the
 * handlers of SIGUSR1 and SIGTERM installed (they ask for a stop at the
 * next step boundary), p->checkpoint pointed at k's hooks (the library
 * refuses what takes no checkpoints). Agreed. Nothing when neither
 * option is given. */
ra_status cli_ckpt_begin(const cli_ctx *ctx, const cli_ckpt_args *a,
                         const char *pass, cli_ckpt *k, ra_params *p);

/* Once the options are resolved (layout) and before the input is read:
 * the key of this run; with --resume, RA_ERR_ARG "--resume DIR: the
 * checkpoint was made with NAME = X, this run has Y" for the first option
 * that differs. Agreed. */
ra_status cli_ckpt_key(cli_ckpt *k, const ra_shape *s, const ra_params *p,
                       const ra_masks *masks, int dw);

/* After the input is read and fingerprinted (fp, kept by the caller):
 * with --resume, RA_ERR_INPUT when the checkpoint's input differs, else
 * the hooks load from it. Agreed. */
ra_status cli_ckpt_arm(cli_ckpt *k, const char *fp);

/* After the pass: a stop (RA_STOPPED) becomes one line naming the
 * checkpoint and how to continue (exit CLI_EXIT_CHECKPOINTED); on success
 * (st RA_OK, the outputs published) the checkpoint file is removed. The
 * signals get their usual handlers back. Returns st. */
ra_status cli_ckpt_end(cli_ckpt *k, ra_status st);

#endif /* RA_RESUME_H */
