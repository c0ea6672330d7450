/* ring.h: the ring row's state and its passes (internal to comm/).
 *
 * ring.c sets the ring of an open call up (buffers, the plan) and tears it
 * down; ring_pass.c moves the K/V blocks through the ring loop
 * (ring_loop.c). */
#ifndef RA_RING_H
#define RA_RING_H

#include <mpi.h>

#include "kernel.h"
#include "plan.h"
#include "strategy.h"

/* A held block: rows of K (B, cnt, row_k floats) then V (B, cnt, G, Dv) in
 * one float buffer, segment ids (B, cnt) in another. */
typedef struct {
    float *kv;
    int64_t *seg;
} ring_buf;

/* The ring's state beside the call's (strategy.h); set up once per call
 * (ring.c), owned by the row's forward or backward. */
typedef struct {
    strat_call *c;        /* the open call: comm, sizes, positions */
    int last;             /* the last step run */
    ring_plan plan;
    int64_t mmax;         /* the largest block */
    int64_t row_k, row_v; /* floats per key row of K (or W_k k) and of V */
    void *mem;            /* the one block behind buf, kpos, qp, kp */
    ring_buf buf[2];      /* the two alternating blocks; with wire16 only
                             buf[0].kv, the current block widened to fp32
                             (the ids in both) */
    int wire16;           /* K/V travel as bf16 (ra_params_wire_bf16) */
    uint16_t *w16[2];     /* wire16: the two alternating K/V blocks in bf16
                             (the layout of buf's) */
    const float *own_k, *own_v; /* step 0's block read in place: this
                             rank's k (or projection) and v when it holds
                             all of them as they are (ring_pack_own), or
                             NULL: buf[0] holds a copy */
    ra_block blk;         /* the kernel's view of the current block */
    int64_t *kpos;        /* global positions of the held block's keys */
    float *qp, *kp;       /* additive: W_q q (B, n, H, A), W_k k (B, m, G, A) */
    ra_workspace *ws;
    int steps_done, steps_total; /* of every pass of the call */
    int start;            /* the step the next pass starts at: 0, or a
                             loaded checkpoint's (ring_resume) */
} ring_state;

/* Sizes, plans and allocates the ring of call c, describes the problem to
 * the kernel and, with the additive score, projects q and k: the part of
 * a ring call's set-up that is the ring's own (the caller agrees on the
 * status). ring_free() ends it in every case. */
ra_status ring_setup(ring_state *rs, strat_call *c);
void ring_free(ring_state *rs);

/* What a pass does at each step beside moving K/V (ring_pass): visit
 * the held block, kb with blk.m key rows (B, m, row_k floats) and vb
 * their values (B, m, G, Dv), passing ring_poll and rq to the kernel;
 * post (NULL: none) posts more transfers of step t into the pair
 * RING_PASS_EXTRA of rq; settle (NULL: none) works once they are in;
 * state (NULL: the pass takes no checkpoints) names the pass's state at
 * the boundary before step t (ra_state: pass, parts), the same parts and
 * counts for every t. */
enum { RING_PASS_EXTRA = 2 };
typedef struct {
    void (*visit)(ring_state *rs, const float *kb, const float *vb,
                  ring_reqs *rq, void *arg);
    ra_status (*post)(ring_state *rs, int t, ring_reqs *rq, void *arg);
    ra_status (*settle)(ring_state *rs, int t, void *arg);
    void *arg;
    void (*state)(ring_state *rs, int t, ra_state *st, void *arg);
} ring_pass_ops;

/* Makes this rank's own keys (k, or its projection, rows of row_k
 * floats), v and key ids the block of step 0: K/V read in place (own_k,
 * own_v) when step 0 holds all of this rank's keys and they travel as
 * fp32, else copied into buf[0] (into w16[0] with wire16); the ids are
 * copied into buf[0] always. */
void ring_pack_own(ring_state *rs);

/* Runs steps rs->start .. last on the ring loop (strategy.h): the
 * transfers of the next block, ops' visit of the current one. At start 0
 * ring_pack_own must have made this rank's own block step 0's; at a later
 * start ring_resume has fetched that step's. */
ra_status ring_pass(ring_state *rs, const ring_pass_ops *ops);

/* Before a pass with checkpoints (ops->state) and the call's load
 * callback: loads the state ops->state(rs, 1) names (the pass sees the
 * loaded step in rs->start and moves what depends on the step itself),
 * then fetches the block of that step from the rank it came from, as the
 * ring would have held it (K/V read again from the owner's slices: the
 * same values, bf16 with wire16). Else rs->start = 0. Collective. */
ra_status ring_resume(ring_state *rs, const ring_pass_ops *ops);

#endif /* RA_RING_H */
