/* ckpt.h: what a stepped strategy's resume shares (ckpt.c; the rest of
 * checkpoints is in strategy.h): the held block of the loaded step,
 * sent again by the rank that owns it (internal to comm/). */
#ifndef RA_CKPT_H
#define RA_CKPT_H

#include <mpi.h>

#include "strategy.h"

/* One transfer of a fetch: nsend items of type from send to rank `to`,
 * nrecv into recv from rank `from`. */
typedef struct {
    const void *send;
    void *recv;
    int nsend, nrecv;
    MPI_Datatype type;
} strat_fetch_pair;

enum { STRAT_FETCH_MAX = 2 };
typedef struct {
    int from, to, tag, step;
    strat_fetch_pair pair[STRAT_FETCH_MAX];
} strat_fetch;

/* The n (<= STRAT_FETCH_MAX) pairs of f, pair i on tag f->tag + i: every
 * rank sends its own block to the rank that held it at the loaded step
 * and receives the one it held, under the stall watchdog. Collective
 * over the ring. */
ra_status strat_ckpt_fetch(strat_call *c, const strat_fetch *f, int n);

#endif /* RA_CKPT_H */
