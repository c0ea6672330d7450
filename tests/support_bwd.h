/* support_bwd.h: test helpers of the backward pass: the fp64 reference
 * gradients of a whole problem and their whole-tensor comparison. */
#ifndef RA_TEST_SUPPORT_BWD_H
#define RA_TEST_SUPPORT_BWD_H

#include "backward.h"
#include "support.h"

/* The fp64 reference of a full problem under params' rules (every score,
 * RoPE and ALiBi) and the global masks (NULL: none), all in natural token
 * order:
 *   o (B, N, H, Dv) and lse (B, H, N) as float32 (the forward state a
 *   backward pass reads), dq (B, N, H, D), dk (B, M, G, Dk),
 *   dv (B, M, G, Dv) in double; with the additive score dw: dw_q (A, D),
 *   dw_k (A, Dk), dw_v (A) one after the other (else NULL). dout
 *   (B, N, H, Dv). RoPE is applied to the rows here, in fp64, and dq, dk
 *   taken back through it by the rotation at minus the positions. */
typedef struct {
    float *o, *lse;
    double *dq, *dk, *dv, *dw;
    double *dsinks; /* (H) with params->sinks (o and lse then include
                       them), else NULL */
} bwd_ref;

void bwd_ref_make(bwd_ref *r, const problem *p, const ra_params *params,
                  const test_masks *masks, const float *dout);
void bwd_ref_free(bwd_ref *r);

/* The masks of a test case: random global lens (B each) and segment ids
 * (B, N), (B, M) of mean length avg for the reference (global), this
 * rank's ids of its slices in lp for the library (local); lens and segs
 * say which the case uses (the others NULL in both). */
typedef struct {
    int64_t *lens, *seg, *qseg_loc, *kseg_loc;
    test_masks global;
    ra_masks local;
} case_masks;

void case_masks_make(case_masks *cm, const ra_shape *s, int lens, int segs,
                     int64_t avg, uint64_t seed, const local_part *lp);
void case_masks_free(case_masks *cm);

/* Sums of |got - ref|^2 and |ref|^2 of one gradient tensor, and its
 * entries that are not finite: whole-tensor relative errors are
 * sqrt(err2 / ref2) once summed over ranks. */
typedef struct {
    double err2[4], ref2[4]; /* dq, dk, dv, the additive weights */
    double nonfinite;
} bwd_tally;

/* Its doubles, for an MPI sum. */
#define BWD_TALLY_DOUBLES 9

/* Adds the rows of a layout slice: got (B, sl->count, row) in slice order
 * against ref (B, len, row); which: 0 dq, 1 dk, 2 dv, 3 weights (a
 * (1, 1, row) tensor and one run). */
void bwd_tally_add(bwd_tally *t, int which, const float *got,
                   const double *ref, int64_t B, int64_t len, int64_t row,
                   const ra_slice *sl);

/* The relative error of gradient `which`; 0 when the reference is 0 and
 * so is the error. */
double bwd_tally_rel(const bwd_tally *t, int which);

#endif
