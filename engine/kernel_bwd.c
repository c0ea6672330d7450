/* kernel_bwd.c: the tiled fp32 backward kernel (backward.h).
 *
 * A work item is one (batch, kv head): it owns the dk, dv rows of that kv
 * head and the dq rows of the query heads of its group, so OpenMP threads
 * never share an output element. Per item the key tiles are the outer loop
 * (their dk, dv tile stays in cache) and (head, query tile) the inner one;
 * a query tile meets only the keys of a key tile that its band reaches
 * (seen_keys). For each visible tile: pass 1 recomputes the base-2 scores,
 * pass 2 masks the tile if it straddles an edge, pass 3 turns them into
 * P = 2^(S - LSE log2 e) (the global LSE: no rescaling), then four more
 * products: dV += P^T dO, dP = dO V^T, dS = P * (dP - Drow) in place,
 * dQ += c dS K, dK += c dS^T Q (c the natural score's coefficient). The
 * score features' dS gets their derivative (kept from pass 1). The
 * additive score works on the projections W_q q and W_k k (D is A): its
 * scores and their derivatives are made pair by pair, and each thread sums
 * its part of dw_v apart, added up in thread order afterwards. ALiBi adds
 * its bias to the recomputed scores and changes no derivative. With
 * bf16 precision (blk->mm16) the five products run in bf16 (dO, P and dS
 * rounded as they are packed) with fp32 sums into fp32 gradients. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "backward.h"
#include "band.h"
#include "gemm.h"

#define LN2 0.693147180559945309

struct ra_bwd_workspace {
    int threads;
    int64_t block_q, block_kv, A;
    size_t per_thread; /* floats per thread, a multiple of 16 */
    float *mem;
    double *dw_v;      /* additive: (threads, A) partial sums of dw_v;
                          both arrays live in the block of the struct */
};

/* Scratch of one thread: P, dP and the features' derivative tiles (block_q x
 * block_kv), the rows' base-2 LSE, and for the Gaussian score the tile's
 * row and column sums of dS and its keys' base-2 norm term. */
typedef struct {
    float *p, *dp, *dt, *lse2, *rsum, *csum, *kterm;
    int64_t kterm_j0; /* the key tile's first key: kterm[0]'s */
    double *dw_v; /* this thread's partial dw_v (A), additive only */
    int tid;      /* the thread's number, for its bf16 products' scratch */
} bwd_scratch;

static size_t round16(size_t x) { return (x + 15) & ~(size_t)15; }

/* One allocation: the struct (padded to 16 floats), the threads' tiles,
 * then their dw_v partial sums. */
ra_bwd_workspace *ra_bwd_workspace_create(int threads, int64_t block_q,
                                          int64_t block_kv, int64_t A)
{
    if (threads < 1 || block_q < 1 || block_kv < 1 || A < 0)
        return NULL;
    const size_t head = round16((sizeof(ra_bwd_workspace) + 3) / 4);
    const size_t per = 3 * round16((size_t)(block_q * block_kv)) +
                       2 * round16((size_t)block_q) +
                       2 * round16((size_t)block_kv);
    const size_t sums = 2 * (size_t)threads * (size_t)A; /* doubles */
    float *mem = ra_scratch_alloc(1, head + (size_t)threads * per + sums);
    if (!mem)
        return NULL;
    ra_bwd_workspace *ws = (ra_bwd_workspace *)mem;
    *ws = (ra_bwd_workspace){threads, block_q, block_kv, A, per, mem + head,
                             (double *)(mem + head + (size_t)threads * per)};
    memset(ws->dw_v, 0, sizeof(double) * (size_t)threads * (size_t)A);
    return ws;
}

void ra_bwd_workspace_free(ra_bwd_workspace *ws) { free(ws); }

void ra_bwd_workspace_take_dw_v(ra_bwd_workspace *ws, double *dw_v)
{
    for (int t = 0; t < ws->threads; t++)
        for (int64_t a = 0; a < ws->A; a++) {
            dw_v[a] += ws->dw_v[t * ws->A + a];
            ws->dw_v[t * ws->A + a] = 0.0;
        }
}

static bwd_scratch scratch_of(const ra_bwd_workspace *ws, int tid)
{
    const size_t tile = round16((size_t)(ws->block_q * ws->block_kv));
    bwd_scratch t;
    t.p = ws->mem + (size_t)tid * ws->per_thread;
    t.dp = t.p + tile;
    t.dt = t.dp + tile;
    t.lse2 = t.dt + tile;
    t.rsum = t.lse2 + round16((size_t)ws->block_q);
    t.csum = t.rsum + round16((size_t)ws->block_q);
    t.kterm = t.csum + round16((size_t)ws->block_kv);
    t.kterm_j0 = 0;
    t.dw_v = ws->dw_v + (size_t)tid * (size_t)ws->A;
    t.tid = tid;
    return t;
}

void ra_backward_drow(int64_t B, int64_t n, int64_t H, int64_t Dv,
                      const float *dout, const float *o, float *drow)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t at = ((b * n + i) * H + h) * Dv;
                double s = 0.0;
                for (int64_t d = 0; d < Dv; d++)
                    s += (double)dout[at + d] * o[at + d];
                drow[(b * H + h) * n + i] = (float)s;
            }
}

/* How a tile of queries [i0, i0 + bq) and keys [j0, j0 + bk) meets the
 * mask: 0 nothing visible, 1 partly (mask it), 2 wholly visible. Positions
 * increase along both, so the corners decide the band. */
static int tile_class(const ra_block *blk, const ra_tile_rules *rl, int64_t i0,
                      int64_t bq, int64_t j0, int64_t bk)
{
    const int64_t *qp = blk->mask.qpos, *kp = blk->mask.kpos;
    const int64_t qmin = qp[i0], qmax = qp[i0 + bq - 1];
    const int64_t kmin = kp[j0], kmax = kp[j0 + bk - 1];
    if (qmin >= rl->q_len || kmin >= rl->kv_len || kmax < qmin + rl->lo ||
        kmin > qmax + rl->hi)
        return 0;
    int partial = qmax >= rl->q_len || kmax >= rl->kv_len ||
                  kmin < qmax + rl->lo || kmax > qmin + rl->hi;
    if (rl->q_seg) {
        int64_t qs0, qs1, ks0, ks1;
        ra_minmax(rl->q_seg + i0, bq, &qs0, &qs1);
        ra_minmax(rl->k_seg + j0, bk, &ks0, &ks1);
        if (qs1 < ks0 || ks1 < qs0)
            return 0;
        partial |= !(qs0 == qs1 && ks0 == ks1 && qs0 == ks0);
    }
    return partial ? 1 : 2;
}

/* Where one tile's operands live: row pointers and leading dims of the
 * (B, len, heads, dim) layouts. */
typedef struct {
    const float *q, *k, *v, *dout, *lse, *drow;
    float *dq, *dk, *dv;
    int64_t i0, bq, j0, bk, h;
} bwd_tile;

/* ALiBi's bias -slope_h log2(e) |kpos - qpos - diag| added to a tile of
 * base-2 scores (diag the rows' own, rl), measured as the final LSE was
 * (absolute positions). */
static void alibi_bias(const ra_block *blk, const ra_tile_rules *rl,
                       const bwd_tile *x, float *s)
{
    const double c = -blk->alibi[x->h] * M_LOG2E;
    const int64_t *qp = blk->mask.qpos + x->i0, *kp = blk->mask.kpos + x->j0;
    for (int64_t r = 0; r < x->bq; r++) {
        const int64_t at = qp[r] + rl->diag;
        for (int64_t col = 0; col < x->bk; col++)
            s[r * blk->block_kv + col] +=
                (float)(c * (double)llabs(kp[col] - at));
    }
}

/* Passes 1-3: P = 2^(S - LSE log2 e) of one tile in t.p (row stride
 * block_kv), exact zeros where hidden and in rows that see no key. */
static void probs_tile(const ra_block *blk, const ra_tile_rules *rl, int cls,
                       const bwd_tile *x, bwd_scratch t)
{
    const int64_t D = blk->D, lds = blk->block_kv, H = blk->H, G = blk->G;
    const int gauss = blk->score == RA_SCORE_GAUSSIAN;
    if (blk->score == RA_SCORE_ADDITIVE)
        for (int64_t r = 0; r < x->bq; r++)
            for (int64_t c = 0; c < x->bk; c++)
                t.p[r * lds + c] =
                    (float)M_LOG2E * ra_additive_score(x->q + r * H * D,
                                                       x->k + c * G * D,
                                                       blk->w_v, D);
    else
        ra_mm_tile(blk->gemm, blk->mm16, t.tid,
                   &(ra_mm){.tb = 1, .m = x->bq, .n = x->bk, .k = D,
                            .alpha = blk->alpha, .a = x->q, .lda = H * D,
                            .b = x->k, .ldb = G * D, .c = t.p, .ldc = lds});
    ra_features_tile(blk->features, t.p, x->bq, x->bk, lds, t.dt);
    if (blk->alibi)
        alibi_bias(blk, rl, x, t.p);
    if (cls == 1) /* pass 2 */
        ra_mask_tile(&blk->mask, rl, x->i0, x->bq, x->j0, x->bk, t.p, lds,
                     NULL);
    for (int64_t r = 0; r < x->bq; r++) {
        float *row = t.p + r * lds;
        const float l = x->lse[r];
        if (l == -INFINITY) { /* sees no key: P = 0, never -inf - -inf */
            memset(row, 0, (size_t)x->bk * sizeof *row);
            continue;
        }
        double shift = l;
        if (gauss) {
            const float *qr = x->q + r * H * D;
            double qq = 0.0;
            for (int64_t d = 0; d < D; d++)
                qq += (double)qr[d] * qr[d];
            shift += qq * blk->half_inv_sigma2;
            const float *kt = t.kterm + (x->j0 - t.kterm_j0);
            for (int64_t c = 0; c < x->bk; c++)
                row[c] -= kt[c];
        }
        (void)ra_exp2_shift_sum(row, x->bk, (float)(shift * M_LOG2E));
    }
}

/* The Gaussian score's norm terms of the gradients: with dS row sums rs
 * and column sums cs, dq_i -= c rs_i q_i and dk_j -= c cs_j k_j. */
static void gauss_terms(const ra_block *blk, const bwd_tile *x, float c,
                        bwd_scratch t)
{
    const int64_t D = blk->D, lds = blk->block_kv, H = blk->H, G = blk->G;
    for (int64_t c0 = 0; c0 < x->bk; c0++)
        t.csum[c0] = 0.0f;
    for (int64_t r = 0; r < x->bq; r++) {
        const float *ds = t.dp + r * lds;
        float rs = 0.0f;
        for (int64_t c0 = 0; c0 < x->bk; c0++) {
            rs += ds[c0];
            t.csum[c0] += ds[c0];
        }
        for (int64_t d = 0; d < D; d++)
            x->dq[r * H * D + d] -= c * rs * x->q[r * H * D + d];
    }
    for (int64_t c0 = 0; c0 < x->bk; c0++)
        for (int64_t d = 0; d < D; d++)
            x->dk[c0 * G * D + d] -= c * t.csum[c0] * x->k[c0 * G * D + d];
}

/* The additive score's passes 6 and 7, pair by pair: with t = tanh(qp +
 * kp) and u = dS w_v (1 - t^2) over the A hidden units, dqp += u,
 * dkp += u and dw_v += dS t (summed over the tile in fp32 in t.kterm,
 * which this score does not use otherwise, block_kv hidden units at a
 * time, then into the thread's fp64 partial). */
static void additive_terms(const ra_block *blk, const bwd_tile *x,
                           bwd_scratch t)
{
    const int64_t A = blk->D, ldq = blk->H * A, ldk = blk->G * A;
    const int64_t lds = blk->block_kv;
    float *dw = t.kterm;
    for (int64_t a0 = 0; a0 < A; a0 += lds) {
        const int64_t na = A - a0 < lds ? A - a0 : lds;
        memset(dw, 0, sizeof(float) * (size_t)na);
        for (int64_t r = 0; r < x->bq; r++)
            for (int64_t c = 0; c < x->bk; c++) {
                const float ds = t.dp[r * lds + c];
                if (ds != 0.0f)
                    ra_additive_grad(x->q + r * ldq + a0, x->k + c * ldk + a0,
                                     blk->w_v + a0, ds, x->dq + r * ldq + a0,
                                     x->dk + c * ldk + a0, dw, na);
            }
        for (int64_t a = 0; a < na; a++)
            t.dw_v[a0 + a] += dw[a];
    }
}

/* One visible tile: P, then dV += P^T dO, dP = dO V^T, dS = P * (dP -
 * Drow), dQ += c dS K, dK += c dS^T Q. */
static void grads_tile(const ra_block *blk, const ra_tile_rules *rl, int cls,
                       const bwd_tile *x, bwd_scratch t)
{
    const int64_t D = blk->D, Dv = blk->Dv, lds = blk->block_kv;
    const int64_t ldq = blk->H * D, ldk = blk->G * D;
    const int64_t ldo = blk->H * Dv, ldv = blk->G * Dv;
    const int64_t bq = x->bq, bk = x->bk;
    const ra_gemm g = blk->gemm;
    const ra_mm16 *e = blk->mm16; /* bf16: P, dO and dS rounded too */
    const float c = (float)(blk->alpha * LN2); /* the natural coefficient */
    probs_tile(blk, rl, cls, x, t);
    /* pass 4: dV += P^T dO */
    ra_mm_tile(g, e, t.tid, &(ra_mm){.ta = 1, .m = bk, .n = Dv, .k = bq, .alpha = 1.0f,
                         .beta = 1.0f, .a = t.p, .lda = lds, .b = x->dout,
                         .ldb = ldo, .c = x->dv, .ldc = ldv});
    /* pass 5: dP = dO V^T, then dS = P * (dP - Drow) in its place */
    ra_mm_tile(g, e, t.tid, &(ra_mm){.tb = 1, .m = bq, .n = bk, .k = Dv, .alpha = 1.0f,
                         .a = x->dout, .lda = ldo, .b = x->v, .ldb = ldv,
                         .c = t.dp, .ldc = lds});
    for (int64_t r = 0; r < x->bq; r++) {
        const float *pr = t.p + r * lds, dr = x->drow[r];
        float *dsr = t.dp + r * lds;
        for (int64_t c0 = 0; c0 < x->bk; c0++)
            dsr[c0] = pr[c0] * (dsr[c0] - dr);
        for (int64_t c0 = 0; blk->features && c0 < x->bk; c0++)
            dsr[c0] *= t.dt[r * lds + c0]; /* through the features' maps */
    }
    if (blk->score == RA_SCORE_ADDITIVE) {
        additive_terms(blk, x, t);
        return;
    }
    /* pass 6: dQ += c dS K;  pass 7: dK += c dS^T Q */
    ra_mm_tile(g, e, t.tid, &(ra_mm){.m = bq, .n = D, .k = bk, .alpha = c, .beta = 1.0f,
                         .a = t.dp, .lda = lds, .b = x->k, .ldb = ldk,
                         .c = x->dq, .ldc = ldq});
    ra_mm_tile(g, e, t.tid, &(ra_mm){.ta = 1, .m = bk, .n = D, .k = bq, .alpha = c,
                         .beta = 1.0f, .a = t.dp, .lda = lds, .b = x->q,
                         .ldb = ldq, .c = x->dk, .ldc = ldk});
    if (blk->score == RA_SCORE_GAUSSIAN)
        gauss_terms(blk, x, c, t);
}

/* The Gaussian keys' term log2(e) |k|^2 / (2 sigma^2) of one key tile. */
static void key_terms(const ra_block *blk, const float *kt, int64_t bk,
                      bwd_scratch t)
{
    const int64_t D = blk->D, ldk = blk->G * D;
    const double coef = M_LOG2E * blk->half_inv_sigma2;
    for (int64_t c = 0; c < bk; c++) {
        double kk = 0.0;
        for (int64_t d = 0; d < D; d++)
            kk += (double)kt[c * ldk + d] * kt[c * ldk + d];
        t.kterm[c] = (float)(coef * kk);
    }
}

/* Where a tile lies: query rows [i0, i0 + bq) of head h, keys
 * [j0, j0 + bk) of kv head g, in batch b. */
typedef struct {
    int64_t b, h, g, i0, bq, j0, bk;
} tile_span;

/* Operands of the tile sp within the call's whole arrays x. */
static bwd_tile tile_at(const ra_block *blk, const ra_bwd_operands *x,
                        const tile_span *sp)
{
    const int64_t n = blk->n, m = blk->m, H = blk->H, G = blk->G;
    const int64_t D = blk->D, Dv = blk->Dv;
    const int64_t qi = (sp->b * n + sp->i0) * H + sp->h;
    const int64_t kj = (sp->b * m + sp->j0) * G + sp->g;
    const int64_t li = (sp->b * H + sp->h) * n + sp->i0;
    return (bwd_tile){x->q + qi * D, x->k + kj * D, x->v + kj * Dv,
                      x->dout + qi * Dv, x->lse + li, x->drow + li,
                      x->dq + qi * D, x->dk + kj * D, x->dv + kj * Dv,
                      sp->i0, sp->bq, sp->j0, sp->bk, sp->h};
}

/* The keys [*j0, *j0 + *bk) of a key tile that query rows [i0, i0 + bq)
 * of one run (rules rl) may see by position: a band's query tile meets
 * only part of a key tile as wide as the band, and the products then run
 * over that part, widened to a multiple of RA_KEY_UNIT keys within the
 * tile (ra_widen_keys, as in the forward). Not in bf16, whose primitives
 * take the declared tile shape only (bf16.h). */
static void seen_keys(const ra_block *blk, const ra_tile_rules *rl,
                      int64_t i0, int64_t bq, int64_t *j0, int64_t *bk)
{
    if (blk->mm16)
        return;
    const int64_t *kp = blk->mask.kpos + *j0, *qp = blk->mask.qpos;
    int64_t a = 0, z = *bk;
    if (rl->lo > -RA_UNBOUNDED)
        a = ra_lower_bound(kp, *bk, qp[i0] + rl->lo);
    if (rl->hi < RA_UNBOUNDED)
        z = ra_lower_bound(kp, *bk, qp[i0 + bq - 1] + rl->hi + 1);
    if (z <= a) { /* nothing visible: tile_class has said so already */
        *bk = 0;
        return;
    }
    ra_widen_keys(RA_KEY_UNIT, *bk, &a, &z);
    *j0 += a;
    *bk = z - a;
}

/* Query rows per tile: block_q, or at most BAND_ROWS with a window. A
 * band's query tile meets 1 + BAND_ROWS / window keys per visible pair
 * of its key tile's part (seen_keys); 64 rows ran the backward 8% faster
 * than 128 at window 512 and 16% at window 128 (P = 1, N = 16384, D =
 * 64; 128 rows keep the forward's tiles, which score by groups of 64
 * rows, kernel.c). */
enum { BAND_ROWS = 64 };

static int64_t query_rows(const ra_block *blk)
{
    return blk->mask.window && blk->block_q > BAND_ROWS ? BAND_ROWS
                                                        : blk->block_q;
}

/* One work item: every tile of kv head g in batch b; a query tile is cut
 * into runs of rows that share their diag (ra_tile_run_end: the whole
 * tile unless each sequence is aligned on its own), and each run meets
 * only the keys of the key tile it may see (seen_keys). */
static void item_backward(const ra_block *blk, const ra_bwd_operands *ops,
                          int64_t b, int64_t g, bwd_scratch t, int poll,
                          ra_progress_fn progress, void *progress_ctx)
{
    const int64_t n = blk->n, m = blk->m, bqm = query_rows(blk);
    const int64_t bkv = blk->block_kv, per = blk->H / blk->G;
    for (int64_t j0 = 0; j0 < m; j0 += bkv) {
        const int64_t bk = m - j0 < bkv ? m - j0 : bkv;
        int keys_ready = 0;
        for (int64_t h = g * per; h < (g + 1) * per; h++)
            for (int64_t i0 = 0, z; i0 < n; i0 = z) {
                z = ra_tile_run_end(blk, b, i0, n - i0 < bqm ? n : i0 + bqm,
                                    0);
                const ra_tile_rules rl = ra_tile_rules_of(blk, b, i0);
                if (tile_class(blk, &rl, i0, z - i0, j0, bk) == 0)
                    continue;
                if (!keys_ready && blk->score == RA_SCORE_GAUSSIAN) {
                    const tile_span all = {b, h, g, i0, z - i0, j0, bk};
                    key_terms(blk, tile_at(blk, ops, &all).k, bk, t);
                    t.kterm_j0 = j0;
                }
                keys_ready = 1;
                int64_t jn = j0, bn = bk;
                seen_keys(blk, &rl, i0, z - i0, &jn, &bn);
                const int cls = bn ? tile_class(blk, &rl, i0, z - i0, jn, bn)
                                   : 0;
                if (cls == 0)
                    continue;
                const tile_span sp = {b, h, g, i0, z - i0, jn, bn};
                const bwd_tile x = tile_at(blk, ops, &sp);
                grads_tile(blk, &rl, cls, &x, t);
                if (poll && progress)
                    progress(progress_ctx);
            }
    }
}

void ra_kernel_backward_block(const ra_block *blk, const ra_bwd_operands *x,
                              ra_bwd_workspace *ws, ra_progress_fn progress,
                              void *progress_ctx)
{
    if (blk->n == 0 || blk->m == 0)
        return;
    const int64_t items = blk->B * blk->G;

#pragma omp parallel for schedule(dynamic, 1) num_threads(ws->threads)
    for (int64_t it = 0; it < items; it++) {
        const int tid = omp_get_thread_num();
        item_backward(blk, x, it / blk->G, it % blk->G, scratch_of(ws, tid),
                      tid == 0, progress, progress_ctx);
    }
}

double ra_params_backward_flops(const ra_shape *shape,
                                const ra_params *params,
                                const ra_masks *masks)
{
    /* five products per visible tile (S, dV, dP, dQ, dK) against two */
    return 2.5 * ra_params_forward_flops(shape, params, masks);
}

double ra_backward_flops(const ra_shape *shape, const ra_numerics *num,
                         const ra_masks *masks)
{
    ra_params p;
    ra_params_join(num, NULL, &p);
    return ra_params_backward_flops(shape, &p, masks);
}
