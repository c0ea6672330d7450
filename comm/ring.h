/* ring.h: the state of one ring call and its passes (internal to comm/).
 *
 * ring.c sets a call up (checks, agreement, buffers, the plan) and tears it
 * down; ring_pass.c runs the steps: post the transfer of the next block,
 * visit the current one, wait (with the stall watchdog). */
#ifndef RA_RING_H
#define RA_RING_H

#include <mpi.h>

#include "kernel.h"
#include "plan.h"

/* A held block: rows of K (B, cnt, row_k floats) then V (B, cnt, G, Dv) in
 * one float buffer, segment ids (B, cnt) in another. */
typedef struct {
    float *kv;
    int64_t *seg;
} ring_buf;

/* Requests of one ring step, polled between tiles. */
typedef struct {
    MPI_Request req[4]; /* receive K/V, send K/V, receive ids, send ids */
    MPI_Datatype types[4]; /* their datatypes, freed after the wait */
    int pending;
    int failed; /* a poll between tiles returned an MPI error */
} ring_step;

/* Everything one call needs; set up once (ring.c), owned by the call. */
typedef struct {
    MPI_Comm comm;        /* a duplicate of the caller's communicator */
    int P, r, last;       /* ranks, this rank, the last step run */
    const ra_shape *shape;
    ra_layout lay;        /* resolved */
    ring_plan plan;
    int segs, may_poll, threads;
    double stall_timeout; /* 0: wait forever */
    int stalled;          /* a wait gave up: transfers are still in flight */
    int right_cross;      /* rank r + 1, where all this rank sends go, runs
                             on another node */
    int64_t n, m_own, mmax; /* local queries, own keys, the largest block */
    int64_t row_k, row_v; /* floats per key row of K (or W_k k) and of V */
    void *mem;            /* the one block behind buf, the positions,
                             qp/kp, qr/kr and slopes (ring.c) */
    ring_buf buf[2];      /* the two alternating blocks */
    ra_block blk;         /* the kernel's view of the current block */
    int64_t *qpos, *kpos; /* global positions of local queries, block keys */
    float *qp, *kp;       /* additive: W_q q (B, n, H, A), W_k k (B, m, G, A) */
    float *qr, *kr;       /* RoPE: rotated q (B, n, H, D), k (B, m, G, D) */
    double *slopes;       /* ALiBi: the slopes in use (H) */
    int64_t *qalign;      /* per-sequence alignment: the local queries'
                             aligned positions (B, n) (comm/align.h), or
                             NULL: i + (M - N) */
    ra_workspace *ws;
    ra_timing *tm;
    const ra_params *params; /* for its progress callback */
    int steps_done, steps_total; /* of every pass of the call */
} ring_state;

/* The arguments of one call, as the caller passed them. */
typedef struct {
    const ra_shape *shape;
    const ra_params *params;
    const ra_masks *masks;
    const float *q, *k, *v;
    float *o, *lse;
    ra_attn_map *map; /* the map to write, when want_map */
    int want_map;
} ring_args;

/* The set-up of a call for another pass than the forward's (ring_bwd.c):
 * checks the arguments, agrees over the ranks on st (the caller's own
 * local verdict) and on those checks, sizes and allocates the ring, checks
 * the inputs' range and describes the problem to the kernel. rs must start
 * as {.comm = MPI_COMM_NULL, .tm = a timing}; every rank returns the same
 * status, and ring_close() ends the call in every case. */
ra_status ring_open(MPI_Comm user_comm, const ring_args *a, ra_status st,
                    ring_state *rs);

/* Ends a call that ring_open() began: frees the ring, completes rs's
 * timing (cross-node bytes, total since t_start) into *timing when given,
 * and returns the call's status: st, or the tear-down's failure. */
ra_status ring_close(ring_state *rs, ra_status st, double t_start,
                     ra_timing *timing);

/* The additive score's projections of this rank's q and k into rs->qp,
 * rs->kp; RoPE's rotated copies of them into rs->qr, rs->kr (at global
 * positions; uses rs->kpos, free until the first step). Once per call,
 * before the passes. */
void ring_project(ring_state *rs, const ring_args *a);
void ring_rotate(ring_state *rs, const ring_args *a);

/* RoPE's rotation of this rank's queries x (B, n, H, D) at their aligned
 * positions (rs->qalign, or rs->qpos + M - N), or with transpose its
 * transpose (how a gradient goes back). */
void ring_rope_queries(const ring_state *rs, const ra_params *p, float *x,
                       int transpose);

/* What a pass does with the block held at one step: kb holds blk.m key
 * rows (B, m, row_k floats), vb their values (B, m, G, Dv). */
typedef void (*ring_visit)(ring_state *rs, const float *kb, const float *vb,
                           ring_step *step, void *arg);

/* Copies this rank's own keys (k, or its projection, rows of row_k floats),
 * v and key ids into buf[0] as the block of step 0 holds them. */
void ring_pack_own(ring_state *rs, const float *k, const float *v,
                   const int64_t *seg);

/* Runs steps 0 .. last: posts the transfers of the next block, visits the
 * current one, waits. buf[0] must hold this rank's own block. */
ra_status ring_pass(ring_state *rs, ring_visit visit, void *arg);

/* The end of a call's passes under the stall watchdog: each rank waits
 * until its left neighbour has finished its steps too, so that a rank
 * stopped after the last transfer is found here, named, and not in the
 * caller's next collective. Nothing to do at P = 1 or without a timeout. */
ra_status ring_finish(ring_state *rs);

/* Tests every request of req[0..n) once (MPI_REQUEST_NULL entries count
 * as done); *progressed is set when one of them completed. Returns the
 * number still active, or -1 on an MPI error. */
int ring_requests_test(MPI_Request *req, int n, int *progressed);

/* Waits for req[0..n) (MPI_REQUEST_NULL entries count as done). With
 * timeout > 0 it gives up when none of them has completed for that many
 * seconds. Returns 0 when all completed, 1 when it gave up, -1 on an MPI
 * error. */
int ring_requests_wait(MPI_Request *req, int n, double timeout);

/* The progress callback of the kernel: tests the step's requests. */
void ring_poll(void *step);

#endif /* RA_RING_H */
