/* call.h: the calls behind ra_forward, ra_backward, ra_strategy_check and
 * ra_mha_forward, on the joined options of internal.h (ra_params), for
 * those that hold one struct (the command line, the tests, the layer) and
 * for the knobs no public struct carries (no_poll). Contracts as in
 * ringattn.h; the public functions join the caller's ra_numerics and
 * ra_exec and come through here. */
#ifndef RA_CALL_H
#define RA_CALL_H

#include <mpi.h>

#include "internal.h"

ra_status ra_call_forward(MPI_Comm comm, const ra_shape *shape,
                          const ra_params *params, const ra_masks *masks,
                          const ra_qkv *in, const ra_out *out,
                          ra_timing *timing);

ra_status ra_call_backward(MPI_Comm comm, const ra_shape *shape,
                           const ra_params *params, const ra_masks *masks,
                           const ra_qkv *in, const ra_grads *grads,
                           ra_timing *timing);

ra_status ra_call_strategy_check(MPI_Comm comm, const ra_shape *shape,
                                 const ra_params *params, int segments);

ra_status ra_call_mha(MPI_Comm comm, const ra_shape *shape,
                      const ra_params *params, const ra_masks *masks,
                      const ra_mha *layer, const ra_mha_io *io,
                      ra_timing *timing);

/* A rank's operands of a forward pass: its slices of the inputs q, k, v
 * and of the outputs o, lse, shaped as ra_forward_ex() takes them. */
typedef struct {
    const float *q, *k, *v;
    float *o, *lse;
} ra_baseline_operands;

/* The baseline that `ringattn bench --mode naive` measures the ring
 * against (baseline.c): the contract of ra_forward_ex() without masks,
 * computed the naive way: every rank gathers the full K and V
 * (MPI_Allgatherv) and materialises the n x M score matrix of each head
 * (ra_naive_forward). Memory O(M + n * M) per rank. */
ra_status ra_baseline_forward(MPI_Comm comm, const ra_shape *shape,
                              const ra_params *params,
                              const ra_baseline_operands *x,
                              ra_timing *timing);

#endif /* RA_CALL_H */
