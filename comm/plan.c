/* plan.c: see plan.h. Cost O(P^2 log(M/P)) per call, negligible next to
 * the attention itself up to thousands of ranks. */
#include "plan.h"

#define UNBOUNDED (INT64_MAX / 4)

ring_plan ring_plan_make(const ra_shape *s, const ra_params *p,
                         const ra_masks *masks, int P)
{
    ring_plan pl;
    const int64_t diag = s->M - s->N;
    pl.layout = ra_params_layout(p, masks && masks->q_segments);
    pl.N = s->N;
    pl.M = s->M;
    pl.P = P;
    pl.lo = p->window ? diag - p->window_left : -UNBOUNDED;
    pl.hi = UNBOUNDED;
    if (p->causal)
        pl.hi = diag;
    if (p->window && diag + p->window_right < pl.hi)
        pl.hi = diag + p->window_right;
    pl.q_end = s->N;
    pl.kv_end = s->M;
    if (masks && masks->q_lens) {
        pl.q_end = 0;
        for (int64_t b = 0; b < s->B; b++)
            pl.q_end = masks->q_lens[b] > pl.q_end ? masks->q_lens[b] : pl.q_end;
    }
    if (masks && masks->kv_lens) {
        pl.kv_end = 0;
        for (int64_t b = 0; b < s->B; b++)
            pl.kv_end = masks->kv_lens[b] > pl.kv_end ? masks->kv_lens[b]
                                                       : pl.kv_end;
    }
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

ring_span ring_plan_need(const ring_plan *pl, int d, int src)
{
    const ring_span none = {0, 0};
    ra_slice qs = ra_layout_slice(pl->layout, pl->N, d, pl->P);
    ra_slice ks = ra_layout_slice(pl->layout, pl->M, src, pl->P);
    if (qs.count == 0 || ks.count == 0)
        return none;
    int64_t qmin = ra_slice_pos(&qs, 0), qmax = ra_slice_pos(&qs, qs.count - 1);
    if (qmin >= pl->q_end)
        return none;
    if (qmax > pl->q_end - 1)
        qmax = pl->q_end - 1;
    int64_t kfirst = qmin + pl->lo, klast = qmax + pl->hi;
    if (klast > pl->kv_end - 1)
        klast = pl->kv_end - 1;
    if (kfirst > klast)
        return none;
    ring_span sp = {slice_lower_bound(&ks, kfirst),
                    slice_lower_bound(&ks, klast + 1)};
    return sp.a < sp.b ? sp : none;
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
