/* checkpoint.h: the checkpoint file of a run (run --checkpoint, --resume;
 * docs/CHECKPOINT.md): every rank's state at one step boundary
 * (ringattn.h, ra_state), written collectively and atomically like the
 * outputs, and read back with its integrity checked (not installed).
 *
 * The file: one float32 dataset /state/NAME per part, the ranks' parts one
 * after the other in rank order; /counts (P, parts) int64 and /sums
 * (P, parts) uint64, each rank's count and the hash of its part's bytes;
 * root attributes kind = "checkpoint", pass, step, steps, ranks, key (the
 * options that change the numbers, one "name=value" line each) and
 * fingerprint (the input's, h5io_fingerprint_make). */
#ifndef RA_IO_CHECKPOINT_H
#define RA_IO_CHECKPOINT_H

#include <mpi.h>

#include "h5io.h"

/* The longest key text (the options' lines) a checkpoint records. */
#define H5IO_CKPT_KEY_LEN 4096

/* What a checkpoint records besides the state. */
typedef struct {
    const char *key;         /* the options' lines */
    const char *fingerprint; /* the input's */
    const ra_h5_tuning *tuning; /* the write's MPI-IO tuning, or NULL */
} h5io_ckpt_meta;

/* Writes state (this rank's parts) to path, replacing the checkpoint there
 * only once the new one is complete and read back (h5io_commit): the
 * name holds the earlier checkpoint or the whole new one. Collective, the
 * same status on every rank. */
ra_status h5io_ckpt_write(MPI_Comm comm, const char *path,
                          const h5io_ckpt_meta *meta, const ra_state *state);

/* The root attributes of a checkpoint, read on one rank (not collective):
 * RA_ERR_INPUT naming path when it is not a checkpoint. */
typedef struct {
    char pass[16];
    int64_t step, steps, ranks;
    char key[H5IO_CKPT_KEY_LEN];
    char fingerprint[H5IO_FP_LEN];
} h5io_ckpt_head;
ra_status h5io_ckpt_head_read(const char *path, h5io_ckpt_head *head);

/* Reads this rank's parts into state's buffers (their names and counts as
 * state gives them) and state->step, collectively: RA_ERR_INPUT naming
 * path, the part and the rank when a part is missing, its count differs
 * or its bytes do not hash to the recorded sum (a corrupt file). */
ra_status h5io_ckpt_read(MPI_Comm comm, const char *path,
                         const ra_h5_tuning *tuning, ra_state *state);

#endif /* RA_IO_CHECKPOINT_H */
