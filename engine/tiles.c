/* tiles.c: what the forward and backward kernels share about a tile: the
 * mask rules of one batch, the range of a tile's segment ids, and the
 * per-thread scratch (kernel.h). */
#include <math.h>
#include <stdlib.h>

#include "band.h"
#include "kernel.h"

/* Row i's own diag: its aligned position minus its position. */
static int64_t row_diag(const ra_block *blk, int64_t b, int64_t i)
{
    const ra_mask *mk = &blk->mask;
    return mk->qalign ? mk->qalign[b * blk->n + i] - mk->qpos[i] : mk->diag;
}

ra_tile_rules ra_tile_rules_of(const ra_block *blk, int64_t b, int64_t i)
{
    const ra_mask *mk = &blk->mask;
    const int64_t diag = blk->n > 0 ? row_diag(blk, b, i) : mk->diag;
    const ra_band band = ra_band_make(mk->causal, mk->window, mk->left,
                                      mk->right, diag);
    const int segs = mk->q_seg && mk->k_seg;
    return (ra_tile_rules){band.lo, band.hi,
                           mk->q_lens ? mk->q_lens[b] : RA_UNBOUNDED,
                           mk->kv_lens ? mk->kv_lens[b] : RA_UNBOUNDED,
                           segs ? mk->q_seg + b * blk->n : NULL,
                           segs ? mk->k_seg + b * blk->m : NULL, diag};
}

int64_t ra_tile_run_end(const ra_block *blk, int64_t b, int64_t i,
                        int64_t end, int by_id)
{
    const ra_mask *mk = &blk->mask;
    const int64_t *seg = by_id && mk->q_seg && mk->k_seg
                             ? mk->q_seg + b * blk->n : NULL;
    if (!mk->qalign && !seg)
        return end;
    const int64_t diag = row_diag(blk, b, i);
    int64_t z = i + 1;
    while (z < end && (!seg || seg[z] == seg[i]) &&
           (!mk->qalign || row_diag(blk, b, z) == diag))
        z++;
    return z;
}

void ra_minmax(const int64_t *x, int64_t len, int64_t *mn, int64_t *mx)
{
    *mn = INT64_MAX;
    *mx = INT64_MIN;
    for (int64_t i = 0; i < len; i++) {
        *mn = x[i] < *mn ? x[i] : *mn;
        *mx = x[i] > *mx ? x[i] : *mx;
    }
}

float *ra_scratch_alloc(int threads, size_t per_thread)
{
    void *mem = NULL;
    if (posix_memalign(&mem, 4096, (size_t)threads * per_thread *
                                     sizeof(float)) != 0)
        return NULL;
    return mem;
}

int ra_kernel_mm_shapes(const ra_block *blk, int backward, ra_mm_shape *out)
{
    const int64_t bq = blk->block_q, bkv = blk->block_kv;
    const int64_t D = blk->D, Dv = blk->Dv, H = blk->H, G = blk->G;
    const float c = (float)(blk->alpha * M_LN2); /* the backward's dS scale */
    int n = 0;
    /* the scores (both kernels; the additive score makes them pair by
     * pair, and its dQ and dK too) and the forward's acc += P V */
    if (blk->score != RA_SCORE_ADDITIVE)
        out[n++] = (ra_mm_shape){0, 1, bq, bkv, D, blk->alpha, 0.0f, bkv};
    if (!backward) {
        out[n++] = (ra_mm_shape){0, 0, bq, Dv, bkv, 1.0f, 1.0f, Dv};
        return n;
    }
    /* the backward: dV += P^T dO, dP = dO V^T, dQ += c dS K,
     * dK += c dS^T Q, C in the (B, len, heads, dim) layouts */
    out[n++] = (ra_mm_shape){1, 0, bkv, Dv, bq, 1.0f, 1.0f, G * Dv};
    out[n++] = (ra_mm_shape){0, 1, bq, bkv, Dv, 1.0f, 0.0f, bkv};
    if (blk->score != RA_SCORE_ADDITIVE) {
        out[n++] = (ra_mm_shape){0, 0, bq, D, bkv, c, 1.0f, H * D};
        out[n++] = (ra_mm_shape){1, 0, bkv, D, bq, c, 1.0f, G * D};
    }
    return n;
}
