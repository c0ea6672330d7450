/* kernel.h: the compute kernels behind ra_forward (internal contract).
 *
 * Pure functions: raw pointers, sizes and strides; no MPI, no HDF5, and no
 * allocation inside a call (scratch comes from an ra_workspace made once).
 * Shape letters as in ringattn.h; n is the local query count, m the key
 * count of one K/V block.
 */
#ifndef RA_KERNEL_H
#define RA_KERNEL_H

#include <stdint.h>

#include "bf16.h"
#include "internal.h"
#include "score_features.h"
#include "simd.h"

/* Which (query, key) pairs are visible. Positions are global token indices,
 * strictly increasing along each local array, so a tile's first and last
 * entries bound it. With a = qalign[b][i] when qalign is set, else
 * qpos[i] + diag (query i's aligned position, ra_align), query i sees key
 * j when every rule that is on holds:
 *   causal:   kpos[j] <= a
 *   window:   a - left <= kpos[j] <= a + right
 *   q_lens:   qpos[i] < q_lens[b]                (else the row sees nothing)
 *   kv_lens:  kpos[j] < kv_lens[b]
 *   segments: q_seg[b][i] == k_seg[b][j]
 * In the kernel, q_lens and kv_lens are (B) and q_seg, k_seg, qalign are
 * (B, n) and (B, m); in ra_reference_scored they are batch-local: one
 * length each, and the ids and aligned positions of the rows and keys
 * passed. NULL turns a rule off. qalign - qpos, the row's own diag, is
 * constant over each run of equal segment ids (over each batch without
 * segments). */
typedef struct {
    int causal;
    int64_t diag;
    int window;
    int64_t left, right;
    const int64_t *qpos; /* n */
    const int64_t *kpos; /* m */
    const int64_t *q_lens, *kv_lens;
    const int64_t *q_seg, *k_seg;
    const int64_t *qalign; /* (B, n) aligned query positions, or NULL */
} ra_mask;

/* One call folds one K/V block into the running (o, lse) of all local
 * queries. Strides are those of the (B, len, heads, dim) layouts. */
typedef struct {
    int64_t B, n, m, H, G, D, Dv;
    float alpha;     /* dot: scale * log2(e), gaussian: log2(e) / sigma^2;
                        scores are made in base 2 */
    int64_t block_q, block_kv;
    ra_mask mask;
    ra_score score;
    int nan_check;   /* scan score rows for NaN and pass it on (nonfinite) */
    /* gaussian: a = q.k / sigma^2 - |q|^2 / (2 sigma^2) - |k|^2 / (2 sigma^2):
     * the key term is subtracted per column, the query term (constant per
     * row, so it leaves the weights alone) only shifts the LSE. */
    double half_inv_sigma2; /* 1 / (2 sigma^2) */
    /* additive: q and k are the projections W_q q (B, n, H, A) and W_k k
     * (B, m, G, A), D is A, and w_v (A) weighs the tanh terms. */
    const float *w_v;
    /* ALiBi: slopes (H, natural log) or NULL; query head h's score gets
     * -slope_h * |kpos - a| added, a the aligned position (ra_mask) */
    const double *alibi;
    const ra_numerics *features; /* the score features to apply
                        (score_features.h), after the score products and
                        before ALiBi and the mask, or NULL: none is on */
    ra_gemm gemm;    /* the tile products' engine (gemm.h) */
    const ra_mm16 *mm16; /* bf16 precision: the call's bf16 products
                          (bf16.h), else NULL: fp32 products */
} ra_block;

/* The products a kernel makes on full tiles of blk, as ra_mm16_create
 * takes them, into out (RA_MM16_MAX): the scores and P V of the forward,
 * or with backward the scores, dV, dP, dQ and dK; returns their count. */
int ra_kernel_mm_shapes(const ra_block *blk, int backward, ra_mm_shape *out);

/* The rules of ra_mask for a run of query rows of one batch that share
 * their diag (the whole batch without qalign), resolved once per work
 * item: a query at position p sits at p + diag and sees keys in
 * [p + lo, p + hi] (diag included), below kv_len, and none at all when
 * p >= q_len; with segments, only keys of its own id. */
typedef struct {
    int64_t lo, hi, q_len, kv_len;
    const int64_t *q_seg, *k_seg; /* this batch's ids, or NULL */
    int64_t diag;
} ra_tile_rules;

/* The rules of local query row i of batch b (and of every row of its run,
 * ra_tile_run_end). */
ra_tile_rules ra_tile_rules_of(const ra_block *blk, int64_t b, int64_t i);

/* The end of the run of rows [i, end) of batch b that share row i's diag:
 * end itself without qalign; by_id also ends it where the segment id
 * changes. */
int64_t ra_tile_run_end(const ra_block *blk, int64_t b, int64_t i,
                        int64_t end, int by_id);

/* Sets s[r][c] (row stride lds) to -inf wherever query i0 + r of the
 * block may not see key j0 + c under rules t, in one sweep (positions
 * increase along rows and columns). With vis (rules without segments),
 * the hidden entries get 0 instead and row r's visible keys are
 * [vis[2r], vis[2r + 1]). The forward's pass 2 and the backward's. */
void ra_mask_tile(const ra_mask *mk, const ra_tile_rules *t, int64_t i0,
                  int64_t bq, int64_t j0, int64_t bk, float *s, int64_t lds,
                  int32_t *vis);

/* Keys per tile product that oneDNN runs fastest in multiples of. */
enum { RA_KEY_UNIT = 16 };

/* A key range [*a, *z) widened to a multiple of `unit` keys within [0, m)
 * (unchanged when empty or when m is too few). */
void ra_widen_keys(int64_t unit, int64_t m, int64_t *a, int64_t *z);

/* The smallest and largest of x[0..len) (INT64_MAX, INT64_MIN when empty). */
void ra_minmax(const int64_t *x, int64_t len, int64_t *mn, int64_t *mx);

/* threads * per_thread floats aligned to a page (free()), or NULL: the
 * one allocation of a kernel workspace. */
float *ra_scratch_alloc(int threads, size_t per_thread);

/* Scratch for every thread of a kernel call: one allocation. */
typedef struct ra_workspace ra_workspace;

/* Makes scratch for `threads` threads and tiles up to block_q x block_kv with
 * value dim Dv, each thread's part on pages of its own that the thread
 * itself touches first; NULL when out of memory. Call it from the thread
 * that will call the kernels, outside any parallel region. */
ra_workspace *ra_workspace_create(int threads, int64_t block_q,
                                  int64_t block_kv, int64_t Dv);
void ra_workspace_free(ra_workspace *ws);
int ra_workspace_threads(const ra_workspace *ws);

/* Per-thread busy time: ra_kernel_forward_block adds to each thread's
 * count the wall time it spent inside its work items (not waiting at the
 * end of the call for the others). Gives the least and the most busy
 * thread's total since the workspace was made. */
void ra_workspace_busy(const ra_workspace *ws, double *min, double *max);

/* Progress of the caller's communication, may be NULL. Run only by thread
 * 0 of a kernel call (the thread that called the kernel, so MPI_THREAD_
 * FUNNELED is enough): between its key tiles, and after its last item
 * until every other thread has finished its own; never waited for by the
 * other threads. It must not block. */
typedef void (*ra_progress_fn)(void *ctx);

/* The caller's progress between tiles (ra_params.on_tick): run by thread
 * 0 of a kernel call after its poll, with the share of the call's work
 * items done so far (0 .. 1). */
typedef void (*ra_tick_fn)(void *ctx, double done);

/* Makes every later kernel call on ws run tick(ctx, done) between thread
 * 0's tiles (NULL: none). */
void ra_workspace_set_tick(ra_workspace *ws, ra_tick_fn tick, void *ctx);

/* Sets o = 0 and lse = -inf: the empty partial that every merge starts from.
 * o (B, n, H, Dv), lse (B, H, n). */
void ra_state_reset(int64_t B, int64_t n, int64_t H, int64_t Dv,
                    float *o, float *lse);
/* The same on up to `threads` threads, each zeroing its own chunks. */
void ra_state_reset_threads(int64_t B, int64_t n, int64_t H, int64_t Dv,
                            float *o, float *lse, int threads);
/* The reset without its writes of o, for a caller that finishes with
 * ra_state_close: a row's first merge writes o without reading it, so only
 * the rows that no partial reached (lse still -inf) need a zero, and they
 * are few (padding, rows that see no key). Up to `threads` threads. */
void ra_state_open(int64_t B, int64_t n, int64_t H, float *lse, int threads);
void ra_state_close(int64_t B, int64_t n, int64_t H, int64_t Dv, float *o,
                    const float *lse, int threads);

/* The operands of one forward call: queries q (B, n, H, D), the block's
 * k (B, m, G, D) and v (B, m, G, Dv), the running o (B, n, H, Dv) and
 * lse (B, H, n); the caller's progress hook (ra_progress_fn), or NULL. */
typedef struct {
    const float *q, *k, *v;
    float *o, *lse;
    ra_progress_fn progress;
    void *progress_ctx;
} ra_fwd_ops;

/* Folds the block ops->k, ops->v into ops->o and ops->lse: an online
 * softmax over the key tiles of the block gives a normalised partial per
 * query tile, merged into (o, lse) with the LSE merge. Tiles whose keys
 * are all masked are skipped. */
void ra_kernel_forward_block(const ra_block *blk, const ra_fwd_ops *ops,
                             ra_workspace *ws);

/* The score of the fp64 reference, computed from its definition per pair:
 * dot s * q.k, gaussian -||q - k||^2 / (2 sigma^2), additive
 * w_v . tanh(W_q q + W_k k) with k of dim Dk, mapped by the score features,
 * plus the ALiBi bias when on (positions from the mask, diag included; no
 * mask: 0, 1, 2... and 0). */
typedef struct {
    ra_score score;
    double scale, sigma;
    const ra_additive *additive;
    int64_t Dk;
    int alibi;          /* 1: add -alibi_slope * |kpos - a| (ra_mask) */
    double alibi_slope; /* of the head being computed */
    const ra_numerics *features; /* the score features (before ALiBi;
                           score_features.h), or NULL: none */
    int sink_on;        /* 1: one more softmax column of logit sink and
                           value 0 (a row that sees no key: o = 0,
                           lse = sink) */
    double sink;
} ra_ref_score;

/* The operands of the fp64 reference: nq query rows against m keys,
 * q (nq, D) with row stride ldq, k (m, Dk or D) stride ldk, v (m, Dv)
 * stride ldv; results o (nq, Dv) stride ldo and lse (nq). */
typedef struct {
    int64_t nq, m, D, Dv;
    const double *q;
    int64_t ldq;
    const double *k;
    int64_t ldk;
    const double *v;
    int64_t ldv;
    double *o;
    int64_t ldo;
    double *lse;
} ra_ref_rows;

/* The fp64 reference: plain softmax(score) v with the same visibility
 * (mask batch-local, see ra_mask; NULL positions mean 0, 1, 2...),
 * materialising one query row of scores at a time (scores has x->m
 * entries). Used by tests, `ringattn bench` and `ringattn verify`. */
void ra_reference_scored(const ra_ref_score *sc, const ra_mask *mask,
                         const ra_ref_rows *x, double *scores);

/* One map call: local query rows [r0, r0 + nr), query heads
 * heads[0..nh), queries q (B, n, H, D), the block's k (B, m, G, D), the
 * final lse (B, H, n), the map out (B, nh, nr, M); the caller's progress
 * hook, or NULL. */
typedef struct {
    int64_t r0, nr;
    const int64_t *heads;
    int64_t nh;
    const float *q, *k, *lse;
    float *out;
    int64_t M;
    ra_progress_fn progress;
    void *progress_ctx;
} ra_map_ops;

/* The attention weights of ops' rows and heads against one block, from
 * their final lse: out[((b * nh + hi) * nr + r) * M + kpos[j]] =
 * exp(score - lse), 0 where the mask hides the key or the row sees
 * nothing. Same scores, masks and workspace as ra_kernel_forward_block. */
void ra_kernel_probs(const ra_block *blk, const ra_map_ops *ops,
                     ra_workspace *ws);

/* y (rows, out) = x (rows, in) w^T + bias, w (out, in), bias (out) or NULL:
 * the PyTorch Linear convention, one sgemm. */
void ra_linear(const float *x, int64_t rows, int64_t in, const float *w,
               const float *bias, int64_t out, float *y);

/* Adds the sinusoidal encoding of global position pos[i] to token i of
 * x (B, n, E): P(p, 2j) = sin(p / 10000^(2j/E)), P(p, 2j+1) = cos(...). */
void ra_posenc_add(float *x, int64_t B, int64_t n, int64_t E,
                   const int64_t *pos);

/* Whether query i may see key j under mask (batch-local, as in
 * ra_reference_scored; NULL: always): the reference's one statement of the
 * rules, pair by pair. */
int ra_ref_visible(const ra_mask *mask, int64_t i, int64_t j);

/* -|kpos - a| of the pair (i, j), a the aligned position, under mask as
 * ra_ref_visible reads it: what ALiBi's slope multiplies. */
double ra_ref_alibi_distance(const ra_mask *mask, int64_t i, int64_t j);

/* ALiBi slope of head h of H when the caller gave none (ra_alibi_slopes),
 * and the slope a run uses: params->alibi_slopes[h] or that one. */
double ra_alibi_slope(int64_t H, int64_t h);
double ra_params_alibi_slope(const ra_params *params, int64_t H, int64_t h);

/* The fp64 reference of RoPE on one row x (D) at position pos, from the
 * definition: pair k rotated by pos * base^(-2k/D). */
void ra_rope_row_ref(ra_rope rope, double base, double *x, int64_t D,
                     int64_t pos);

/* ra_rope_apply with the angles times sign: +1 the rotation, -1 its
 * transpose (the rotation by minus the angle, at the same positions): how
 * a gradient taken after RoPE goes back through it. */
void ra_rope_turn(const ra_rope_rows *rows, float *x, double sign);

/* The materialising baseline (naive.c): local queries (n rows starting at
 * global q_start) against all M keys and values, non-causal or causal. */
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

/* Attention sinks (sinks.c), on this rank's n rows of a call's final
 * o (B, n, H, Dv) and lse (B, H, n) (shape s), sinks (H) natural-log
 * logits:
 * ra_sinks_fold makes lse' = logaddexp(lse, sink_h) and o' = o
 * exp(lse - lse') in place (lse = -inf: o' = 0, lse' = sink_h; a NaN row
 * stays), on up to `threads` threads; ra_sinks_grad gives this rank's
 * part of d sinks (H), -sum over its rows of exp(sink_h - lse'_i)
 * (dout_i . o'_i), from o', lse' and dout. */
void ra_sinks_fold(const ra_shape *s, int64_t n, const float *sinks,
                   float *o, float *lse, int threads);
void ra_sinks_grad(const ra_shape *s, int64_t n, const float *sinks,
                   const float *o, const float *lse, const float *dout,
                   double *dsinks);

/* The vectorised helpers (exp, max, tanh) are declared in simd.h. */

#endif /* RA_KERNEL_H */
