/* ring_loop.c: the one step engine of every ring (strategy.h): the ring's
 * K/V blocks and its backward's accumulators (ring_pass.c, ring_bwd.c),
 * ring-q's travelling queries and (o, lse) (ringq.c) and hybrid's K/V
 * blocks between groups (hybrid.c).
 *
 * Step t: post the step's transfers (the next block from the left, the
 * current one to the right), visit the current block with the kernel,
 * which tests the transfers between tiles so that they move while it
 * computes (Open MPI has no progress thread), wait for them under the
 * stall watchdog, then settle what needs the step's data (which may post
 * and wait once more), report the step. */
#include <stdio.h>

#include "internal.h"
#include "strategy.h"

void ring_poll(void *ctx)
{
    ring_reqs *rq = ctx;
    int done = 0;
    if (!rq->failed && MPI_Testall(2 * RING_PAIRS, rq->req, &done,
                                   MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        rq->failed = 1;
}

/* Waits for step t's transfers under the stall watchdog (strat_wait),
 * which names the neighbour waited for. */
static ra_status loop_wait(strat_call *c, const ring_loop *lp, int t,
                           ring_reqs *rq)
{
    if (rq->failed)
        return ra_error_set(RA_ERR_MPI, "%s: step %d: testing the "
                            "transfers failed", c->name, t);
    int peer[2 * RING_PAIRS];
    for (int i = 0; i < RING_PAIRS; i++) {
        peer[i] = lp->left;
        peer[RING_PAIRS + i] = lp->right;
    }
    char phase[32];
    snprintf(phase, sizeof phase, "step %d", t);
    const strat_watch w = {phase, peer, RING_PAIRS};
    return strat_wait(c, 2 * RING_PAIRS, rq->req, &w);
}

/* Frees the datatypes of step t's transfers, which are over. */
static ra_status loop_free(const strat_call *c, int t, ring_reqs *rq)
{
    ra_status st = RA_OK;
    for (int i = 0; i < 2 * RING_PAIRS; i++)
        if (rq->types[i] != MPI_DATATYPE_NULL &&
            MPI_Type_free(&rq->types[i]) != MPI_SUCCESS)
            st = ra_error_set(RA_ERR_MPI, "%s: step %d: freeing a datatype "
                              "failed", c->name, t);
    return st;
}

/* One step: post, visit, wait, settle (and wait), free; the visit and
 * the settle count as compute, the waits as communication. */
static ra_status loop_step(strat_call *c, const ring_loop *lp, int t,
                           ring_reqs *rq)
{
    ra_status st = lp->post(lp->ctx, t, rq);
    const double t0 = MPI_Wtime();
    if (st == RA_OK)
        lp->visit(lp->ctx, t, rq);
    const double t1 = MPI_Wtime();
    if (st == RA_OK)
        st = loop_wait(c, lp, t, rq);
    const double t2 = MPI_Wtime();
    if (st == RA_OK && lp->settle)
        st = lp->settle(lp->ctx, t, rq);
    const double t3 = MPI_Wtime();
    if (st == RA_OK && lp->settle)
        st = loop_wait(c, lp, t, rq);
    c->tm->compute += (t1 - t0) + (t3 - t2);
    c->tm->comm_wait += (t2 - t1) + (MPI_Wtime() - t3);
    if (c->stalled)
        return st; /* the datatypes stay with the transfers in flight */
    const ra_status fst = loop_free(c, t, rq);
    return st != RA_OK ? st : fst;
}

/* The boundary before step t: a checkpoint when the ranks ask for one. */
static ra_status loop_boundary(strat_call *c, const ring_loop *lp, int t)
{
    if (!c->params->exec.checkpoint || !lp->state || t >= lp->steps)
        return RA_OK;
    ra_state s = {.step = t, .steps = lp->steps};
    lp->state(lp->ctx, t, &s);
    return strat_ckpt_boundary(c, &s);
}

ra_status ring_loop_run(strat_call *c, ring_loop *lp)
{
    ra_status st = RA_OK;
    for (int t = lp->start; t < lp->steps && st == RA_OK; t++) {
        ring_reqs rq = {.failed = 0};
        for (int i = 0; i < 2 * RING_PAIRS; i++) {
            rq.req[i] = MPI_REQUEST_NULL;
            rq.types[i] = MPI_DATATYPE_NULL;
        }
        st = loop_step(c, lp, t, &rq);
        if (st == RA_OK)
            strat_step(c, ++lp->done, lp->total);
        if (st == RA_OK)
            st = loop_boundary(c, lp, t + 1);
    }
    return st;
}
