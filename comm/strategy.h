/* strategy.h: the strategies beside the ring (internal to comm/).
 *
 * ra_forward_ex() hands every call whose params->strategy is not ring to
 * strategy_forward(), which checks and agrees as the ring does and then runs
 * one of the files below. Each takes the same layout slices as the ring and
 * writes the same (o, lse) of this rank's query slice:
 *   allgather.c  all K/V gathered in chunks, each chunk computed on arrival
 *   tree.c       all queries on every rank, partials merged by a reduction
 *   ringq.c      query blocks and their (o, lse) travel, K/V stay
 *   ulysses.c    all-to-all from sequence slices to head groups and back
 *   hybrid.c     ulysses inside groups of ranks, a K/V ring between them */
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
    int stepped;        /* strat_step was called */
} strat_call;

/* Reports step done of total to the caller's progress callback. */
void strat_step(strat_call *c, int done, int total);

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

/* ---- head groups (ulysses.c), shared with hybrid.c ---- */

/* Heads of one rank of a head-parallel group: query heads [h0, h1), kv
 * heads [g0, g1) (those the query heads read). */
typedef struct {
    int64_t h0, h1, g0, g1;
} head_group;

/* Where local head hl of a group lives in the gathered arrays: in the run
 * of heads [start, start + width) (relative to h0) that read one kv head;
 * kv heads are runs of one. */
typedef struct {
    int64_t start, width;
} head_run;

/* Where a source rank's tokens land in gathered arrays of len tokens:
 * token i of its slice of the axis (of length axis) at idx[i], or at its
 * global position when idx is NULL. */
typedef struct {
    int64_t axis, len;
    const int64_t *idx;
} head_dest;

/* Query heads H/P each over P ranks (the first H % P one more). */
head_group heads_of(const ra_shape *s, int p, int P);

/* Copies heads [a, z) of x (B, n, heads, d) into out (B, n, z - a, d);
 * returns the end of what it wrote. */
float *pack_heads(const float *x, int64_t B, int64_t n, int64_t heads,
                  int64_t d, int64_t a, int64_t z, float *out);

/* A received block (B, n_src, nh, d) of rank src's tokens (layout slice
 * of c's communicator) into the runs of dst (B, len, run width, d). */
void to_natural(const strat_call *c, const head_group *hg, int src,
                const head_dest *dst_of, int64_t nh, int64_t d, int kv,
                const float *blk, float *dst);

/* The reverse for the outputs: rank dst's tokens of o (B, n_d, nh, Dv)
 * then lse (B, nh, n_d) into blk, from the gathered runs o, lse. */
void from_natural(const strat_call *c, const head_group *hg, int dst,
                  const head_dest *src_of, const float *o, const float *lse,
                  float *blk);

/* Refuses a gather whose K/V (and ids with segs) do not fit
 * params->mem_limit, or by default this node's memory over its ranks (then
 * collective over comm). */
ra_status allgather_fits(MPI_Comm comm, const ra_shape *s,
                         const ra_params *p, int segs);
/* Bytes one rank allocates for the gathered K/V and their ids (segs);
 * -1 when the count overflows. Pure. */
int64_t allgather_bytes(const ra_shape *s, int segs);
/* Refuses more ranks than query heads, naming the counts that work. */
ra_status ulysses_fits(const ra_shape *s, int P);
ra_status tree_forward(strat_call *c);
ra_status ringq_forward(strat_call *c);
ra_status ulysses_forward(strat_call *c);
ra_status hybrid_forward(strat_call *c);

/* The group size u of hybrid (params->ulysses_size, or the ranks of one
 * node, which must be the same on every node), refused unless u divides
 * P and u <= H. Collective when ulysses_size is 0. */
ra_status hybrid_group_size(MPI_Comm comm, const ra_shape *s,
                            const ra_params *p, int *u);

/* Refuses groups of u ranks that do not divide P or outnumber the query
 * heads. Pure. */
ra_status hybrid_group_check(const ra_shape *s, int P, int u);

#endif /* RA_STRATEGY_H */
