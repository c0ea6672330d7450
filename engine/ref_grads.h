/* ref_grads.h: the fp64 gradients of one block of (query row, key) pairs
 * given the rows' LSE and Drow = do . o, the maths of `ringattn verify
 * --backward` (internal, pure, blocked fp64 BLAS). The gradient of a pair
 * needs only its own score and its row's two statistics, so exact
 * gradients of sampled query rows (dq: the rows against every key block)
 * and of sampled keys (dk, dv: every row block against those keys) come
 * from blocks of the same kind. The dot and Gaussian scores; the
 * additive one's weights need every pair and are checked elsewhere. */
#ifndef RA_REF_GRADS_H
#define RA_REF_GRADS_H

#include "ref_block.h"

/* The block's rows' statistics and the gradients it adds to. lse, drow
 * (H, nr); dout (nr, H, Dv); dq (nr, H, D) or NULL; dk (kb, G, Dk) and
 * dv (kb, G, Dv), both or neither (NULL); dp (nr, kb) scratch. With psum
 * (H, nr) and pv (nr, H, Dv) (else NULL) also the forward they imply:
 * psum += sum_j P, pv += P V, so that psum = exp(lse' - lse) and
 * o' = pv / psum are the rows' exact LSE and o (sinks aside) whatever
 * lse was, as long as exp(score - lse) neither overflows nor vanishes:
 * a check of the forward that gave lse at the cost of P V. */
typedef struct {
    const double *lse, *drow, *dout;
    double *dq, *dk, *dv, *dp;
    double *psum, *pv;
} ra_ref_bgrads;

/* Adds head h's share of the block x (q, k, v, mask as for the fold; its
 * sc is overwritten) to the gradients in g: P = exp(score - lse),
 * dS = P (do v^T - Drow), dv += P^T do, dq += dS d(score)/dq,
 * dk += dS^T d(score)/dk. q and k are the rotated ones (RoPE's transpose
 * is the caller's). */
void ra_ref_block_backward(const ra_ref_block *x, int64_t h,
                           const ra_ref_bgrads *g);

#endif /* RA_REF_GRADS_H */
