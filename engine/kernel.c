/* kernel.c: the tiled fp32 forward kernel with online softmax.
 *
 * Work items are (batch, head, query tile); OpenMP threads take them
 * dynamically, largest causal tiles first, each calling single-threaded
 * sgemm per tile. Per item, pass 1 makes the base-2 scores of one key tile
 * with sgemm (alpha = scale * log2 e), pass 2 masks the tile if it straddles
 * the causal edge, pass 3 runs the online softmax (rescaling the accumulator
 * only where the row max moved), pass 4 adds P V with sgemm; at the end of
 * the block the normalised partial is merged into (o, lse). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "kernel.h"

#define LN2 0.693147180559945309

struct ra_workspace {
    int threads;
    int64_t block_q, block_kv, Dv;
    size_t per_thread;  /* floats per thread, a multiple of 16 */
    float *mem;         /* threads * per_thread floats */
};

/* Scratch of one thread: scores (block_q x block_kv), accumulator
 * (block_q x Dv), running max and sum (block_q each). */
typedef struct {
    float *s, *acc, *mx, *sum;
} tile_scratch;

static size_t round16(size_t x) { return (x + 15) & ~(size_t)15; }

ra_workspace *ra_workspace_create(int threads, int64_t block_q,
                                  int64_t block_kv, int64_t Dv)
{
    if (threads < 1 || block_q < 1 || block_kv < 1 || Dv < 1)
        return NULL;
    ra_workspace *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->threads = threads;
    ws->block_q = block_q;
    ws->block_kv = block_kv;
    ws->Dv = Dv;
    ws->per_thread = round16((size_t)(block_q * block_kv)) +
                     round16((size_t)(block_q * Dv)) +
                     2 * round16((size_t)block_q);
    size_t bytes = (size_t)threads * ws->per_thread * sizeof(float);
    if (posix_memalign((void **)&ws->mem, 64, bytes) != 0) {
        free(ws);
        return NULL;
    }
    return ws;
}

void ra_workspace_free(ra_workspace *ws)
{
    if (!ws)
        return;
    free(ws->mem);
    free(ws);
}

int ra_workspace_threads(const ra_workspace *ws) { return ws->threads; }

static tile_scratch scratch_of(const ra_workspace *ws, int tid)
{
    float *base = ws->mem + (size_t)tid * ws->per_thread;
    tile_scratch t;
    t.s = base;
    t.acc = t.s + round16((size_t)(ws->block_q * ws->block_kv));
    t.mx = t.acc + round16((size_t)(ws->block_q * ws->Dv));
    t.sum = t.mx + round16((size_t)ws->block_q);
    return t;
}

void ra_state_reset(int64_t B, int64_t n, int64_t H, int64_t Dv, float *o,
                    float *lse)
{
    memset(o, 0, (size_t)(B * n * H * Dv) * sizeof *o);
    for (int64_t i = 0; i < B * H * n; i++)
        lse[i] = -INFINITY;
}

/* Merges the partial acc / sum (log2 max mx) of one query row into the
 * running o row (Dv) and *lse with the LSE merge; sum == 0 is the empty
 * partial and changes nothing. */
static void merge_row(int64_t Dv, const float *acc, float mx, float sum,
                      float *o, float *lse)
{
    if (!(sum > 0.0f))
        return;
    double lb = ((double)mx + log2((double)sum)) * LN2;
    double la = *lse;
    if (la == -INFINITY) {
        float inv = (float)(1.0 / sum);
        for (int64_t d = 0; d < Dv; d++)
            o[d] = acc[d] * inv;
        *lse = (float)lb;
        return;
    }
    double hi = la > lb ? la : lb, lo = la > lb ? lb : la;
    double l = hi + log1p(exp(lo - hi));
    float wa = (float)exp(la - l);
    float wb = (float)(exp(lb - l) / sum);
    for (int64_t d = 0; d < Dv; d++)
        o[d] = wa * o[d] + wb * acc[d];
    *lse = (float)l;
}

/* Sets s[r][c] = -inf where key c is beyond the causal edge of query r. */
static void mask_causal(const ra_mask *mk, int64_t i0, int64_t bq, int64_t j0,
                        int64_t bk, float *s, int64_t lds)
{
    for (int64_t r = 0; r < bq; r++) {
        int64_t edge = mk->qpos[i0 + r] + mk->diag;
        int64_t c = bk;
        while (c > 0 && mk->kpos[j0 + c - 1] > edge)
            c--;
        for (float *p = s + r * lds + c; p < s + r * lds + bk; p++)
            *p = -INFINITY;
    }
}

/* One work item: query rows [i0, i0 + bq) of head h in batch b against every
 * key tile of the block. */
static void tile_forward(const ra_block *blk, int64_t b, int64_t h,
                         int64_t i0, int64_t bq, const float *q,
                         const float *k, const float *v, float *o, float *lse,
                         tile_scratch t, int poll, ra_progress_fn progress,
                         void *progress_ctx)
{
    const int64_t n = blk->n, m = blk->m, H = blk->H, G = blk->G;
    const int64_t D = blk->D, Dv = blk->Dv, bkv = blk->block_kv;
    const int64_t g = h / (H / G);
    const ra_mask *mk = &blk->mask;
    const float *qt = q + ((b * n + i0) * H + h) * D;  /* bq x D, ld H*D */
    const float *kb = k + (b * m * G + g) * D;         /* m x D, ld G*D */
    const float *vb = v + (b * m * G + g) * Dv;        /* m x Dv, ld G*Dv */

    for (int64_t r = 0; r < bq; r++) {
        t.mx[r] = -INFINITY;
        t.sum[r] = 0.0f;
    }
    memset(t.acc, 0, (size_t)(bq * Dv) * sizeof(float));

    for (int64_t j0 = 0; j0 < m; j0 += bkv) {
        int64_t bk = m - j0 < bkv ? m - j0 : bkv;
        int need_mask = 0;
        if (mk->causal) {
            if (mk->kpos[j0] > mk->qpos[i0 + bq - 1] + mk->diag)
                break; /* this and every later tile is above the diagonal */
            need_mask = mk->kpos[j0 + bk - 1] > mk->qpos[i0] + mk->diag;
        }
        /* pass 1: base-2 scores */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)bq, (int)bk,
                    (int)D, blk->alpha, qt, (int)(H * D), kb + j0 * G * D,
                    (int)(G * D), 0.0f, t.s, (int)bkv);
        /* pass 2: the causal edge */
        if (need_mask)
            mask_causal(mk, i0, bq, j0, bk, t.s, bkv);
        /* pass 3: online softmax */
        for (int64_t r = 0; r < bq; r++) {
            float *row = t.s + r * bkv;
            float mnew = ra_max(row, bk);
            if (mnew < t.mx[r])
                mnew = t.mx[r];
            if (mnew == -INFINITY) { /* nothing visible yet */
                memset(row, 0, (size_t)bk * sizeof *row);
                continue;
            }
            if (mnew > t.mx[r]) {
                float c = exp2f(t.mx[r] - mnew); /* 0 when mx was -inf */
                t.sum[r] *= c;
                float *a = t.acc + r * Dv;
                for (int64_t d = 0; d < Dv; d++)
                    a[d] *= c;
                t.mx[r] = mnew;
            }
            t.sum[r] += ra_exp2_shift_sum(row, bk, mnew);
        }
        /* pass 4: acc += P V */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)bq,
                    (int)Dv, (int)bk, 1.0f, t.s, (int)bkv, vb + j0 * G * Dv,
                    (int)(G * Dv), 1.0f, t.acc, (int)Dv);
        if (poll && progress)
            progress(progress_ctx);
    }
    for (int64_t r = 0; r < bq; r++)
        merge_row(Dv, t.acc + r * Dv, t.mx[r], t.sum[r],
                  o + ((b * n + i0 + r) * H + h) * Dv,
                  lse + (b * H + h) * n + i0 + r);
}

void ra_kernel_forward_block(const ra_block *blk, const float *q,
                             const float *k, const float *v, float *o,
                             float *lse, ra_workspace *ws,
                             ra_progress_fn progress, void *progress_ctx)
{
    const int64_t bq = blk->block_q;
    if (blk->n == 0 || blk->m == 0)
        return;
    const int64_t tiles = (blk->n + bq - 1) / bq;
    const int64_t items = blk->B * blk->H * tiles;

#pragma omp parallel for schedule(dynamic, 1) num_threads(ws->threads)
    for (int64_t it = 0; it < items; it++) {
        /* Later query tiles see more causal keys: hand them out first. */
        int64_t qt = tiles - 1 - it % tiles;
        int64_t bh = it / tiles;
        int64_t i0 = qt * bq;
        int64_t rows = blk->n - i0 < bq ? blk->n - i0 : bq;
        int tid = omp_get_thread_num();
        tile_forward(blk, bh / blk->H, bh % blk->H, i0, rows, q, k, v, o, lse,
                     scratch_of(ws, tid), tid == 0, progress, progress_ctx);
    }
}
