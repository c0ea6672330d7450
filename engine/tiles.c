/* tiles.c: what the forward and backward kernels share about a tile: the
 * mask rules of one batch, the range of a tile's segment ids, and the
 * per-thread scratch (kernel.h). */
#include <stdlib.h>

#include "band.h"
#include "kernel.h"

ra_tile_rules ra_tile_rules_of(const ra_block *blk, int64_t b)
{
    const ra_mask *mk = &blk->mask;
    const ra_band band = ra_band_make(mk->causal, mk->window, mk->left,
                                      mk->right, mk->diag);
    const int segs = mk->q_seg && mk->k_seg;
    return (ra_tile_rules){band.lo, band.hi,
                           mk->q_lens ? mk->q_lens[b] : RA_UNBOUNDED,
                           mk->kv_lens ? mk->kv_lens[b] : RA_UNBOUNDED,
                           segs ? mk->q_seg + b * blk->n : NULL,
                           segs ? mk->k_seg + b * blk->m : NULL};
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
