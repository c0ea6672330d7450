/* plan.c: see plan.h. Cost O(P^2 log(M/P)) per call, negligible next to
 * the attention itself up to thousands of ranks. */
#include "plan.h"

/* The highest of the B padding lengths, or len without them. */
static int64_t lens_max(const int64_t *lens, int64_t B, int64_t len)
{
    if (!lens)
        return len;
    int64_t mx = 0;
    for (int64_t b = 0; b < B; b++)
        mx = lens[b] > mx ? lens[b] : mx;
    return mx;
}

ring_plan ring_plan_make(const ra_shape *s, const ra_params *p,
                         const ra_masks *masks, int P)
{
    ring_plan pl;
    pl.layout = ra_params_layout(p, masks && masks->q_segments);
    pl.N = s->N;
    pl.M = s->M;
    pl.P = P;
    /* Per-sequence alignment moves each sequence's band by its own
     * lengths: the plan then keeps every hop the lengths allow (it skips
     * by q_end and kv_end alone) rather than bound the bands per rank. */
    pl.band = p->align == RA_ALIGN_SEQUENCE ? ra_band_make(0, 0, 0, 0, 0)
                                            : ra_band_of(p, s);
    pl.q_end = lens_max(masks ? masks->q_lens : NULL, s->B, s->N);
    pl.kv_end = lens_max(masks ? masks->kv_lens : NULL, s->B, s->M);
    return pl;
}

/* First local index of a slice whose position is >= x. */
static int64_t slice_lower_bound(const ra_slice *sl, int64_t x)
{
    int64_t lo = 0, hi = sl->count;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ra_slice_pos(sl, mid) < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

ring_span ring_plan_ends(const ring_plan *pl, int d, int src)
{
    ra_slice qs = ra_layout_slice(pl->layout, pl->N, d, pl->P);
    ra_slice ks = ra_layout_slice(pl->layout, pl->M, src, pl->P);
    if (qs.count == 0 || ks.count == 0)
        return (ring_span){0, 0};
    const int64_t qmin = ra_slice_pos(&qs, 0);
    int64_t qmax = ra_slice_pos(&qs, qs.count - 1);
    if (qmax > pl->q_end - 1)
        qmax = pl->q_end - 1;
    /* the hull: from the first key of the first query to the last key of
     * the last one (kfirst > klast gives a >= b) */
    int64_t kfirst, klast, unused;
    ra_band_keys(pl->band, qmin, pl->kv_end, &kfirst, &unused);
    ra_band_keys(pl->band, qmax, pl->kv_end, &unused, &klast);
    return (ring_span){qmin < pl->q_end ? slice_lower_bound(&ks, kfirst)
                                        : ks.count,
                       slice_lower_bound(&ks, klast + 1)};
}

ring_span ring_plan_need(const ring_plan *pl, int d, int src)
{
    const ring_span sp = ring_plan_ends(pl, d, src);
    return sp.a < sp.b ? sp : (ring_span){0, 0};
}

ring_span ring_plan_held(const ring_plan *pl, int src, int t, int last)
{
    ring_span hull = {0, 0};
    for (int u = t; u <= last; u++) {
        ring_span sp = ring_plan_need(pl, (src + u) % pl->P, src);
        if (sp.a == sp.b)
            continue;
        if (hull.a == hull.b) {
            hull = sp;
        } else {
            hull.a = sp.a < hull.a ? sp.a : hull.a;
            hull.b = sp.b > hull.b ? sp.b : hull.b;
        }
    }
    return hull;
}

int ring_plan_last_step(const ring_plan *pl)
{
    int last = 0;
    for (int src = 0; src < pl->P; src++)
        for (int u = last + 1; u < pl->P; u++) {
            ring_span sp = ring_plan_need(pl, (src + u) % pl->P, src);
            if (sp.a < sp.b)
                last = u;
        }
    return last;
}
