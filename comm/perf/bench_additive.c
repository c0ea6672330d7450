/* bench_additive.c: the random weights of the additive score that both
 * benches (forward and --backward) time, and bench's random sinks
 * (bench_measure.h). */
#include <math.h>
#include <stdlib.h>

#include "agree.h"
#include "bench_measure.h"
#include "internal.h"

ra_status bench_additive_make(MPI_Comm comm, uint64_t seed, int64_t A,
                              int64_t D, float **mem, ra_additive *ad)
{
    const int64_t n = ra_mul_checked(A, 2 * D + 1);
    float *w = n > 0 ? malloc(sizeof(float) * (size_t)n) : NULL;
    *mem = w;
    ra_status st = ra_agree(comm, w ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "bench: out of memory "
                                           "for the additive weights"));
    if (st != RA_OK)
        return st;
    ra_random_normal(seed, RA_STREAM_ADDITIVE, 0, n, w);
    for (int64_t i = 0; i < 2 * A * D; i++)
        w[i] *= (float)(0.5 / sqrt((double)D));
    *ad = (ra_additive){A, w, w + A * D, w + 2 * A * D};
    return RA_OK;
}

ra_status bench_sinks_make(MPI_Comm comm, uint64_t seed, int64_t H,
                           float **mem)
{
    *mem = malloc(sizeof(float) * (size_t)H);
    ra_status st = ra_agree(comm, *mem ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "bench --sinks: out "
                                           "of memory"));
    if (st == RA_OK)
        ra_random_normal(seed, RA_STREAM_SINKS, 0, H, *mem);
    return st;
}
