/* agree.c: the one way ranks agree before a collective step: on an error,
 * and on a call's options (their fingerprint). Validate locally, then
 * agree, then start the collectives: a failure or a differing option on
 * one rank must never leave the others waiting inside a collective. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "internal.h"

ra_status ra_comm_usable(MPI_Comm comm, const char *what)
{
    int up = 0, down = 0;
    if (MPI_Initialized(&up) != MPI_SUCCESS || !up)
        return ra_error_set(RA_ERR_MPI, "%s: MPI is not initialised "
                            "(MPI_Init must come first)", what);
    if (MPI_Finalized(&down) != MPI_SUCCESS || down)
        return ra_error_set(RA_ERR_MPI, "%s: MPI is already finalised",
                            what);
    if (comm == MPI_COMM_NULL)
        return ra_error_set(RA_ERR_ARG, "%s: the communicator is "
                            "MPI_COMM_NULL", what);
    return RA_OK;
}

/* Waits for req with the waiter's wait, or MPI_Wait. */
static ra_status wait_one(const ra_agree_waiter *w, MPI_Request *req,
                          const char *phase)
{
    if (w && w->wait)
        return w->wait(w->ctx, req, phase);
    if (MPI_Wait(req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Wait failed", phase);
    return RA_OK;
}

/* The status and message of rank first, on every rank. */
static ra_status verdict_share(MPI_Comm comm, int rank, int first,
                               ra_status st, const ra_agree_waiter *w)
{
    struct {
        int status;
        char message[512];
    } verdict;
    memset(&verdict, 0, sizeof verdict);
    if (rank == first) {
        verdict.status = (int)st;
        snprintf(verdict.message, sizeof verdict.message, "%s",
                 ra_error_message());
    }
    MPI_Request req;
    if (MPI_Ibcast(&verdict, (int)sizeof verdict, MPI_BYTE, first, comm,
                   &req) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Ibcast of an error failed");
    const ra_status got = wait_one(w, &req, "the agreement of an error");
    if (got != RA_OK || rank == first)
        return got != RA_OK ? got : st;
    return ra_error_set((ra_status)verdict.status, "%s", verdict.message);
}

ra_status ra_agree(MPI_Comm comm, ra_status st)
{
    int rank, nranks, first;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Comm_rank/size failed");
    first = st != RA_OK ? rank : nranks;
    if (MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Allreduce of a status failed");
    if (first == nranks)
        return RA_OK;
    return verdict_share(comm, rank, first, st, NULL);
}

static ra_fp_field *fp_next(ra_fingerprint *fp, const char *name)
{
    static ra_fp_field spill; /* beyond RA_FP_FIELDS: a bug, never read */
    if (fp->n >= RA_FP_FIELDS)
        return &spill;
    ra_fp_field *f = &fp->f[fp->n++];
    f->name = name;
    return f;
}

void ra_fp_int(ra_fingerprint *fp, const char *name, int64_t v)
{
    ra_fp_field *f = fp_next(fp, name);
    f->hash = (uint64_t)v;
    snprintf(f->text, sizeof f->text, "%lld", (long long)v);
}

void ra_fp_named(ra_fingerprint *fp, const char *name, int64_t v,
                 const char *text)
{
    ra_fp_field *f = fp_next(fp, name);
    f->hash = (uint64_t)v;
    snprintf(f->text, sizeof f->text, "%s", text);
}

void ra_fp_real(ra_fingerprint *fp, const char *name, double v)
{
    ra_fp_field *f = fp_next(fp, name);
    if (isnan(v))
        v = NAN; /* every NaN alike */
    if (v == 0)
        v = 0.0; /* and both zeros */
    memcpy(&f->hash, &v, sizeof v);
    snprintf(f->text, sizeof f->text, "%.15g", v);
    if (strtod(f->text, NULL) != v && !isnan(v))
        snprintf(f->text, sizeof f->text, "%.17g", v);
}

void ra_fp_bytes(ra_fingerprint *fp, const char *name, const void *x,
                 size_t bytes)
{
    ra_fp_field *f = fp_next(fp, name);
    if (!x) {
        f->hash = 0;
        snprintf(f->text, sizeof f->text, "none");
        return;
    }
    const unsigned char *b = x;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)bytes;
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t w = 0;
        memcpy(&w, b + i, bytes - i < 8 ? bytes - i : 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    f->hash = h ? h : 1; /* present is never absent */
    snprintf(f->text, sizeof f->text, "%zu bytes hashing to %08llx", bytes,
             (unsigned long long)(h >> 32));
}

typedef struct {
    uint64_t hash;
    char text[RA_FP_TEXT];
} fp_value;

/* Field i differs between the ranks: rank 0's value and that of the
 * lowest rank whose value differs from it, on every rank, in the message. */
static ra_status options_differ(MPI_Comm comm, int rank, int nranks,
                                const ra_fingerprint *fp, int i,
                                const ra_agree_waiter *w)
{
    const char *name = i < fp->n ? fp->f[i].name : "an option";
    fp_value mine = {0}, first = {0}, other = {0};
    if (i < fp->n) {
        mine.hash = fp->f[i].hash;
        memcpy(mine.text, fp->f[i].text, sizeof mine.text);
    }
    first = mine;
    MPI_Request req;
    ra_status st = RA_OK;
    if (MPI_Ibcast(&first, (int)sizeof first, MPI_BYTE, 0, comm, &req) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Ibcast of an option failed");
    if ((st = wait_one(w, &req, "the agreement of the options")) != RA_OK)
        return st;
    int at = mine.hash != first.hash ? rank : nranks;
    if (MPI_Iallreduce(MPI_IN_PLACE, &at, 1, MPI_INT, MPI_MIN, comm, &req) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Iallreduce of an option failed");
    if ((st = wait_one(w, &req, "the agreement of the options")) != RA_OK)
        return st;
    other = mine;
    if (MPI_Ibcast(&other, (int)sizeof other, MPI_BYTE, at % nranks, comm,
                   &req) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Ibcast of an option failed");
    if ((st = wait_one(w, &req, "the agreement of the options")) != RA_OK)
        return st;
    return ra_error_set(RA_ERR_ARG, "options differ across ranks: %s "
                        "(rank 0: %s, rank %d: %s); every rank must pass the "
                        "same", name, first.text, at, other.text);
}

ra_status ra_agree_options(MPI_Comm comm, ra_status st,
                           const ra_fingerprint *fp,
                           const ra_agree_waiter *waiter)
{
    enum { F = RA_FP_FIELDS };
    int rank, nranks;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Comm_rank/size failed");
    /* one reduction: the first failing rank, each field's least hash and
     * (complemented) its greatest */
    int64_t v[1 + 2 * F];
    v[0] = st != RA_OK ? rank : nranks;
    for (int i = 0; i < F; i++) {
        const int64_t h = i < fp->n ? (int64_t)fp->f[i].hash : 0;
        v[1 + i] = h;
        v[1 + F + i] = ~h;
    }
    MPI_Request req;
    if (MPI_Iallreduce(MPI_IN_PLACE, v, 1 + 2 * F, MPI_INT64_T, MPI_MIN, comm,
                       &req) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Iallreduce of the options "
                            "failed");
    const ra_status got = wait_one(waiter, &req,
                                   "the agreement of the options");
    if (got != RA_OK)
        return got;
    if (v[0] < nranks)
        return verdict_share(comm, rank, (int)v[0], st, waiter);
    for (int i = 0; i < F; i++)
        if (v[1 + i] != ~v[1 + F + i])
            return options_differ(comm, rank, nranks, fp, i, waiter);
    return RA_OK;
}
