/* backward.h: the kernels behind ra_backward (internal contract).
 *
 * Gradients of softmax attention from the saved forward state: with
 * P = exp(S - LSE) (recomputed per tile from the global LSE, so no rescaling
 * is needed), Drow = rowsum(dO * O) and dS = P * (dO V^T - Drow):
 *   dV = P^T dO,  dQ = dS dS/dq,  dK = dS^T dS/dk
 * where the score's derivatives are s K and s Q for the dot score and
 * (K - q) / sigma^2, (Q - k) / sigma^2 for the Gaussian one. A row that
 * sees no key (LSE = -inf) has P = 0 by definition and adds nothing.
 * Shapes and masks as in kernel.h; the same purity rules (no MPI, no HDF5,
 * no allocation inside a call).
 */
#ifndef RA_BACKWARD_H
#define RA_BACKWARD_H

#include <stdint.h>

#include "kernel.h"

/* drow (B, H, n) = rowsum(dout * o) over Dv, accumulated in double:
 * dout and o (B, n, H, Dv). */
void ra_backward_drow(int64_t B, int64_t n, int64_t H, int64_t Dv,
                      const float *dout, const float *o, float *drow);

/* Scratch of a backward kernel call: one allocation for every thread. */
typedef struct ra_bwd_workspace ra_bwd_workspace;

/* Scratch for `threads` threads and tiles up to block_q x block_kv, and
 * for the additive score's A hidden units the threads' partial sums of
 * dw_v (A = 0 otherwise); NULL when out of memory. */
ra_bwd_workspace *ra_bwd_workspace_create(int threads, int64_t block_q,
                                          int64_t block_kv, int64_t A);
void ra_bwd_workspace_free(ra_bwd_workspace *ws);

/* Adds the dw_v (A) that the kernel calls since the last take summed, in
 * thread order (deterministic), to dw_v, and zeroes the partial sums. */
void ra_bwd_workspace_take_dw_v(ra_bwd_workspace *ws, double *dw_v);

/* The operands of one backward kernel call, whole arrays:
 *   q (B, n, H, D), k (B, m, G, D), v (B, m, G, Dv), dout (B, n, H, Dv),
 *   lse and drow (B, H, n) (lse natural, from the whole forward pass),
 *   dq (B, n, H, D) +=, dk (B, m, G, D) +=, dv (B, m, G, Dv) +=. */
typedef struct {
    const float *q, *k, *v, *dout, *lse, *drow;
    float *dq, *dk, *dv;
} ra_bwd_operands;

/* Adds the gradients of one K/V block (blk->m keys) for all local queries
 * (x: ra_bwd_operands).
 * Every score (blk->alpha as for the forward: the natural score's
 * coefficient times log2 e); for the additive one q, k, dq and dk are the
 * projections W_q q, W_k k (D is A) and their gradients, and dw_v goes to
 * the workspace (ra_bwd_workspace_take_dw_v). ALiBi (blk->alibi) as in
 * the forward. Work items are (batch, kv
 * head): each thread owns the dq rows of a group's heads and the dk, dv rows
 * of its kv head, so threads never write the same element. Tiles outside
 * the mask's band, lens or segments are skipped. */
void ra_kernel_backward_block(const ra_block *blk, const ra_bwd_operands *x,
                              ra_bwd_workspace *ws, ra_progress_fn progress,
                              void *progress_ctx);

/* The fp64 reference gradients of one (batch, head), from the definition:
 * one query row at a time, the row's scores materialised (scores has m
 * entries), the mask batch-local as for ra_reference_scored. q (nq, D) stride
 * ldq, k (m, D) stride ldk, v (m, Dv) stride ldv, dout (nq, Dv) stride
 * lddo; dq (nq, D) stride lddq is overwritten; dk (m, D) stride lddk and
 * dv (m, Dv) stride lddv are added to (so that the heads of a GQA group
 * sum into one kv head). Every score; the additive one also gives the
 * gradients of its three weight tensors. */
typedef struct {
    const double *q, *k, *v, *dout;
    int64_t ldq, ldk, ldv, lddo;
    double *dq, *dk, *dv;
    int64_t lddq, lddk, lddv;
    /* additive score only: the weights' gradients w_q (A, D), w_k (A, Dk),
     * w_v (A), added to (NULL: not wanted); k and dk rows then have Dk
     * entries */
    double *dw_q, *dw_k, *dw_v;
} ra_ref_grads;

void ra_reference_backward(const ra_ref_score *sc, int64_t nq, int64_t m,
                           int64_t D, int64_t Dv, const ra_mask *mask,
                           const ra_ref_grads *g, double *scores);

#endif /* RA_BACKWARD_H */
