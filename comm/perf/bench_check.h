/* bench_check.h: what `ringattn bench` regenerates from its seed and
 * checks (bench_check.c): the random masks of a configuration, the exact
 * count of visible pairs, a sampled fp64 check of the output. `ringattn
 * plan` makes the same masks to predict bench's runs. */
#ifndef RA_BENCH_CHECK_H
#define RA_BENCH_CHECK_H

#include <mpi.h>
#include <stdint.h>

#include "compare.h"
#include "internal.h"

/* What regenerates a configuration: the run's options (p; the masks need
 * none), the seed, the random masks asked for (lens: --lens random;
 * segment_avg: --segments AVG, 0 none) and the query rows to check. */
typedef struct {
    const ra_params *p;
    uint64_t seed;
    int lens;
    int64_t segment_avg;
    int64_t check_rows;
} bench_gen;

/* Mask data of one configuration, this rank's part. */
typedef struct {
    int64_t *q_lens, *kv_lens;   /* (B) or NULL */
    int64_t *q_seg, *kv_seg;     /* (B, n), (B, m) or NULL */
    ra_masks view;
} bench_masks;

/* Generates the masks the options ask for, as `ringattn gen` would write
 * them (same streams), for this rank's slices; RA_ERR_NOMEM otherwise.
 * bench_masks_free() releases them either way. */
ra_status bench_masks_make(const bench_gen *gen, const ra_shape *s,
                           const ra_slice *qs, const ra_slice *ks,
                           bench_masks *bm);
void bench_masks_free(bench_masks *bm);

/* Visible (query, key) pairs of this rank's queries, exactly, under every
 * mask; NaN when memory ran out. */
double bench_local_pairs(const bench_gen *gen, const ra_shape *s,
                         const ra_slice *qs, const bench_masks *bm);

/* Checks up to check_rows local query rows of batch 0 and B - 1 (all heads)
 * against the fp64 reference on regenerated inputs and masks, into the
 * tally t (a check that cannot run counts as a bad row). */
void bench_check_output(const bench_gen *gen, const ra_shape *s,
                        const ra_slice *qs, const bench_masks *bm,
                        const float *out, const float *lse, ra_tally *t);

/* The exact check of a backward pass (bench_check_bwd.c; ringattn-sim's
 * exact mode): this rank's dq, dk, dv slices (B, n, H, D), (B, m, G, D),
 * (B, m, G, Dv) of the seed's inputs under layout, gathered on rank 0 and
 * compared with the reference gradients; the largest relative Frobenius
 * error of the three in *err (INFINITY when the check could not run) on
 * every rank; 1 when below RA_TOLERANCE. Dot score, fp32 products and
 * wire; it holds all of q, k, v, dO and the gradients on rank 0.
 * Collective over comm. */
typedef struct {
    MPI_Comm comm;
    int rank, P;
    const ra_shape *s;
    const ra_params *p;
    ra_layout layout;
    uint64_t seed;
    const float *dq, *dk, *dv;
} bench_bwd_check;
int bench_check_backward(const bench_bwd_check *c, double *err);

#endif /* RA_BENCH_CHECK_H */
