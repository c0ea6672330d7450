/* kernel.c: the tiled fp32 forward kernel with online softmax.
 *
 * Work items are (batch, head, query tile); OpenMP threads take them
 * dynamically, largest causal tiles first, each calling single-threaded
 * sgemm per tile on scratch pages of its own and counting its busy time;
 * thread 0 alone runs the caller's progress hook (tail_progress). Per
 * item, pass 1 makes the base-2 scores of one key tile with sgemm
 * (alpha = scale * log2 e), maps them by the score features
 * (score_features.h) and adds the ALiBi bias when on, pass 2 masks the
 * tile if it straddles an edge of the mask (tiles wholly invisible are
 * never computed), pass 3 runs the online softmax (rescaling the
 * accumulator only where the row max moved), pass 4 adds P V with sgemm;
 * at the end of the block the normalised partial is merged into (o, lse). With bf16
 * precision (blk->mm16) the two products run in bf16 with fp32 sums
 * (the softmax writes P rounded to bf16, fused with its exp and the row
 * max: ra_exp2_shift_sum_bf16); everything else stays fp32. */
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "band.h"
#include "gemm.h"
#include "kernel.h"

#define LN2 0.693147180559945309

struct ra_workspace {
    int threads;
    int64_t block_q, block_kv, Dv;
    size_t per_thread;  /* floats per thread, whole pages */
    float *mem;         /* threads * per_thread floats */
    double *busy;       /* seconds in work items, thread t at t * BUSY_STRIDE;
                           both arrays live in the block of the struct */
    ra_tick_fn tick;    /* the caller's progress between tiles, or NULL */
    void *tick_ctx;
    uint16_t *kv16;     /* bf16 on oneDNN: the block's k and v staged in
                           bf16 (stage_kv), kv16_len elements; grown, never
                           shrunk, freed with the workspace */
    size_t kv16_len;
    float *bands;       /* fp32 with kv heads: per thread BAND_FLOATS for a
                           band's keys in rows of their own (band_keys);
                           made at the first call that uses it */
};

/* Floats in a page, and doubles in a cache line: each thread's scratch
 * starts on a page of its own (first-touched by that thread) and its busy
 * counter on a line of its own (no false sharing). */
enum { PAGE_FLOATS = 1024, BUSY_STRIDE = 8 };
_Static_assert(sizeof(ra_workspace) <= PAGE_FLOATS * sizeof(float),
               "the struct heads its block on one page");

/* The keys of one (batch, kv head) as the tile products read them: key
 * j's row at k + (j - j0) * ldk, its value's at v + (j - j0) * ldv. */
typedef struct {
    const float *k, *v;
    int64_t ldk, ldv, j0;
} kv_rows;

/* One thread's copy of keys [s0, s1) of kv head bg (batch * G + head; -1:
 * none yet) in rows of their own, cap keys: cap x D of k, then cap x Dv
 * of v (band_keys). NULL buf: none. */
typedef struct {
    float *buf;
    int64_t cap, bg, s0, s1;
} band_copy;

/* Scratch of one thread: scores (block_q x block_kv), accumulator
 * (block_q x Dv), running max and sum (block_q each), a per-key term
 * (block_kv), a masked tile's visible columns (2 x block_q), the weights
 * of a bf16 tile in bf16 (block_q x block_kv halves, rows of the tile's
 * width). */
typedef struct {
    float *s, *acc, *mx, *sum, *kterm;
    int32_t *vis; /* row r sees columns [vis[2r], vis[2r + 1]) */
    uint16_t *p16;
    int tid; /* the thread's number, for its bf16 products' scratch */
    const uint16_t *kv16; /* the call's staged k, v (stage_kv), or NULL */
    kv_rows kv;           /* the current rows' keys */
    band_copy *band;      /* the thread's band copy (band_keys) */
} tile_scratch;

static const float *key_row(const kv_rows *r, int64_t j)
{
    return r->k + (j - r->j0) * r->ldk;
}

static const float *value_row(const kv_rows *r, int64_t j)
{
    return r->v + (j - r->j0) * r->ldv;
}

static size_t round16(size_t x) { return (x + 15) & ~(size_t)15; }

/* Zeroes each thread's scratch from that thread, so that its pages sit
 * near the core that computes on them (first touch). */
static void workspace_touch(ra_workspace *ws)
{
#pragma omp parallel num_threads(ws->threads)
    {
        const int tid = omp_get_thread_num();
        memset(ws->mem + (size_t)tid * ws->per_thread, 0,
               ws->per_thread * sizeof(float));
        ws->busy[tid * BUSY_STRIDE] = 0.0;
    }
}

/* One block: the struct on a page of its own, each thread's scratch on
 * pages of its own, then the threads' busy counters. */
ra_workspace *ra_workspace_create(int threads, int64_t block_q,
                                  int64_t block_kv, int64_t Dv)
{
    if (threads < 1 || block_q < 1 || block_kv < 1 || Dv < 1)
        return NULL;
    const size_t floats = round16((size_t)(block_q * block_kv)) +
                          round16((size_t)(block_q * Dv)) +
                          4 * round16((size_t)block_q) +
                          round16((size_t)block_kv) +
                          round16((size_t)(block_q * block_kv + 1) / 2);
    const size_t per = (floats + PAGE_FLOATS - 1) / PAGE_FLOATS * PAGE_FLOATS;
    const size_t scratch = PAGE_FLOATS + (size_t)threads * per;
    const size_t busy = (size_t)threads * BUSY_STRIDE; /* doubles */
    float *mem = ra_scratch_alloc(1, scratch + 2 * busy);
    if (!mem)
        return NULL;
    ra_workspace *ws = (ra_workspace *)mem;
    *ws = (ra_workspace){threads, block_q, block_kv, Dv, per,
                         mem + PAGE_FLOATS, (double *)(mem + scratch), NULL,
                         NULL, NULL, 0};
    workspace_touch(ws);
    return ws;
}

void ra_workspace_free(ra_workspace *ws)
{
    if (ws) {
        free(ws->kv16);
        free(ws->bands);
    }
    free(ws);
}

void ra_workspace_busy(const ra_workspace *ws, double *min, double *max)
{
    *min = *max = ws->busy[0];
    for (int t = 1; t < ws->threads; t++) {
        const double b = ws->busy[t * BUSY_STRIDE];
        *min = b < *min ? b : *min;
        *max = b > *max ? b : *max;
    }
}

int ra_workspace_threads(const ra_workspace *ws) { return ws->threads; }

void ra_workspace_set_tick(ra_workspace *ws, ra_tick_fn tick, void *ctx)
{
    ws->tick = tick;
    ws->tick_ctx = ctx;
}

/* What thread 0 runs between its tiles in one kernel call: the caller's
 * transfers (poll, may be NULL), then the tick with the share of the
 * call's work items done. */
typedef struct {
    ra_progress_fn poll;
    void *poll_ctx;
    const ra_workspace *ws;
    const int64_t *done;
    int64_t items;
} tile_hook;

static void tile_hook_run(void *ctx)
{
    const tile_hook *hk = ctx;
    int64_t d;
    if (hk->poll)
        hk->poll(hk->poll_ctx);
#pragma omp atomic read
    d = *hk->done;
    hk->ws->tick(hk->ws->tick_ctx, (double)d / (double)hk->items);
}

/* The hook of a kernel call: the poll alone without a tick, else the poll
 * and the tick together (hk filled, *ctx set to it). */
static ra_progress_fn tile_hook_of(const ra_workspace *ws, tile_hook *hk,
                                   void **ctx)
{
    if (!ws->tick) {
        *ctx = hk->poll_ctx;
        return hk->poll;
    }
    *ctx = hk;
    return tile_hook_run;
}

static tile_scratch scratch_of(const ra_workspace *ws, int tid)
{
    float *base = ws->mem + (size_t)tid * ws->per_thread;
    tile_scratch t;
    t.s = base;
    t.acc = t.s + round16((size_t)(ws->block_q * ws->block_kv));
    t.mx = t.acc + round16((size_t)(ws->block_q * ws->Dv));
    t.sum = t.mx + round16((size_t)ws->block_q);
    t.kterm = t.sum + round16((size_t)ws->block_q);
    t.vis = (int32_t *)(t.kterm + round16((size_t)ws->block_kv));
    t.p16 = (uint16_t *)(t.mx + 4 * round16((size_t)ws->block_q) +
                         round16((size_t)ws->block_kv));
    t.tid = tid;
    t.kv16 = NULL;
    t.band = NULL;
    return t;
}

void ra_state_reset(int64_t B, int64_t n, int64_t H, int64_t Dv, float *o,
                    float *lse)
{
    ra_state_reset_threads(B, n, H, Dv, o, lse, 1);
}

void ra_state_reset_threads(int64_t B, int64_t n, int64_t H, int64_t Dv,
                            float *o, float *lse, int threads)
{
    /* o then lse as one index range, cut into chunks of 2^16 floats */
    const int64_t no = B * n * H * Dv, all = no + B * H * n, chunk = 1 << 16;
#pragma omp parallel for num_threads(threads > 0 ? threads : 1) schedule(static)
    for (int64_t c = 0; c < (all + chunk - 1) / chunk; c++) {
        const int64_t a = c * chunk, z = a + chunk < all ? a + chunk : all;
        if (a < no)
            memset(o + a, 0, (size_t)((z < no ? z : no) - a) * sizeof *o);
        for (int64_t i = a > no ? a : no; i < z; i++)
            lse[i - no] = -INFINITY;
    }
}

void ra_state_open(int64_t B, int64_t n, int64_t H, float *lse, int threads)
{
    const int64_t all = B * H * n;
#pragma omp parallel for num_threads(threads > 0 ? threads : 1) schedule(static)
    for (int64_t i = 0; i < all; i++)
        lse[i] = -INFINITY;
}

void ra_state_close(int64_t B, int64_t n, int64_t H, int64_t Dv, float *o,
                    const float *lse, int threads)
{
#pragma omp parallel for num_threads(threads > 0 ? threads : 1) schedule(static)
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, h = bh % H;
        for (int64_t i = 0; i < n; i++)
            if (lse[bh * n + i] == -INFINITY)
                memset(o + ((b * n + i) * H + h) * Dv, 0,
                       (size_t)Dv * sizeof *o);
    }
}

/* The merge of two weighted entries wa a + wb b (wa, wb >= 0), where a
 * non-finite entry (nonfinite mode: a visible NaN or inf value,
 * pv_nonfinite) stands for itself whatever its weight: then the sum of
 * the non-finite ones (NaN, or inf of their sign; both signs: NaN). */
static float merge_entry(float wa, float a, float wb, float b)
{
    if (isfinite(a) && isfinite(b))
        return wa * a + wb * b;
    return (isfinite(a) ? 0.0f : a) + (isfinite(b) ? 0.0f : b);
}

/* Merges the partial acc / sum (log2 max mx) of one query row into the
 * running o row (Dv) and *lse with the LSE merge; shift (natural log) is
 * added to the partial's LSE. sum == 0 is the empty partial and changes
 * nothing. With keep (nonfinite mode) non-finite entries merge by
 * merge_entry. */
static void merge_row(int64_t Dv, const float *acc, float mx, float sum,
                      double shift, int keep, float *o, float *lse)
{
    if (isnan(sum)) { /* a NaN in q or k (--allow-nonfinite): show it */
        for (int64_t d = 0; d < Dv; d++)
            o[d] = NAN;
        *lse = NAN;
        return;
    }
    if (!(sum > 0.0f))
        return;
    double lb = ((double)mx + log2((double)sum)) * LN2 + shift;
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
    for (int64_t d = 0; d < Dv && !keep; d++)
        o[d] = wa * o[d] + wb * acc[d];
    for (int64_t d = 0; d < Dv && keep; d++)
        o[d] = merge_entry(wa, o[d], wb, acc[d]);
    *lse = (float)l;
}

typedef ra_tile_rules tile_rules; /* kernel.h */

static int is_sorted(const int64_t *x, int64_t len)
{
    for (int64_t i = 1; i < len; i++)
        if (x[i] < x[i - 1])
            return 0;
    return 1;
}

/* kernel.h. Each row's visible keys [first, last) only move right: one
 * sweep over the tile's keys in all. vis lets the softmax skip the hidden
 * entries, which get the weight they would have, 0. */
void ra_mask_tile(const ra_mask *mk, const tile_rules *t, int64_t i0,
                  int64_t bq, int64_t j0, int64_t bk, float *s, int64_t lds,
                  int32_t *vis)
{
    const float hidden = vis ? 0.0f : -INFINITY;
    const int64_t *kp = mk->kpos + j0;
    int64_t first = 0, last = 0;
    for (int64_t r = 0; r < bq; r++) {
        float *row = s + r * lds;
        const int64_t qp = mk->qpos[i0 + r];
        if (qp < t->q_len) {
            const int64_t top = qp + t->hi < t->kv_len - 1 ? qp + t->hi
                                                           : t->kv_len - 1;
            while (first < bk && kp[first] < qp + t->lo)
                first++;
            if (last < first)
                last = first;
            while (last < bk && kp[last] <= top)
                last++;
        } else {
            first = last = bk; /* padding rows, and all rows after them */
        }
        for (int64_t c = 0; c < first; c++)
            row[c] = hidden;
        for (int64_t c = last; c < bk; c++)
            row[c] = hidden;
        if (vis) {
            vis[2 * r] = (int32_t)first;
            vis[2 * r + 1] = (int32_t)(last > first ? last : first);
        }
        if (t->q_seg) {
            const int64_t seg = t->q_seg[i0 + r];
            for (int64_t c = first; c < last; c++)
                if (t->k_seg[j0 + c] != seg)
                    row[c] = -INFINITY;
        }
    }
}

/* Base-2 scores of a bq x bk tile into t.s (row stride block_kv): qt rows
 * of stride H*D against the keys from j0 in t.kv. */
static void score_tile(const ra_block *blk, const float *qt, int64_t j0,
                       const uint16_t *kt16, int64_t bq, int64_t bk,
                       int q_kept, tile_scratch t)
{
    const int64_t D = blk->D, ldq = blk->H * D, ldk = t.kv.ldk;
    const int64_t lds = blk->block_kv;
    const float *kt = key_row(&t.kv, j0);
    if (blk->score == RA_SCORE_ADDITIVE) {
        for (int64_t r = 0; r < bq; r++)
            for (int64_t c = 0; c < bk; c++)
                t.s[r * lds + c] = (float)M_LOG2E *
                                   ra_additive_score(qt + r * ldq, kt + c * ldk,
                                                     blk->w_v, D);
        return;
    }
    ra_mm_tile(blk->gemm, blk->mm16, t.tid,
               &(ra_mm){.tb = 1, .m = bq, .n = bk, .k = D,
                        .alpha = blk->alpha, .a = qt, .lda = ldq, .b = kt,
                        .ldb = ldk, .c = t.s, .ldc = lds, .a_kept = q_kept,
                        .b16 = kt16});
    if (blk->score == RA_SCORE_GAUSSIAN) {
        /* the key term, log2(e) |k|^2 / (2 sigma^2), off every column */
        const float coef = (float)(M_LOG2E * blk->half_inv_sigma2);
        for (int64_t c = 0; c < bk; c++) {
            float kk = 0.0f;
            for (int64_t d = 0; d < D; d++)
                kk += kt[c * ldk + d] * kt[c * ldk + d];
            t.kterm[c] = coef * kk;
        }
        for (int64_t r = 0; r < bq; r++)
            for (int64_t c = 0; c < bk; c++)
                t.s[r * lds + c] -= t.kterm[c];
    }
}

/* The key position that ALiBi measures a query at position qp from, so
 * that bias = -slope |kpos - ref| - slope |ref - (qp + diag)| for every key
 * of the block. With rel, the visible key of this block nearest to the
 * query's aligned position (that position itself when the block's keys lie
 * on both sides): the tile's biases then start at 0, where float32 is fine,
 * and rows_merge adds the second term to the LSE in double. Else the
 * aligned position qp + diag (the map's absolute scores, read against the
 * final LSE). */
static int64_t alibi_ref(const ra_block *blk, const tile_rules *rl,
                         int64_t qp, int rel)
{
    const int64_t at = qp + rl->diag;
    if (!rel)
        return at;
    int64_t lo = blk->mask.kpos[0], hi = blk->mask.kpos[blk->m - 1];
    hi = rl->kv_len - 1 < hi ? rl->kv_len - 1 : hi;
    hi = qp + rl->hi < hi ? qp + rl->hi : hi;
    lo = qp + rl->lo > lo ? qp + rl->lo : lo;
    if (lo > hi) /* the row sees nothing here: any reference will do */
        return at;
    return at < lo ? lo : at > hi ? hi : at;
}

/* The ALiBi bias of a key at kp from a query aligned at `at`: -|kp - at|
 * (times the slope), symmetric as in flash-attention; with a causal mask
 * only keys left of the diagonal are visible, where it is kp - at. */
static int64_t alibi_dist(int64_t kp, int64_t at)
{
    return kp > at ? kp - at : at - kp;
}

/* A tile: query rows [i0, i0 + bq) against keys [j0, j0 + bk). */
typedef struct {
    int64_t i0, bq, j0, bk;
} tile_box;

/* ALiBi on a tile x of base-2 scores of head h: -slope_h * log2(e) *
 * |kpos - ref| added (alibi_ref); distances are exact in float up to 2^24
 * tokens, and rounded beyond only where the weight underflows anyway. */
static void alibi_tile(const ra_block *blk, const tile_rules *rl, int rel,
                       int64_t h, tile_box x, float *s)
{
    const float c = (float)(-blk->alibi[h] * M_LOG2E);
    const int64_t *qp = blk->mask.qpos + x.i0, *kp = blk->mask.kpos + x.j0;
    const int64_t lds = blk->block_kv;
    for (int64_t r = 0; r < x.bq; r++) {
        const int64_t ref = alibi_ref(blk, rl, qp[r], rel);
        float *row = s + r * lds;
        for (int64_t col = 0; col < x.bk; col++)
            row[col] += c * (float)alibi_dist(kp[col], ref);
    }
}

/* The keys [*j_first, *j_end) of the block that the query rows with
 * positions [qmin, qmax] and segment ids [qs_min, qs_max] may see: from the
 * first key that qmin may see to the last that qmax may see. */
static void key_range(const ra_block *blk, const tile_rules *rl, int64_t qmin,
                      int64_t qmax, int64_t qs_min, int64_t qs_max,
                      int64_t *j_first, int64_t *j_end)
{
    const int64_t m = blk->m, *kpos = blk->mask.kpos;
    int64_t k_end = rl->hi < RA_UNBOUNDED ? qmax + rl->hi : RA_UNBOUNDED;
    if (k_end > rl->kv_len - 1)
        k_end = rl->kv_len - 1;
    *j_first = rl->lo > -RA_UNBOUNDED ? ra_lower_bound(kpos, m, qmin + rl->lo)
                                      : 0;
    *j_end = k_end < RA_UNBOUNDED ? ra_lower_bound(kpos, m, k_end + 1) : m;
    /* Packed sequences are usually numbered in order: then the keys of the
     * tile's segments are one run, found by bisection. */
    if (rl->k_seg && is_sorted(rl->k_seg, m)) {
        const int64_t a = ra_lower_bound(rl->k_seg, m, qs_min);
        const int64_t z = ra_lower_bound(rl->k_seg, m, qs_max + 1);
        *j_first = a > *j_first ? a : *j_first;
        *j_end = z < *j_end ? z : *j_end;
    }
}

/* kernel.h. bf16 widens to whole tiles, so that every tile runs the
 * call's bf16 primitive (bf16.h: only the declared bq x bkv shape does; a
 * band one key short of it would run none); fp32 to RA_KEY_UNIT keys, as
 * oneDNN's products run a multiple of 16 columns 7-8% faster than one key
 * less (a window-512 tile: 640 against 639 keys). The keys added are
 * outside the rows' masks, which the tiles' own checks find. */

void ra_widen_keys(int64_t unit, int64_t m, int64_t *a, int64_t *z)
{
    const int64_t len = *z - *a, want = (len + unit - 1) / unit * unit;
    if (len <= 0 || len == want || want > m)
        return;
    *z = *a + want <= m ? *a + want : m;
    *a = *z - want;
}

/* A band tile's rows in groups of BAND_ROWS, each against only the keys
 * [c0, c0 + nc) of the tile that its rows may see: the visible keys of a
 * row start and end no earlier than those of the rows above it, so a
 * group's span runs from its first row's first key to its last row's last
 * key (widened to RA_KEY_UNIT keys). A narrow window's tile then skips most
 * of the two triangles that the band leaves outside it (a 128-row tile of
 * window 512 scores 1.13 entries per visible pair instead of 1.25), and an
 * edge tile of a wide one most of its hidden half. */
enum { BAND_ROWS = 64, BAND_GROUPS_MAX = 8 };

typedef struct {
    int64_t r0, nr, c0, nc;
} band_group;

/* The groups of rows [i0, i0 + bq) against keys [j0, j0 + bk), or 0 when
 * they would not save a sixteenth of the tile's products (then one
 * product covers the tile). Dot scores in fp32 only: bf16 runs each declared
 * tile shape whole (bf16.h), the other scores are made pair by pair or
 * add a per-key term over the whole tile. */
static int band_groups(const ra_block *blk, const tile_rules *rl, int64_t i0,
                       int64_t bq, int64_t j0, int64_t bk, band_group *g)
{
    if (blk->mm16 || blk->score != RA_SCORE_DOT || rl->q_seg ||
        bq < 2 * BAND_ROWS || bq > BAND_ROWS * BAND_GROUPS_MAX)
        return 0;
    const int64_t *qp = blk->mask.qpos + i0, *kp = blk->mask.kpos + j0;
    int n = 0;
    int64_t area = 0;
    for (int64_t r0 = 0; r0 < bq; r0 += BAND_ROWS) {
        const int64_t nr = bq - r0 < BAND_ROWS ? bq - r0 : BAND_ROWS;
        int64_t last = r0 + nr - 1; /* its last row that may see a key */
        while (last >= r0 && qp[last] >= rl->q_len)
            last--;
        int64_t c0 = 0, cz = 0;
        if (last >= r0) {
            const int64_t lo = rl->lo > -RA_UNBOUNDED ? qp[r0] + rl->lo
                                                      : INT64_MIN;
            int64_t top = rl->kv_len - 1;
            if (rl->hi < RA_UNBOUNDED && qp[last] + rl->hi < top)
                top = qp[last] + rl->hi;
            c0 = lo == INT64_MIN ? 0 : ra_lower_bound(kp, bk, lo);
            cz = ra_lower_bound(kp, bk, top + 1);
            if (cz < c0)
                cz = c0;
            ra_widen_keys(RA_KEY_UNIT, bk, &c0, &cz);
        }
        g[n++] = (band_group){r0, nr, c0, cz - c0};
        area += nr * (cz - c0);
    }
    return 16 * area <= 15 * bq * bk ? n : 0;
}

/* A band tile's products by groups (band_groups), the tile's keys from
 * j0 in t.kv: with qt, the base-2 scores of each group's rows against its
 * keys; without, acc += P V over each group's keys (P is 0 outside
 * them). */
static void groups_products(const ra_block *blk, const band_group *g,
                            int ng, const float *qt, int64_t j0,
                            tile_scratch t)
{
    const int64_t ldq = blk->H * blk->D, ldk = t.kv.ldk;
    const int64_t ldv = t.kv.ldv, lds = blk->block_kv;
    const float *kt = key_row(&t.kv, j0), *vt = value_row(&t.kv, j0);
    for (int i = 0; i < ng; i++) {
        if (g[i].nc == 0)
            continue;
        float *s = t.s + g[i].r0 * lds + g[i].c0;
        if (qt)
            ra_mm_tile(blk->gemm, NULL, t.tid,
                       &(ra_mm){.tb = 1, .m = g[i].nr, .n = g[i].nc,
                                .k = blk->D, .alpha = blk->alpha,
                                .a = qt + g[i].r0 * ldq, .lda = ldq,
                                .b = kt + g[i].c0 * ldk, .ldb = ldk,
                                .c = s, .ldc = lds});
        else
            ra_mm_tile(blk->gemm, NULL, t.tid,
                       &(ra_mm){.m = g[i].nr, .n = blk->Dv, .k = g[i].nc,
                                .alpha = 1.0f, .beta = 1.0f, .a = s,
                                .lda = lds, .b = vt + g[i].c0 * ldv,
                                .ldb = ldv, .c = t.acc + g[i].r0 * blk->Dv,
                                .ldc = blk->Dv});
    }
}

/* Row r's running sum and accumulator moved to a new max mnew > t.mx[r]
 * (from -inf: both become 0). */
static void row_rescale(const ra_block *blk, int64_t r, float mnew,
                        tile_scratch t)
{
    const float c = exp2f(t.mx[r] - mnew); /* 0 when mx was -inf */
    float *a = t.acc + r * blk->Dv;
    t.sum[r] *= c;
    for (int64_t d = 0; d < blk->Dv && !blk->nan_check; d++)
        a[d] *= c;
    for (int64_t d = 0; d < blk->Dv && blk->nan_check; d++)
        a[d] = merge_entry(c, a[d], 0.0f, 0.0f);
    t.mx[r] = mnew;
}

/* How far (base 2) a bf16 row's scores may rise above its running max
 * before the max moves: weights up to 2^8, which fp32 sums and bf16 hold
 * as well as weights up to 1. */
#define LAZY_MAX 8.0f

/* One row of a bf16 tile (row, len entries; P into row16): one fused pass
 * from the running max when the row has one and no score rises LAZY_MAX
 * above it, else the max first, the rescale, then the pass. */
static void softmax_row16(const ra_block *blk, int64_t r, const float *row,
                          int64_t len, uint16_t *row16, tile_scratch t)
{
    float top;
    if (t.mx[r] > -INFINITY) {
        const float sum = ra_exp2_shift_sum_bf16(row, len, t.mx[r], row16,
                                                 &top);
        if (!(top > t.mx[r] + LAZY_MAX)) {
            t.sum[r] += sum;
            return;
        }
    } else {
        top = ra_max(row, len);
    }
    if (top == -INFINITY) { /* nothing visible yet */
        memset(row16, 0, (size_t)len * sizeof *row16);
        return;
    }
    row_rescale(blk, r, top, t);
    t.sum[r] += ra_exp2_shift_sum_bf16(row, len, top, row16, &top);
}

/* Pass 3, the online softmax of one bq x bk tile of base-2 scores: each
 * row's running max and sum, the accumulator rescaled only where the max
 * moved; the scores become the unnormalised weights 2^(s - max), in place,
 * or with t.p16 (a bf16 call) rounded to bf16 into it (rows of bk) by
 * softmax_row16. With vis (ra_mask_tile) only each row's visible run is
 * read; the rest is 0. */
static void softmax_tile(const ra_block *blk, int64_t bq, int64_t bk,
                         const int32_t *vis, tile_scratch t)
{
    for (int64_t r = 0; r < bq; r++) {
        const int64_t c0 = vis ? vis[2 * r] : 0;
        const int64_t len = vis ? vis[2 * r + 1] - c0 : bk;
        float *row = t.s + r * blk->block_kv + c0;
        if (t.p16) { /* the hidden entries: bf16 0 is all zero bits */
            uint16_t *row16 = t.p16 + r * bk;
            memset(row16, 0, (size_t)c0 * sizeof *row16);
            memset(row16 + c0 + len, 0,
                   (size_t)(bk - c0 - len) * sizeof *row16);
            softmax_row16(blk, r, row, len, row16 + c0, t);
            continue;
        }
        if (blk->nan_check)
            for (int64_t c = 0; c < len; c++)
                if (isnan(row[c]))
                    t.sum[r] = NAN; /* sticks: merge_row passes it on */
        float mnew = ra_max(row, len);
        if (mnew < t.mx[r])
            mnew = t.mx[r];
        if (mnew == -INFINITY) { /* nothing visible yet */
            memset(row, 0, (size_t)len * sizeof *row);
            continue;
        }
        if (mnew > t.mx[r])
            row_rescale(blk, r, mnew, t);
        t.sum[r] += ra_exp2_shift_sum(row, len, mnew);
    }
}

/* Whether every entry of the rows x cols floats of x (row stride ld) is
 * finite: none has the all-ones exponent of NaN and inf (integer ops, so
 * that the scan vectorises). */
static int block_finite(const float *x, int64_t rows, int64_t cols,
                        int64_t ld)
{
    const uint32_t ones = 0x7f800000u;
    uint32_t bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            uint32_t u;
            memcpy(&u, x + r * ld + c, sizeof u);
            bad |= (u & ones) == ones;
        }
    return !bad;
}

/* Whether query i sees key j under the rules rl of its run (ra_mask_tile's
 * rules, for one pair). */
static int pair_visible(const ra_block *blk, const tile_rules *rl, int64_t i,
                        int64_t j)
{
    const int64_t qp = blk->mask.qpos[i], kp = blk->mask.kpos[j];
    return qp < rl->q_len && kp < rl->kv_len && kp >= qp + rl->lo &&
           kp <= qp + rl->hi && (!rl->q_seg || rl->q_seg[i] == rl->k_seg[j]);
}

/* One column of pass 4 whose values v (stride ldv) hold a NaN or inf:
 * acc (stride Dv) += P v, the finite values by their weight (rounded to
 * bf16 with bf16 precision, as the products round P), each non-finite one
 * that the row sees as exact arithmetic has it (every visible weight is
 * > 0, however small its float): NaN, or inf of its sign, both signs NaN.
 * Hidden keys add nothing (their P is 0, and 0 x NaN would be NaN). */
static void column_nonfinite(const ra_block *blk, const tile_rules *rl,
                             tile_box x, int need_mask, const float *v,
                             int64_t ldv, float *acc, const float *s)
{
    for (int64_t r = 0; r < x.bq; r++) {
        const float *p = s + r * blk->block_kv;
        float sum = 0.0f, bad = 0.0f;
        for (int64_t c = 0; c < x.bk; c++) {
            const float w = blk->mm16 ? ra_bf16_to_f32(ra_bf16_of(p[c]))
                                      : p[c];
            if (isfinite(v[c * ldv]))
                sum += w * v[c * ldv];
            else if (!need_mask ||
                     pair_visible(blk, rl, x.i0 + r, x.j0 + c))
                bad += v[c * ldv];
        }
        acc[r * blk->Dv] += sum + bad;
    }
}

/* Pass 4 of a tile x in nonfinite mode when its values hold a NaN or an
 * inf: the columns without one by products, the others by
 * column_nonfinite. Returns 0, doing nothing, when every value is
 * finite. */
static int pv_nonfinite(const ra_block *blk, const tile_rules *rl,
                        tile_box x, int need_mask, tile_scratch t)
{
    const int64_t Dv = blk->Dv, ldv = t.kv.ldv;
    const float *vt = value_row(&t.kv, x.j0);
    if (block_finite(vt, x.bk, Dv, ldv))
        return 0;
    for (int64_t d = 0, e; d < Dv; d = e) {
        e = d + 1;
        if (!block_finite(vt + d, x.bk, 1, ldv)) {
            column_nonfinite(blk, rl, x, need_mask, vt + d, ldv, t.acc + d,
                             t.s);
            continue;
        }
        while (e < Dv && block_finite(vt + e, x.bk, 1, ldv))
            e++;
        ra_mm_tile(blk->gemm, blk->mm16, t.tid,
                   &(ra_mm){.m = x.bq, .n = e - d, .k = x.bk, .alpha = 1.0f,
                            .beta = 1.0f, .a = t.s, .lda = blk->block_kv,
                            .b = vt + d, .ldb = ldv, .c = t.acc + d,
                            .ldc = Dv});
    }
    return 1;
}

/* Pass 4 of tile x: acc += P V (P rounded to bf16 with bf16 precision,
 * t.p16 that P in bf16 (softmax_tile) or NULL, v16 the tile's values
 * staged in bf16 or NULL); by groups when there are ng, each over its
 * span (P is 0 outside it); in nonfinite mode, a tile whose values hold
 * NaN or inf by pv_nonfinite. */
static void tile_values(const ra_block *blk, const tile_rules *rl,
                        tile_box x, int need_mask, const band_group *grp,
                        int ng, const uint16_t *v16, tile_scratch t)
{
    if (blk->nan_check && pv_nonfinite(blk, rl, x, need_mask, t))
        return;
    if (!ng)
        ra_mm_tile(blk->gemm, blk->mm16, t.tid,
                   &(ra_mm){.m = x.bq, .n = blk->Dv, .k = x.bk,
                            .alpha = 1.0f, .beta = 1.0f, .a = t.s,
                            .lda = blk->block_kv,
                            .b = value_row(&t.kv, x.j0), .ldb = t.kv.ldv,
                            .c = t.acc, .ldc = blk->Dv, .b16 = v16,
                            .a16 = t.p16});
    groups_products(blk, grp, ng, NULL, x.j0, t);
}

/* The end of a work item (rows [i0, i0 + bq) of head h in batch b): each
 * row's partial, normalised, merged into (o, lse); the Gaussian's query
 * term -|q|^2 / (2 sigma^2), constant per row, only shifts the LSE. */
static void rows_merge(const ra_block *blk, const tile_rules *rl,
                       const ra_fwd_ops *x, int64_t b, int64_t h, int64_t i0,
                       int64_t bq, tile_scratch t)
{
    const int64_t n = blk->n, H = blk->H, D = blk->D, Dv = blk->Dv;
    const float *qt = x->q + ((b * n + i0) * H + h) * D;
    for (int64_t r = 0; r < bq; r++) {
        double shift = 0.0;
        if (blk->alibi) { /* the scores were measured from alibi_ref */
            const int64_t qp = blk->mask.qpos[i0 + r];
            shift = -blk->alibi[h] *
                    (double)alibi_dist(alibi_ref(blk, rl, qp, 1),
                                       qp + rl->diag);
        }
        if (blk->score == RA_SCORE_GAUSSIAN) {
            const float *qr = qt + r * H * D;
            double qq = 0.0;
            for (int64_t d = 0; d < D; d++)
                qq += (double)qr[d] * qr[d];
            shift -= qq * blk->half_inv_sigma2;
        }
        merge_row(Dv, t.acc + r * Dv, t.mx[r], t.sum[r], shift,
                  blk->nan_check, x->o + ((b * n + i0 + r) * H + h) * Dv,
                  x->lse + (b * H + h) * n + i0 + r);
    }
}

/* One thread's band copy: BAND_FLOATS floats (2 MiB, 4096 keys at D = Dv
 * = 64), used when a tile's key range fits in it BAND_SPANS times. */
enum { BAND_FLOATS = 1 << 19, BAND_SPANS = 3 };

/* Keys [a, z) of kv head bg (batch * G + head) for the tile products. The
 * block holds each key's heads side by side (row stride G * D), and
 * oneDNN's products run slower on such rows than on rows of their own
 * (a window-512 band tile, in cache: 167 GFLOP/s against 189 at D = 64,
 * H = 4). A full-attention tile streams each key once and does not
 * notice; a band's keys are read by block_kv / block_q tiles in a row.
 * So with kv heads (G > 1, fp32) and a short key range, the keys are
 * copied into bc's rows of their own, BAND_SPANS ranges at a time, ending
 * at z: the query tiles come last first (ra_kernel_forward_block), so
 * their ranges move down, and a copy serves the tiles until their range
 * leaves it; then the keys it shares with the next copy move within the
 * buffer and only the others are read from the block. (Twice the range
 * moves keys too often; four times, or a range over a fourth of the
 * buffer, was slower at windows 512 and 1900.) */
static void copy_keys(const kv_rows *from, int64_t s0, int64_t a,
                      int64_t z, int64_t D, int64_t Dv, float *bk, float *bv)
{
    for (int64_t j = a; j < z; j++) {
        memcpy(bk + (j - s0) * D, key_row(from, j), (size_t)D * sizeof *bk);
        memcpy(bv + (j - s0) * Dv, value_row(from, j),
               (size_t)Dv * sizeof *bv);
    }
}

static kv_rows band_keys(const ra_block *blk, const ra_fwd_ops *x,
                         int64_t bg, int64_t a, int64_t z, band_copy *bc)
{
    const int64_t m = blk->m, G = blk->G, D = blk->D, Dv = blk->Dv;
    const int64_t b = bg / G, g = bg % G;
    const kv_rows block = {x->k + (b * m * G + g) * D,
                           x->v + (b * m * G + g) * Dv, G * D, G * Dv, 0};
    const int64_t span = BAND_SPANS * (z - a);
    if (!bc || !bc->buf || G == 1 || span > bc->cap)
        return block;
    if (bc->bg != bg || a < bc->s0 || z > bc->s1) {
        const int64_t s1 = z, s0 = z - span > 0 ? z - span : 0;
        int64_t k0 = 0, k1 = 0; /* the keys kept: [k0, k1) */
        if (bc->bg == bg) {
            k0 = s0 > bc->s0 ? s0 : bc->s0;
            k1 = s1 < bc->s1 ? s1 : bc->s1;
        }
        float *bk = bc->buf, *bv = bc->buf + bc->cap * D;
        if (k1 > k0) {
            memmove(bk + (k0 - s0) * D, bk + (k0 - bc->s0) * D,
                    (size_t)((k1 - k0) * D) * sizeof(float));
            memmove(bv + (k0 - s0) * Dv, bv + (k0 - bc->s0) * Dv,
                    (size_t)((k1 - k0) * Dv) * sizeof(float));
        } else {
            k0 = k1 = s1;
        }
        copy_keys(&block, s0, k1, s1, D, Dv, bk, bv);
        copy_keys(&block, s0, s0, k0, D, Dv, bk, bv);
        *bc = (band_copy){bc->buf, bc->cap, bg, s0, s1};
    }
    return (kv_rows){bc->buf, bc->buf + bc->cap * D, D, Dv, bc->s0};
}

/* Query rows [i0, i0 + bq) of head h in batch b against every key tile of
 * the block that any of them may see. */
static void rows_forward(const ra_block *blk, const tile_rules *rlp,
                         const ra_fwd_ops *x, int64_t b, int64_t h, int64_t i0,
                         int64_t bq, tile_scratch t)
{
    const int64_t n = blk->n, m = blk->m, H = blk->H, G = blk->G;
    const int64_t D = blk->D, Dv = blk->Dv, bkv = blk->block_kv;
    const int64_t g = h / (H / G);
    const ra_mask *mk = &blk->mask;
    const tile_rules rl = *rlp;
    const int64_t qmin = mk->qpos[i0], qmax = mk->qpos[i0 + bq - 1];
    if (qmin >= rl.q_len)
        return; /* padding rows: they keep o = 0, lse = -inf */
    int64_t qs_min = 0, qs_max = 0, j_first, j_end;
    if (rl.q_seg)
        ra_minmax(rl.q_seg + i0, bq, &qs_min, &qs_max);
    const float *qt = x->q + ((b * n + i0) * H + h) * D; /* bq x D, ld H*D */
    /* the staged bf16 k (m x D) and v (m x Dv) of kv head g, or NULL */
    const uint16_t *k16 = t.kv16 ? t.kv16 + (b * G + g) * m * (D + Dv)
                                 : NULL;
    const uint16_t *v16 = k16 ? k16 + m * D : NULL;
    if (!blk->mm16 || blk->nan_check)
        t.p16 = NULL; /* P stays fp32 (pv_nonfinite reads it so) */

    for (int64_t r = 0; r < bq; r++) {
        t.mx[r] = -INFINITY;
        t.sum[r] = 0.0f;
    }
    memset(t.acc, 0, (size_t)(bq * Dv) * sizeof(float));
    key_range(blk, &rl, qmin, qmax, qs_min, qs_max, &j_first, &j_end);
    ra_widen_keys(blk->mm16 ? bkv : RA_KEY_UNIT, m, &j_first, &j_end);
    t.kv = band_keys(blk, x, b * G + g, j_first, j_end, t.band);
    for (int64_t j0 = j_first; j0 < j_end; j0 += bkv) {
        const int64_t bk = j_end - j0 < bkv ? j_end - j0 : bkv;
        const int64_t kmin = mk->kpos[j0], kmax = mk->kpos[j0 + bk - 1];
        int need_mask = kmax > qmin + rl.hi || kmin < qmax + rl.lo ||
                        kmax >= rl.kv_len || qmax >= rl.q_len;
        if (rl.q_seg) {
            int64_t ks_min, ks_max;
            ra_minmax(rl.k_seg + j0, bk, &ks_min, &ks_max);
            if (ks_max < qs_min || ks_min > qs_max)
                continue; /* no segment in common */
            need_mask |= !(qs_min == qs_max && ks_min == ks_max &&
                           qs_min == ks_min);
        }
        /* pass 1: base-2 scores, by groups of rows on a band's edge */
        band_group grp[BAND_GROUPS_MAX];
        const int ng = need_mask ? band_groups(blk, &rl, i0, bq, j0, bk, grp)
                                 : 0;
        if (!ng)
            score_tile(blk, qt, j0, k16 ? k16 + j0 * D : NULL, bq, bk,
                       j0 > j_first, t);
        groups_products(blk, grp, ng, qt, j0, t);
        ra_features_tile(blk->features, t.s, bq, bk, blk->block_kv, NULL);
        if (blk->alibi)
            alibi_tile(blk, &rl, 1, h, (tile_box){i0, bq, j0, bk}, t.s);
        /* pass 2: the mask, only on tiles that straddle an edge */
        int32_t *vis = need_mask && !rl.q_seg ? t.vis : NULL;
        if (need_mask)
            ra_mask_tile(mk, &rl, i0, bq, j0, bk, t.s, bkv, vis);
        /* pass 3: online softmax (P in bf16 for a bf16 P V) */
        softmax_tile(blk, bq, bk, vis, t);
        /* pass 4: acc += P V */
        tile_values(blk, &rl, (tile_box){i0, bq, j0, bk}, need_mask, grp, ng,
                    v16 ? v16 + j0 * Dv : NULL, t);
        if (x->progress)
            x->progress(x->progress_ctx);
    }
    rows_merge(blk, &rl, x, b, h, i0, bq, t);
}

/* One work item: query rows [i0, i0 + bq) of head h in batch b. With
 * packed sequences the rows are cut where the segment id changes, so that
 * each piece meets only the keys of its own segment, and with per-row
 * alignment where the diag changes (ra_tile_run_end). */
static void tile_forward(const ra_block *blk, const ra_fwd_ops *x, int64_t b,
                         int64_t h, int64_t i0, int64_t bq, tile_scratch t)
{
    for (int64_t a = i0, z; a < i0 + bq; a = z) {
        z = ra_tile_run_end(blk, b, a, i0 + bq, 1);
        const tile_rules rl = ra_tile_rules_of(blk, b, a);
        rows_forward(blk, &rl, x, b, h, a, z - a, t);
    }
}

/* Thread 0 of a kernel call is the thread that made it, the only one that
 * may call MPI under MPI_THREAD_FUNNELED: it runs the progress hook between
 * its own key tiles and, once it has no item left, keeps running it until
 * the other threads have finished theirs (done reaches items), so that the
 * transfers also move during the tail of the call. The other threads never
 * wait for it. It yields between calls so that it does not starve a thread
 * that shares its core. */
static void tail_progress(const int64_t *done, int64_t items,
                          ra_progress_fn progress, void *progress_ctx)
{
    for (;;) {
        int64_t d;
#pragma omp atomic read
        d = *done;
        if (d >= items)
            return;
        progress(progress_ctx);
        sched_yield();
    }
}

/* bf16 on oneDNN: the block's k and v packed in bf16 once into
 * ws->kv16, per (batch, kv head) its m x D keys then its m x Dv values, as
 * the products pack each tile's op(B) (ra_mm16_pack), so that no tile
 * packs them again (they were packed once per query tile). NULL, and the
 * tiles pack as before, without primitives, for the additive score (no
 * score product) or when the buffer cannot grow: the buffer grows to the
 * largest block a workspace meets, at its first call of that size. */
static const uint16_t *stage_kv(const ra_block *blk, const ra_fwd_ops *x,
                                ra_workspace *ws)
{
    const int64_t B = blk->B, m = blk->m, G = blk->G, D = blk->D,
                  Dv = blk->Dv;
    if (!blk->mm16 || !ra_mm16_native(blk->mm16) ||
        blk->score == RA_SCORE_ADDITIVE)
        return NULL;
    const size_t need = (size_t)(B * G * m * (D + Dv));
    if (need > ws->kv16_len) {
        uint16_t *p = malloc(need * sizeof *p);
        if (!p)
            return NULL;
        free(ws->kv16);
        ws->kv16 = p;
        ws->kv16_len = need;
    }
#pragma omp parallel for num_threads(ws->threads) schedule(static)
    for (int64_t bg = 0; bg < B * G; bg++) {
        const int64_t b = bg / G, g = bg % G;
        uint16_t *dst = ws->kv16 + bg * m * (D + Dv);
        ra_mm16_pack(blk->mm16, x->k + (b * m * G + g) * D, m, D, G * D, dst);
        ra_mm16_pack(blk->mm16, x->v + (b * m * G + g) * Dv, m, Dv, G * Dv,
                     dst + m * D);
    }
    return ws->kv16;
}

/* The threads' band copies (band_keys), BAND_FLOATS each, made at the
 * first call that uses them; NULL (no copies) in bf16 (stage_kv has the
 * keys in rows of their own), without kv heads (the rows are already
 * their own), or when they cannot be had. */
static float *band_buffers(const ra_block *blk, ra_workspace *ws)
{
    if (blk->mm16 || blk->G == 1)
        return NULL;
    if (!ws->bands)
        ws->bands = malloc((size_t)ws->threads * BAND_FLOATS * sizeof(float));
    return ws->bands;
}

void ra_kernel_forward_block(const ra_block *blk, const ra_fwd_ops *ops,
                             ra_workspace *ws)
{
    const int64_t bq = blk->block_q;
    if (blk->n == 0 || blk->m == 0)
        return;
    const int64_t tiles = (blk->n + bq - 1) / bq;
    const int64_t items = blk->B * blk->H * tiles;
    int64_t done = 0;
    tile_hook hk = {ops->progress, ops->progress_ctx, ws, &done, items};
    void *hook_ctx;
    const ra_progress_fn hook = tile_hook_of(ws, &hk, &hook_ctx);
    const uint16_t *kv16 = stage_kv(blk, ops, ws);
    float *bands = band_buffers(blk, ws);

#pragma omp parallel num_threads(ws->threads)
    {
        const int tid = omp_get_thread_num();
        tile_scratch t = scratch_of(ws, tid);
        t.kv16 = kv16;
        band_copy bc = {bands ? bands + (size_t)tid * BAND_FLOATS : NULL,
                        BAND_FLOATS / (blk->D + blk->Dv), -1, 0, 0};
        t.band = &bc;
        ra_fwd_ops x = *ops; /* the hook runs on thread 0 only */
        x.progress = tid == 0 ? hook : NULL;
        x.progress_ctx = hook_ctx;
        double busy = 0.0;
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t it = 0; it < items; it++) {
            const double t0 = omp_get_wtime();
            /* Later query tiles see more causal keys: hand them out first. */
            const int64_t qt = tiles - 1 - it % tiles, bh = it / tiles;
            const int64_t i0 = qt * bq;
            const int64_t rows = blk->n - i0 < bq ? blk->n - i0 : bq;
            tile_forward(blk, &x, bh / blk->H, bh % blk->H, i0, rows, t);
            busy += omp_get_wtime() - t0;
#pragma omp atomic update
            done++;
        }
        if (tid == 0 && ops->progress)
            tail_progress(&done, items, hook, hook_ctx);
        ws->busy[tid * BUSY_STRIDE] += busy;
    }
}

/* The map's pass 2 on tile x of head h in batch b: ALiBi's absolute bias
 * when on, then the mask, run by run of rows that share their rules. */
static void map_bias_mask(const ra_block *blk, int64_t b, int64_t h,
                          tile_box x, float *s)
{
    const int64_t lds = blk->block_kv, end = x.i0 + x.bq;
    for (int64_t a = x.i0, z; a < end; a = z) {
        z = ra_tile_run_end(blk, b, a, end, 0);
        const tile_rules rl = ra_tile_rules_of(blk, b, a);
        float *sa = s + (a - x.i0) * lds;
        if (blk->alibi)
            alibi_tile(blk, &rl, 0, h, (tile_box){a, z - a, x.j0, x.bk}, sa);
        ra_mask_tile(&blk->mask, &rl, a, z - a, x.j0, x.bk, sa, lds, NULL);
    }
}

/* One work item of the map: rows [i0, i0 + bq) of head heads[hi] in
 * batch b. */
static void probs_rows(const ra_block *blk, const ra_map_ops *x, int64_t b,
                       int64_t hi, int64_t i0, int64_t bq, tile_scratch t)
{
    const int64_t n = blk->n, m = blk->m, H = blk->H, G = blk->G;
    const int64_t D = blk->D, bkv = blk->block_kv, h = x->heads[hi];
    const int64_t g = h / (H / G);
    const float *qt = x->q + ((b * n + i0) * H + h) * D;
    t.kv = (kv_rows){x->k + (b * m * G + g) * D, NULL, G * D, 0, 0};
    /* per row, the base-2 offset that turns a tile score into log2(p) */
    for (int64_t r = 0; r < bq; r++) {
        double l = x->lse[(b * H + h) * n + i0 + r];
        if (blk->score == RA_SCORE_GAUSSIAN) {
            double qq = 0.0;
            for (int64_t d = 0; d < D; d++)
                qq += (double)qt[r * H * D + d] * qt[r * H * D + d];
            l += qq * blk->half_inv_sigma2;
        }
        t.mx[r] = (float)(l * M_LOG2E);
    }
    for (int64_t j0 = 0; j0 < m; j0 += bkv) {
        const int64_t bk = m - j0 < bkv ? m - j0 : bkv;
        score_tile(blk, qt, j0, NULL, bq, bk, j0 > 0, t);
        ra_features_tile(blk->features, t.s, bq, bk, blk->block_kv, NULL);
        map_bias_mask(blk, b, h, (tile_box){i0, bq, j0, bk}, t.s);
        for (int64_t r = 0; r < bq; r++) {
            const int64_t row_at = (b * x->nh + hi) * x->nr + i0 - x->r0 + r;
            float *dst = x->out + row_at * x->M;
            const float *row = t.s + r * bkv;
            for (int64_t c = 0; c < bk; c++)
                dst[blk->mask.kpos[j0 + c]] =
                    t.mx[r] == -INFINITY ? 0.0f
                                         : exp2f(row[c] - t.mx[r]);
        }
        if (x->progress)
            x->progress(x->progress_ctx);
    }
}

void ra_kernel_probs(const ra_block *blk, const ra_map_ops *ops,
                     ra_workspace *ws)
{
    const int64_t bq = blk->block_q, r0 = ops->r0, nr = ops->nr,
                  nh = ops->nh;
    if (nr == 0 || blk->m == 0)
        return;
    const int64_t tiles = (nr + bq - 1) / bq;
    const int64_t items = blk->B * nh * tiles;
    int64_t done = 0;
    tile_hook hk = {ops->progress, ops->progress_ctx, ws, &done, items};
    void *hook_ctx;
    const ra_progress_fn hook = tile_hook_of(ws, &hk, &hook_ctx);

#pragma omp parallel num_threads(ws->threads)
    {
        const int tid = omp_get_thread_num();
        ra_map_ops x = *ops; /* the hook runs on thread 0 only */
        x.progress = tid == 0 ? hook : NULL;
        x.progress_ctx = hook_ctx;
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t it = 0; it < items; it++) {
            const int64_t qt = it % tiles, bh = it / tiles;
            const int64_t b = bh / nh, hi = bh % nh;
            const int64_t i0 = r0 + qt * bq;
            const int64_t rows = r0 + nr - i0 < bq ? r0 + nr - i0 : bq;
            probs_rows(blk, &x, b, hi, i0, rows, scratch_of(ws, tid));
#pragma omp atomic update
            done++;
        }
        if (tid == 0 && ops->progress)
            tail_progress(&done, items, hook, hook_ctx);
    }
}
