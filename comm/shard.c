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
