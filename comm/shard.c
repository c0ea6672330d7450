/* shard.c: how a sequence axis is cut over the ranks. */
#include "ringattn.h"

ra_range ra_shard_range(int64_t len, int rank, int nranks)
{
    int64_t base = len / nranks, extra = len % nranks;
    ra_range r;
    r.start = rank * base + (rank < extra ? rank : extra);
    r.count = base + (rank < extra ? 1 : 0);
    return r;
}

ra_slice ra_slice_clip(const ra_slice *sl, int64_t i0, int64_t i1)
{
    ra_slice c = {0};
    for (int i = 0; i < sl->nruns; i++) {
        const ra_run *r = &sl->run[i];
        /* t such that i0 <= start + t * stride < i1, within the run */
        int64_t lo = i0 > r->start ? (i0 - r->start + r->stride - 1) / r->stride : 0;
        int64_t hi = i1 > r->start ? (i1 - r->start + r->stride - 1) / r->stride : 0;
        hi = hi < r->count ? hi : r->count;
        if (hi > lo) {
            c.run[c.nruns++] = (ra_run){r->start + lo * r->stride - i0, hi - lo,
                                        r->stride};
            c.count += hi - lo;
        }
    }
    return c;
}

ra_slice ra_layout_slice(ra_layout layout, int64_t len, int rank, int nranks)
{
    ra_slice s = {0};
    switch (layout) {
    case RA_LAYOUT_ZIGZAG: {
        /* 2P chunks of near-equal size; rank r takes chunk r, then chunk
         * 2P-1-r: an early and a late part of the causal triangle. */
        ra_range a = ra_shard_range(len, rank, 2 * nranks);
        ra_range b = ra_shard_range(len, 2 * nranks - 1 - rank, 2 * nranks);
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
    case RA_LAYOUT_CONTIGUOUS:
    default: {
        ra_range a = ra_shard_range(len, rank, nranks);
        s.nruns = 1;
        s.run[0] = (ra_run){a.start, a.count, 1};
        break;
    }
    }
    for (int i = 0; i < s.nruns; i++)
        s.count += s.run[i].count;
    return s;
}
