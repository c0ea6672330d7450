/* strategy.h: the strategies beside the ring (internal to comm/).
 *
 * ra_forward_ex() hands every call whose params->strategy is not ring to
 * strategy_forward(), which checks and agrees as the ring does and then runs
 * one of the files below. Each takes the same layout slices as the ring and
 * writes the same (o, lse) of this rank's query slice:
 *   allgather.c  all K/V gathered in chunks, each chunk computed on arrival
 *   tree.c       all queries on every rank, partials merged by a reduction
 *   ringq.c      query blocks and their (o, lse) travel, K/V stay
 *   ulysses.c    all-to-all from sequence slices to head groups and back */
#ifndef RA_STRATEGY_H
#define RA_STRATEGY_H

#include <mpi.h>

#include "kernel.h"

/* One call as the caller passed it, with this rank's sizes. */
typedef struct {
    MPI_Comm comm;      /* a duplicate of the caller's, owned by the call */
    int P, r;
    const ra_shape *shape;
    const ra_params *params;
    const ra_masks *masks;
    const float *q, *k, *v; /* this rank's slices (ringattn.h) */
    float *o, *lse;
    ra_layout lay;      /* resolved */
    int segs;           /* segment ids are given */
    int64_t n, m_own;   /* this rank's query and key counts */
    ra_timing *tm;
} strat_call;

/* The ring's argument checks (comm/ring.c): shape, score, window, tiles,
 * threads, timeout, masks; RA_OK or the first problem. */
ra_status ring_check_params(const ra_shape *s, const ra_params *p,
                            const ra_masks *mk);

/* A call of any strategy but ring: check, agree, run, with timings. */
ra_status strategy_forward(MPI_Comm comm, const ra_shape *shape,
                           const ra_params *params, const ra_masks *masks,
                           const float *q, const float *k, const float *v,
                           float *o, float *lse, ra_timing *timing);

/* The kernel's view of n queries at global positions qpos (increasing)
 * against key blocks whose positions the caller sets in blk->mask.kpos
 * and whose size in blk->m; q_seg: the queries' segment ids (B, n) or
 * NULL. Tiles as params give them. */
void strat_block_init(const strat_call *c, int64_t n, const int64_t *qpos,
                      const int64_t *q_seg, ra_block *blk);

/* Fills pos[0 .. count) with the global positions of rank j's slice of a
 * length-len axis; returns the count. */
int64_t strat_slice_pos(const strat_call *c, int64_t len, int j,
                        int64_t *pos);

/* Refuses, on every rank alike, inputs that would leave float32 (as the
 * ring does) for kernel calls on one rank's K/V slice; collective. */
ra_status strat_check_range(const strat_call *c);

ra_status allgather_forward(strat_call *c);

/* Refuses a gather whose K/V (and ids with segs) do not fit
 * params->mem_limit, or by default this node's memory over its ranks (then
 * collective over comm). */
ra_status allgather_fits(MPI_Comm comm, const ra_shape *s,
                         const ra_params *p, int segs);
/* Refuses more ranks than query heads, naming the counts that work. */
ra_status ulysses_fits(const ra_shape *s, int P);
ra_status tree_forward(strat_call *c);
ra_status ringq_forward(strat_call *c);
ra_status ulysses_forward(strat_call *c);

#endif /* RA_STRATEGY_H */
