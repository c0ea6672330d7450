/* baseline.h: the materialising baseline over MPI, for `ringattn bench`. */
#ifndef RA_BASELINE_H
#define RA_BASELINE_H

#include "ringattn.h"

/* Same contract as ra_forward_ex() without masks, computed the naive way: every rank
 * gathers the full K and V (MPI_Allgatherv) and materialises the n x M
 * score matrix of each head. Memory O(M + n * M) per rank. */
ra_status ra_baseline_forward(MPI_Comm comm, const ra_shape *shape,
                              const ra_params *params, const float *q,
                              const float *k, const float *v, float *o,
                              float *lse, ra_timing *timing);

#endif
