/* tiles.c: what the forward and backward kernels share about a tile: the
 * mask rules of one batch, the range of a tile's segment ids, and the
 * per-thread scratch (kernel.h). */
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
