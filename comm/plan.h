/* plan.h: which keys each ring step must carry (pure, no MPI).
 *
 * With a causal mask, a window or padding, most ranks never see most of the
 * other ranks' keys. The plan gives, for every block (the keys that started
 * at rank src) and ring step t, the index range of the block that rank
 * src + t must hold: the hull of what it and every rank after it on the
 * ring still need. Blocks shrink as they travel, and the ring stops after
 * the last step at which anybody needs anything. */
#ifndef RA_PLAN_H
#define RA_PLAN_H

#include <stdint.h>

#include "band.h"
#include "internal.h"

/* [a, b) in the index space of one block (0 .. block count) */
typedef struct {
    int64_t a, b;
} ring_span;

typedef struct {
    ra_layout layout;
    int64_t N, M;
    int P;
    ra_band band;          /* query at position p sees keys in
                              [p + lo, p + hi] */
    ra_band cut;           /* the balanced layout's weights (ra_cut_band) */
    int64_t q_end, kv_end; /* no query at or after q_end sees anything; no
                              key at or after kv_end is seen */
} ring_plan;

/* The plan of a forward pass; masks may be NULL. */
ring_plan ring_plan_make(const ra_shape *shape, const ra_params *params,
                         const ra_masks *masks, int P);

/* The keys of block src that rank d's queries may see (a hull). */
ring_span ring_plan_need(const ring_plan *pl, int d, int src);

/* ring_plan_need's ends before the emptiness test: .a from rank d's first
 * query (the block's count when it is at or past q_end), .b from its last
 * below q_end; the need is [a, b) when a < b, else nothing. Where the
 * ranks' first and last query positions grow with d, so do both ends. */
ring_span ring_plan_ends(const ring_plan *pl, int d, int src);

/* The keys of block src held at step t (by rank (src + t) mod P) when the
 * ring runs steps 0 .. last. */
ring_span ring_plan_held(const ring_plan *pl, int src, int t, int last);

/* The last step anybody needs: 0 .. P-1, in O(P log P) need tests. */
int ring_plan_last_step(const ring_plan *pl);

/* 1 for the layouts that give each rank one run of consecutive tokens
 * (contiguous, balanced): the ranks' first and last positions grow with
 * the rank. */
int ring_layout_runs(ra_layout lay);

/* The ranks d whose queries may see block src's keys, from the band alone
 * (what ring_plan_need checks exactly): with one run per rank
 * (ring_layout_runs) their first and last positions grow with d, so they
 * are one range [*da, *dz] (empty when *dz < *da); other layouts: every
 * rank. */
void ring_plan_candidates(const ring_plan *pl, int src, int *da, int *dz);

/* The u-th candidate step of block src, counting from the farthest: the
 * candidate ranks [da, dz] behind src (steps P - src + d), then those
 * ahead (steps d - src); -1 after the last. */
int ring_plan_step_at(const ring_plan *pl, int src, int da, int dz, int u);

/* Where the runs of a layout's slices of a length-len axis change length
 * (the balanced one weighed by cut): ranks r whose runs differ from those
 * of rank r - 1, into k (at most two; balanced: three, rank 1, the rank
 * where its middle ranks' runs get one token shorter, and rank P - 1);
 * returns how many. Between two kinks every rank's runs are as long. */
int ring_layout_kinks(ra_layout lay, ra_band cut, int64_t len, int P,
                      int k[3]);

/* The pieces of ranks [lo, hi] between the kinks of the query axis, the
 * highest first, into piece; returns how many (1 to 3). Zigzag and
 * striped slices only (at most two kinks). */
int ring_plan_pieces(const ring_plan *pl, int lo, int hi, int piece[3][2]);

#endif
