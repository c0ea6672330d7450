/* band.c: see band.h. */
#include <stdlib.h>

#include "band.h"

ra_band ra_band_make(int causal, int window, int64_t left, int64_t right,
                     int64_t diag)
{
    ra_band b = {window ? diag - left : -RA_UNBOUNDED, RA_UNBOUNDED};
    if (causal)
        b.hi = diag;
    if (window && diag + right < b.hi)
        b.hi = diag + right;
    return b;
}

ra_band ra_band_of(const ra_params *p, const ra_shape *s)
{
    return ra_band_make(p->num.causal, p->num.window, p->num.window_left,
                        p->num.window_right, s->M - s->N);
}

ra_band ra_cut_band(const ra_params *p)
{
    return p ? ra_band_make(p->num.causal, p->num.window, p->num.window_left,
                            p->num.window_right, 0)
             : ra_band_make(0, 0, 0, 0, 0);
}

int64_t ra_band_keys(ra_band band, int64_t p, int64_t kv_len, int64_t *first,
                     int64_t *last)
{
    const int64_t a = p + band.lo > 0 ? p + band.lo : 0;
    const int64_t z = p + band.hi < kv_len - 1 ? p + band.hi : kv_len - 1;
    if (first)
        *first = a;
    if (last)
        *last = z;
    return z >= a ? z - a + 1 : 0;
}

int64_t ra_lower_bound(const int64_t *pos, int64_t len, int64_t x)
{
    int64_t lo = 0, hi = len;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pos[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

double ra_band_pairs(ra_band band, const int64_t *pos, int64_t n,
                     int64_t q_len, int64_t kv_len)
{
    double pairs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t p = pos ? pos[i] : i;
        if (p < q_len)
            pairs += (double)ra_band_keys(band, p, kv_len, NULL, NULL);
    }
    return pairs;
}

double ra_pair_flops(const ra_shape *s, const ra_params *p)
{
    const double score = p->num.score == RA_SCORE_ADDITIVE && p->num.additive
                             ? 4.0 * (double)p->num.additive->A
                             : 2.0 * (double)s->D;
    return (score + 2.0 * (double)s->Dv) * (double)s->H;
}

static int key_id_order(const void *a, const void *b)
{
    const ra_key_id *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

void ra_key_ids_sort(ra_key_id *keys, int64_t m)
{
    qsort(keys, (size_t)m, sizeof *keys, key_id_order);
}

/* One past the last position of id among the len sorted keys, or -1. */
static int64_t id_end(const ra_key_id *keys, int64_t len, int64_t id)
{
    int64_t lo = 0, hi = len;
    while (lo < hi) { /* the first key of a larger id */
        const int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid].id <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && keys[lo - 1].id == id ? keys[lo - 1].pos + 1 : -1;
}

void ra_align_batch(const int64_t *q_ids, const int64_t *k_ids, int64_t N,
                    int64_t M, int64_t q_len, int64_t kv_len, ra_key_id *keys,
                    int64_t *at)
{
    if (!q_ids) {
        for (int64_t i = 0; i < N; i++)
            at[i] = i + (kv_len - q_len);
        return;
    }
    ra_key_id *qk = keys, *kk = keys + N;
    for (int64_t i = 0; i < N; i++)
        qk[i] = (ra_key_id){q_ids[i], i};
    for (int64_t j = 0; j < M; j++)
        kk[j] = (ra_key_id){k_ids[j], j};
    ra_key_ids_sort(qk, N);
    ra_key_ids_sort(kk, M);
    for (int64_t i = 0; i < N; i++) {
        const int64_t kend = id_end(kk, M, q_ids[i]);
        at[i] = i + (kend < 0 ? M - N : kend - id_end(qk, N, q_ids[i]));
    }
}

/* The first of keys[0..m) not ordered before (id, pos). */
static int64_t key_lower_bound(const ra_key_id *keys, int64_t m, int64_t id,
                               int64_t pos)
{
    int64_t lo = 0, hi = m;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid].id < id || (keys[mid].id == id && keys[mid].pos < pos))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void ra_rows_see_keys(const ra_visibility *v, const int64_t *pos,
                      const int64_t *q_seg, int64_t n, unsigned char *seen)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t first, last;
        const int64_t at = v->aligned ? v->aligned[i] : pos[i];
        int any = pos[i] < v->q_len &&
                  ra_band_keys(v->band, at, v->kv_len, &first, &last) > 0;
        if (any && v->keys) { /* a key of its id in [first, last]? */
            const int64_t j = key_lower_bound(v->keys, v->m, q_seg[i], first);
            any = j < v->m && v->keys[j].id == q_seg[i] &&
                  v->keys[j].pos <= last;
        }
        seen[i] = (unsigned char)any;
    }
}
