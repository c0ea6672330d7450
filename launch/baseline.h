/* baseline.h: the materialising baselines that `ringattn bench` measures the
 * ring against (naive.c in one process, baseline.c over MPI); not part of
 * the library. */
#ifndef RA_BASELINE_H
#define RA_BASELINE_H

#include "internal.h"

/* The materialising baseline: local queries (n rows starting at global
 * q_start) against all M keys and values, non-causal or causal. */
typedef struct {
    int64_t B, n, N, M, H, G, D, Dv;
    int64_t q_start;
    int causal;
    float scale;
} ra_naive_args;

/* q (B, n, H, D), full k (B, M, G, D) and v (B, M, G, Dv), o (B, n, H, Dv),
 * lse (B, H, n); scores is scratch of n * M floats. */
void ra_naive_forward(const ra_naive_args *a, const float *q, const float *k,
                      const float *v, float *o, float *lse, float *scores);

/* A rank's operands of a forward pass: its slices of the inputs q, k, v
 * and of the outputs o, lse, shaped as ra_forward_ex() takes them. */
typedef struct {
    const float *q, *k, *v;
    float *o, *lse;
} ra_baseline_operands;

/* Same contract as ra_forward_ex() without masks, computed the naive way:
 * every rank gathers the full K and V (MPI_Allgatherv) and materialises the
 * n x M score matrix of each head. Memory O(M + n * M) per rank. */
ra_status ra_baseline_forward(MPI_Comm comm, const ra_shape *shape,
                              const ra_params *params,
                              const ra_baseline_operands *x,
                              ra_timing *timing);

#endif
