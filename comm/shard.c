/* shard.c: how a sequence axis is cut over the ranks. Every function
 * here gives an empty result for what names no rank's tokens: a length
 * below 0, nranks below 1, a rank outside [0, nranks) (ringattn.h). */
#include "band.h"

/* Whether rank of nranks holds a part of a length-len axis. */
static int cut_valid(int64_t len, int64_t rank, int64_t nranks)
{
    return len >= 0 && nranks >= 1 && rank >= 0 && rank < nranks;
}

/* ra_shard_range in 64 bits (zigzag cuts 2P chunks), for a rank in
 * [0, nranks]: rank nranks starts at len (where the cut ends). */
static ra_range shard(int64_t len, int64_t rank, int64_t nranks)
{
    if (!cut_valid(len, rank, nranks + 1) || nranks < 1)
        return (ra_range){0, 0};
    const int64_t base = len / nranks, extra = len % nranks;
    return (ra_range){rank * base + (rank < extra ? rank : extra),
                      rank < nranks ? base + (rank < extra ? 1 : 0) : 0};
}

ra_range ra_shard_range(int64_t len, int rank, int nranks)
{
    if (!cut_valid(len, rank, nranks))
        return (ra_range){0, 0};
    return shard(len, rank, nranks);
}

/* A slice's runs as ra_layout_slice makes them: at most two, each of
 * stride >= 1, count >= 0 and positions that fit in int64. */
static int slice_valid(const ra_slice *sl)
{
    if (!sl || sl->nruns < 0 || sl->nruns > 2)
        return 0;
    for (int i = 0; i < sl->nruns; i++) {
        const ra_run *r = &sl->run[i];
        if (r->stride < 1 || r->count < 0 || r->start < 0 ||
            ra_add_checked(r->start, ra_mul_checked(r->count,
                                                    r->stride)) < 0)
            return 0;
    }
    return 1;
}

/* x / d rounded up, x >= 0, d >= 1, without overflow. */
static int64_t ceil_div(int64_t x, int64_t d)
{
    return x / d + (x % d != 0);
}

ra_slice ra_slice_clip(const ra_slice *sl, int64_t i0, int64_t i1)
{
    ra_slice c = {0};
    if (!slice_valid(sl) || i0 < 0 || i1 <= i0)
        return c;
    for (int i = 0; i < sl->nruns; i++) {
        const ra_run *r = &sl->run[i];
        /* t such that i0 <= start + t * stride < i1, within the run */
        int64_t lo = i0 > r->start ? ceil_div(i0 - r->start, r->stride) : 0;
        int64_t hi = i1 > r->start ? ceil_div(i1 - r->start, r->stride) : 0;
        hi = hi < r->count ? hi : r->count;
        if (hi > lo) {
            c.run[c.nruns++] = (ra_run){r->start + lo * r->stride - i0, hi - lo,
                                        r->stride};
            c.count += hi - lo;
        }
    }
    return c;
}

/* The balanced cut weighs token i by the keys a query at i of a
 * self-attention of length len sees, [max(0, i + lo), min(len - 1, i + hi)]
 * (lo <= 0 <= hi, so never none). Its running weight W(x), the sum over
 * i < x, in closed form and exact: at most len^2, and P W(x) must not
 * overflow either. */
typedef __int128 wide;

static wide weight_below(ra_band cut, int64_t len, int64_t x)
{
    const int64_t c = len - 1;
    int64_t t = c - cut.hi; /* rows below t end at i + hi, the rest at c */
    t = t < 0 ? 0 : t > x ? x : t;
    const wide ends = (wide)t * cut.hi + (wide)t * (t - 1) / 2 + (wide)(x - t) * c;
    const int64_t u = x + cut.lo; /* rows from -lo on start at i + lo */
    const wide starts = u > 0 ? (wide)u * (u - 1) / 2 : 0;
    return ends - starts + x;
}

/* The first x whose running weight reaches r / P of the whole. */
static int64_t weighed_cut(ra_band cut, int64_t len, int r, int P)
{
    const wide goal = weight_below(cut, len, len) * r;
    int64_t lo = 0, hi = len;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (weight_below(cut, len, mid) * P < goal)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Where rank r's run starts: the first and the last rank end where the
 * running weight reaches 1/P and (P-1)/P of the whole, and the ranks
 * between share the rest evenly, the first ones a token more (as
 * ra_shard_range). The weights change only near the ends of the axis
 * (the window's ramps), so while the ramps lie within the first and the
 * last rank every rank's work lies within one row's of the mean; and the
 * runs change length at three ranks at most (ra_layout_kinks), which the
 * performance model needs to stay linear in P. */
int64_t ra_balanced_start(ra_band cut, int64_t len, int r, int P)
{
    if (r <= 0)
        return 0;
    if (r >= P)
        return len;
    const int64_t b1 = weighed_cut(cut, len, 1, P);
    if (r == 1)
        return b1;
    const int64_t bz = weighed_cut(cut, len, P - 1, P);
    return b1 + shard(bz - b1, r - 1, P - 2).start;
}

ra_slice ra_band_slice(ra_layout layout, ra_band cut, int64_t len, int rank,
                       int nranks)
{
    ra_slice s = {0};
    if (!cut_valid(len, rank, nranks) ||
        (unsigned)layout > RA_LAYOUT_BALANCED)
        return s;
    switch (layout) {
    case RA_LAYOUT_ZIGZAG: {
        /* 2P chunks of near-equal size; rank r takes chunk r, then chunk
         * 2P-1-r: an early and a late part of the causal triangle. */
        const int64_t chunks = 2 * (int64_t)nranks;
        ra_range a = shard(len, rank, chunks);
        ra_range b = shard(len, chunks - 1 - rank, chunks);
        s.nruns = 2;
        s.run[0] = (ra_run){a.start, a.count, 1};
        s.run[1] = (ra_run){b.start, b.count, 1};
        break;
    }
    case RA_LAYOUT_STRIPED: {
        int64_t count = len > rank ? (len - rank + nranks - 1) / nranks : 0;
        s.nruns = 1;
        s.run[0] = (ra_run){rank, count, nranks};
        break;
    }
    case RA_LAYOUT_BALANCED:
    case RA_LAYOUT_CONTIGUOUS:
    default: {
        ra_range a = ra_shard_range(len, rank, nranks);
        if (layout == RA_LAYOUT_BALANCED &&
            (cut.lo > -RA_UNBOUNDED || cut.hi < RA_UNBOUNDED)) {
            a.start = ra_balanced_start(cut, len, rank, nranks);
            a.count = ra_balanced_start(cut, len, rank + 1, nranks) - a.start;
        } /* else every token weighs alike: the contiguous cut */
        s.nruns = 1;
        s.run[0] = (ra_run){a.start, a.count, 1};
        break;
    }
    }
    for (int i = 0; i < s.nruns; i++)
        s.count += s.run[i].count;
    return s;
}

ra_slice ra_params_slice(const ra_params *params, ra_layout layout,
                         int64_t len, int rank, int nranks)
{
    return ra_band_slice(layout, ra_cut_band(params), len, rank, nranks);
}

ra_slice ra_layout_slice(ra_layout layout, const ra_numerics *num,
                         int64_t len, int rank, int nranks)
{
    if (layout == RA_LAYOUT_AUTO) /* not a cut: ra_exec_layout resolves it */
        return (ra_slice){0};
    ra_params p;
    ra_params_join(num, NULL, &p);
    return ra_params_slice(&p, layout, len, rank, nranks);
}
