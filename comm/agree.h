/* agree.h: collective error agreement, the options' fingerprint agreed
 * over the ranks, and the check that MPI and a communicator are usable
 * (library internal, not installed). */
#ifndef RA_AGREE_H
#define RA_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "ringattn.h"

/* Local, no communication: RA_OK when MPI is initialised and not yet
 * finalised and comm is not MPI_COMM_NULL; else RA_ERR_MPI (MPI not
 * usable) or RA_ERR_ARG (MPI_COMM_NULL), the message opening with what.
 * The first check of every public function that takes a communicator. */
ra_status ra_comm_usable(MPI_Comm comm, const char *what);

/* Collective over comm: returns RA_OK when st is RA_OK on every rank, else
 * the status and message of the lowest failing rank, on every rank (the
 * message is set with ra_error_set there). Call it after local validation
 * and before any collective step that a local failure would otherwise skip. */
ra_status ra_agree(MPI_Comm comm, ra_status st);

/* A call's options as a vector of named 64-bit hashes, one per field that
 * every rank must pass alike, with each value's text for the message.
 * Every call fills the same RA_FP_FIELDS slots in the same order whatever
 * its options (an absent field hashes as 0), so that every rank's vector
 * has the same length. */
enum { RA_FP_FIELDS = 64, RA_FP_TEXT = 40 };

typedef struct {
    const char *name;
    uint64_t hash;
    char text[RA_FP_TEXT];
} ra_fp_field;

typedef struct {
    int n;
    ra_fp_field f[RA_FP_FIELDS];
} ra_fingerprint;

/* Appends a field holding an integer, a real (every NaN alike, and both
 * zeros) or an array of bytes (NULL: absent, text "none"; else hashed). */
void ra_fp_int(ra_fingerprint *fp, const char *name, int64_t v);
void ra_fp_real(ra_fingerprint *fp, const char *name, double v);
void ra_fp_bytes(ra_fingerprint *fp, const char *name, const void *x,
                 size_t bytes);
/* An enum's value v, shown as its name text. */
void ra_fp_named(ra_fingerprint *fp, const char *name, int64_t v,
                 const char *text);

/* How a collective of the agreement is waited for: the caller's watched
 * wait (the stall watchdog of the call), or NULL: MPI_Wait. */
typedef struct {
    ra_status (*wait)(void *ctx, MPI_Request *req, const char *phase);
    void *ctx;
} ra_agree_waiter;

/* Collective over comm, one small reduction (and one gather only when the
 * options differ): the errors as ra_agree, then the fingerprints. RA_OK
 * when st is RA_OK and fp alike on every rank; else, on every rank, the
 * lowest failing rank's error, or RA_ERR_ARG "options differ across
 * ranks: FIELD (rank 0: X, rank r: Y)" for the first field that differs. */
ra_status ra_agree_options(MPI_Comm comm, ra_status st,
                           const ra_fingerprint *fp,
                           const ra_agree_waiter *waiter);

#endif /* RA_AGREE_H */
