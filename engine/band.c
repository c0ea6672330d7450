/* band.c: see band.h. */
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
    return ra_band_make(p->causal, p->window, p->window_left,
                        p->window_right, s->M - s->N);
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
    const double score = p->score == RA_SCORE_ADDITIVE && p->additive
                             ? 4.0 * (double)p->additive->A
                             : 2.0 * (double)s->D;
    return (score + 2.0 * (double)s->Dv) * (double)s->H;
}
