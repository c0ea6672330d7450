/* matrix_ref.h: an fp64 attention, forward and backward, written from the
 * definitions that include/ringattn.h states and nothing else, for the
 * differential test matrix (test_matrix_mpi.c). It calls no library
 * function (not the library's reference either): a mistake shared by the
 * library's kernels and its own reference cannot hide from it.
 *
 * Definitions (global positions; i' is query i's aligned position):
 *   i' = i + (M - N); with p->align == RA_ALIGN_SEQUENCE, in batch b
 *     i' = i + (kv_len - q_len) (a missing length: M resp. N), or with
 *     segments, for query i of id s, i' = i + (kend - qend), qend and kend
 *     one past the last query and key of id s in batch b;
 *   visible(i, j): causal: j <= i'; window: i' - left <= j <= i' + right;
 *     q_lens[b]: i < q_lens[b]; kv_lens[b]: j < kv_lens[b];
 *     segments: q_seg[b, i] == kv_seg[b, j].
 *   score: dot s q.k (s = scale, or 1/sqrt(D) when scale is NAN);
 *     gaussian -|q - k|^2 / (2 sigma^2); additive w_v . tanh(W_q q + W_k k);
 *     plus ALiBi's -slope_h |j - i'| when alibi is on.
 *   RoPE: q rotated at i', k at j; pair k (interleaved (2k, 2k+1), half
 *     (k, k + D/2)) turned by pos * base^(-2k/D).
 *   A row that sees no key: o = 0, lse = -inf, zero gradients. */
#ifndef RA_MATRIX_REF_H
#define RA_MATRIX_REF_H

#include <stdint.h>

#include "internal.h"

/* One problem in natural token order; every pointer is the caller's. */
typedef struct {
    ra_shape s;                      /* Dk must be 0 (k has D columns) */
    const ra_params *p;              /* causal, window, score, scale, sigma,
                                      additive, rope, rope_base, alibi,
                                      align */
    const double *slopes;            /* (H): ALiBi's slopes when p->alibi */
    const int64_t *q_lens, *kv_lens; /* (B) each, or NULL */
    const int64_t *q_seg, *kv_seg;   /* (B, N), (B, M), or NULL */
    const float *q, *k, *v;          /* (B,N,H,D) (B,M,G,D) (B,M,G,Dv) */
    const float *dout;               /* (B,N,H,Dv): the loss gradient */
} mref_in;

/* Results, owned by the struct (one allocation, mref_free):
 * o (B,N,H,Dv), lse (B,H,N), dq (B,N,H,D), dk (B,M,G,D), dv (B,M,G,Dv). */
typedef struct {
    double *o, *lse, *dq, *dk, *dv;
    void *mem;
} mref_out;

/* Computes every output of `in`; 0, or -1 when out of memory (then
 * out->mem is NULL). */
int mref_compute(const mref_in *in, mref_out *out);
void mref_free(mref_out *out);

/* How many query rows (b, i) see two keys or more under in's masks. With
 * none, scores cannot matter (each row's weights are 1 or nothing): the
 * problem is blind to RoPE, ALiBi and the score. */
int64_t mref_rows_multi(const mref_in *in);

/* The ALiBi slopes of H heads as Press et al.'s code builds them: for a
 * power of two n, the geometric sequence starting at 2^(-8/n) with that
 * ratio; otherwise the sequence of the largest power of two p below H,
 * then every other element (the first, third, ...) of the sequence of 2p,
 * H - p of them. */
void mref_alibi_slopes(int64_t H, double *slopes);

#endif
