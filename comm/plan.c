/* plan.c: see plan.h. Costs: ring_plan_need O(log(M/P)); ring_plan_held
 * that times its steps; ring_plan_last_step O(P log P log(M/P)) (each
 * block tries only its steps above the last found: with contiguous slices
 * the candidates the band allows, one by one; with zigzag and striped
 * slices the highest rank that needs the block, found by halving between
 * the layout's kinks). */
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
    pl.band = p->num.align == RA_ALIGN_SEQUENCE ? ra_band_make(0, 0, 0, 0, 0)
                                                : ra_band_of(p, s);
    pl.cut = ra_cut_band(p);
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
    ra_slice qs = ra_band_slice(pl->layout, pl->cut, pl->N, d, pl->P);
    ra_slice ks = ra_band_slice(pl->layout, pl->cut, pl->M, src, pl->P);
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

/* ---- the last step and the candidates ------------------------------------ */

int ring_layout_runs(ra_layout lay)
{
    return lay == RA_LAYOUT_CONTIGUOUS || lay == RA_LAYOUT_BALANCED;
}

/* Rank r's one run of a length-len axis (ring_layout_runs). */
static ra_range run_of(const ring_plan *pl, int64_t len, int r)
{
    const ra_slice sl = ra_band_slice(pl->layout, pl->cut, len, r, pl->P);
    return (ra_range){sl.run[0].start, sl.count};
}

void ring_plan_candidates(const ring_plan *pl, int src, int *da, int *dz)
{
    *da = 0;
    *dz = pl->P - 1;
    if (!ring_layout_runs(pl->layout))
        return;
    const ra_range k = run_of(pl, pl->M, src);
    const int64_t kz = k.start + k.count - 1 < pl->kv_end - 1
                           ? k.start + k.count - 1 : pl->kv_end - 1;
    int lo = 0, hi = pl->P; /* first d whose last query reaches the keys */
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        const ra_range q = run_of(pl, pl->N, mid);
        if (q.start + q.count - 1 + pl->band.hi < k.start)
            lo = mid + 1;
        else
            hi = mid;
    }
    *da = lo;
    hi = pl->P; /* first d whose first query is past the keys, or q_end */
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        const ra_range q = run_of(pl, pl->N, mid);
        if (q.start + pl->band.lo <= kz && q.start < pl->q_end)
            lo = mid + 1;
        else
            hi = mid;
    }
    *dz = k.count > 0 && k.start < pl->kv_end ? lo - 1 : -1;
}

int ring_plan_step_at(const ring_plan *pl, int src, int da, int dz, int u)
{
    const int behind = (dz < src - 1 ? dz : src - 1) - da + 1;
    if (u < behind)
        return (dz < src - 1 ? dz : src - 1) - u - src + pl->P;
    const int v = u - (behind > 0 ? behind : 0);
    const int first = da > src + 1 ? da : src + 1;
    return dz - v >= first ? dz - v - src : -1;
}

int ring_layout_kinks(ra_layout lay, ra_band cut, int64_t len, int P,
                      int k[3])
{
    int n = 0;
    if (lay == RA_LAYOUT_BALANCED) { /* ra_balanced_start */
        if (P >= 2)
            k[n++] = 1;
        if (P >= 3) {
            const int64_t b1 = ra_balanced_start(cut, len, 1, P);
            const int64_t e = (ra_balanced_start(cut, len, P - 1, P) - b1) %
                              (P - 2); /* ranks 1 .. e hold one more */
            if (e > 0)
                k[n++] = 1 + (int)e;
            k[n++] = P - 1;
        }
        return n;
    }
    const int64_t parts = lay == RA_LAYOUT_ZIGZAG ? 2 * (int64_t)P : P;
    const int64_t e = len % parts; /* runs below e hold one more */
    if (e > 0 && e < P)
        k[n++] = (int)e;
    if (lay == RA_LAYOUT_ZIGZAG && e > P) /* rank r's second chunk */
        k[n++] = (int)(2 * (int64_t)P - e);
    return n;
}

int ring_plan_pieces(const ring_plan *pl, int lo, int hi, int piece[3][2])
{
    int kink[3] = {0, 0, 0}, n = 0;
    const int nk = ring_layout_kinks(pl->layout, pl->cut, pl->N, pl->P, kink);
    if (nk == 2 && kink[0] < kink[1]) { /* the higher kink first */
        const int k = kink[0];
        kink[0] = kink[1];
        kink[1] = k;
    }
    int z = hi;
    for (int j = 0; j < nk; j++)
        if (kink[j] > lo && kink[j] <= z) {
            piece[n][0] = kink[j];
            piece[n++][1] = z;
            z = kink[j] - 1;
        }
    piece[n][0] = lo;
    piece[n++][1] = z;
    return n;
}

/* The highest rank in [x, y] whose need of block src is not empty, or -1,
 * when both ends of the ranks' needs are monotone in the rank there: a
 * range whose needs must all be empty is skipped, another halved. */
static int need_highest(const ring_plan *pl, int src, int x, int y)
{
    if (x > y)
        return -1;
    const ring_span lo = ring_plan_ends(pl, x, src);
    const ring_span hi = ring_plan_ends(pl, y, src);
    if ((lo.a < hi.a ? lo.a : hi.a) >= (lo.b > hi.b ? lo.b : hi.b))
        return -1;
    if (x == y)
        return x;
    const int mid = x + (y - x) / 2;
    const int d = need_highest(pl, src, mid + 1, y);
    return d >= 0 ? d : need_highest(pl, src, x, mid);
}

/* Zigzag and striped slices: block src's highest step above last that
 * needs something, or last; the steps fall with the rank behind src
 * (steps P - src + d), then ahead of it (d - src), and the pieces between
 * the kinks come highest first. */
static int plan_last_kinked(const ring_plan *pl, int src, int last)
{
    const int P = pl->P;
    const int behind = last + 1 > P - src ? last + 1 : P - src;
    const int range[2][2] = {{behind + src - P, src - 1},
                             {src + last + 1, P - 1}};
    for (int i = 0; i < 2; i++) {
        int piece[3][2];
        const int n = ring_plan_pieces(pl, range[i][0], range[i][1], piece);
        for (int j = 0; j < n; j++) {
            const int d = need_highest(pl, src, piece[j][0], piece[j][1]);
            if (d >= 0)
                return (d - src + P) % P;
        }
    }
    return last;
}

/* Each block tries only its steps above the last found, farthest first:
 * with contiguous slices its candidate steps one by one, else by halving. */
int ring_plan_last_step(const ring_plan *pl)
{
    int last = 0;
    for (int src = 0; src < pl->P; src++) {
        int da, dz;
        if (!ring_layout_runs(pl->layout)) {
            last = plan_last_kinked(pl, src, last);
            continue;
        }
        ring_plan_candidates(pl, src, &da, &dz);
        for (int i = 0;; i++) {
            const int u = ring_plan_step_at(pl, src, da, dz, i);
            if (u <= last)
                break;
            const ring_span sp = ring_plan_need(pl, (src + u) % pl->P, src);
            if (sp.a < sp.b) {
                last = u;
                break;
            }
        }
    }
    return last;
}
