/* ckpt_pass.h: the checkpoints of one pass (docs/CHECKPOINT.md), for a driver
 * that hands the library its hooks (ringattn.h, ra_checkpoint): where they
 * go, the checkpoint it goes on from checked against this pass, P, the
 * options that change the numbers and the input, the periodic save and
 * the load. When to stop (signals) and what to print are the caller's.
 * Messages name the directory as `--resume DIR` (not installed). */
#ifndef RA_IO_CKPT_PASS_H
#define RA_IO_CKPT_PASS_H

#include <limits.h>
#include <mpi.h>

#include "checkpoint.h"

/* One pass's checkpoints, from h5io_resume_begin to h5io_resume_end. */
typedef struct h5io_resume {
    MPI_Comm comm;
    int rank, nranks;
    const ra_h5_tuning *tuning;
    const char *pass;        /* "forward" or "backward" */
    const char *dir;         /* where checkpoints go; NULL: none */
    double every;            /* seconds between two saves */
    char path[PATH_MAX];     /* DIR/checkpoint.h5 */
    char from[PATH_MAX];     /* the resumed DIR/checkpoint.h5, or "" */
    h5io_ckpt_head head;     /* its attributes (rank 0's, agreed) */
    char key[H5IO_CKPT_KEY_LEN]; /* "ranks=P", then one "name=value" line
                                per option that changes the numbers */
    const char *fingerprint; /* of the input read (the caller's) */
    double last;             /* MPI_Wtime of the start or the last save */
    int saved, step;         /* checkpoints written, the last one's step */
    ra_checkpoint hooks;     /* the library's, on this pass (arg: k) */
    /* the caller's: whether a stop was asked (NULL: never); told of a
     * save before it (state NULL) and after it (state NULL when it
     * failed), or NULL */
    int (*stop)(void);
    void (*saving)(const struct h5io_resume *k, const ra_state *state,
                   double bytes, double seconds);
} h5io_resume;

/* Before any work, k's comm, rank, nranks, tuning, pass, stop and saving
 * filled: saves go to dir, else to resume's directory (NULL both: nothing
 * to do); the directory checked as an output's, resume's checkpoint read
 * and checked against the pass and P (RA_ERR_ARG naming what differs).
 * k->hooks then ask for a stop when k->stop says so and for a save every
 * `every` seconds, and save. Agreed. */
ra_status h5io_resume_begin(h5io_resume *k, const char *dir, double every,
                            const char *resume);

/* Once the options are resolved, before the input is read: the key of
 * this call; when resuming, RA_ERR_ARG "the checkpoint was made with NAME
 * = X, this run has Y" for the first option that differs. Agreed. */
ra_status h5io_resume_key(h5io_resume *k, const ra_shape *s,
                          const ra_params *p, const ra_masks *masks, int dw);

/* After the input is read and fingerprinted (fp, kept by the caller):
 * RA_ERR_INPUT when the resumed checkpoint's input differs; the hooks
 * then load from it. Agreed. */
ra_status h5io_resume_arm(h5io_resume *k, const char *fp);

/* After a pass that succeeded (its outputs published): the checkpoint
 * removed (rank 0), nothing being left to resume. */
void h5io_resume_end(const h5io_resume *k, ra_status st);

#endif /* RA_IO_CKPT_PASS_H */
