/* model_steps.h: the counts of the performance model that pair ranks with
 * ranks (internal, pure arithmetic: no MPI, no files): visible pairs per
 * rank, the ring's busiest rank at each step, and the ring's bytes per
 * rank and per step. comm/perf/model.c times them.
 *
 * Each restates, in time that grows with P (not P^2), what a loop over
 * every pair of ranks gives: tests/test_plan.c holds them to those loops
 * (model_block_pairs over every pair, ring_plan_held at every step). */
#ifndef RA_MODEL_STEPS_H
#define RA_MODEL_STEPS_H

#include <stdint.h>

#include "model.h"

/* One problem as the counts see it: the shape, the params with the layout
 * resolved, the masks in natural token order (never NULL; members may be),
 * and P ranks. */
typedef struct {
    const ra_shape *s;
    const ra_params *p;
    const model_masks *mk;
    int P;
} model_problem;

/* The largest slice of a length-len axis over P ranks under layout lay, in
 * closed form (balanced: by p's weights). */
int64_t model_slice_most(const ra_params *p, ra_layout lay, int64_t len,
                         int P);

/* Visible pairs (one head, summed over batches) of rank d's queries against
 * rank src's keys. ids: scratch of the largest query slice. */
double model_block_pairs(const model_problem *pb, int d, int src,
                         int64_t *ids);

/* qrow[r]: pairs of rank r's queries against every key; kcol[r]: of every
 * query against rank r's keys (P entries each). 0, or -1 when out of
 * memory. */
int model_rows(const model_problem *pb, double *qrow, double *kcol);

/* diag[t] for t < P: the largest model_block_pairs(r, (r - t) mod P) over
 * the ranks r (the ring's busiest rank at step t; ring-q's at step t is
 * diag[(P - t) mod P]). 0, or -1 when out of memory. */
int model_ring_diag(const model_problem *pb, double *diag);

/* One batch's key segment ids (M, in order; NULL without segments) and
 * the keys [a, b) of segment id, the last looked up: {ids, M, 0, 0, -1}
 * at the start of each batch. */
typedef struct {
    const int64_t *ids;
    int64_t M;
    int64_t a, b, id;
} model_key_segs;

/* The keys query qp of a batch sees under the band, kv_len and, with
 * segments, its segment id: [*first, *last], empty when *last < *first. */
void model_query_keys(ra_band band, int64_t qp, int64_t kv_len,
                      model_key_segs *ks, int64_t id, int64_t *first,
                      int64_t *last);

/* model_ring_diag's steps with packed segments (every step; the caller
 * clears those past the plan's last): 0, or -1 when out of memory. */
int model_diag_segments(const model_problem *pb, double *diag);

/* ring_pass.c's sends: at step t below the plan's last step, rank r sends
 * the rows of block (r - t) mod P that step t + 1 holds, row bytes each, to
 * rank r + 1. sent[r] (P entries): rank r's bytes in all; step[t] (P
 * entries): the step's largest message. Both are added to. 0, or -1 when
 * out of memory. */
int model_ring_sends(const model_problem *pb, double row, double *sent,
                     double *step);

/* The ring's steps as ring_loop.c runs them, rank by rank: rank r computes
 * its queries against block (r - t) mod P at step t, pair_s seconds per
 * pair (one head: the caller's pairs times heads), plus fixed[t]; where
 * x[t] > 0, step t also moves a block to each rank's right, and its
 * receive from r - 1 and its send to r + 1 each end x[t] after both of
 * their ranks have started step t. Rank r starts step t + 1 when its
 * compute and its transfers of step t are done. *makespan: when the
 * last rank ends its last step (P entries of fixed and x). A block is
 * forwarded only when its holder starts the next step, so a rank runs
 * ahead of a slower neighbour by up to a step: *makespan lies between the
 * busiest rank's own steps (its value without transfers) and the sum
 * over steps of each step's busiest rank and its transfer. 0; -1 when
 * out of memory or when the ranks times the steps that see a pair exceed
 * max_blocks (with packed sequences, times the queries a block pair
 * scans), the caller's cue to bound it instead. */
int model_ring_schedule(const model_problem *pb, const double *diag,
                        double pair_s, const double *fixed, const double *x,
                        double max_blocks, double *makespan);

#endif /* RA_MODEL_STEPS_H */
