/* parallel.c: the memory passes of a call (copies) split over the rank's
 * threads, so that they do not leave all but one thread idle. */
#include <string.h>

#include "internal.h"

/* Bytes per chunk: large enough to amortise the hand-out, small enough to
 * split a few megabytes evenly. */
enum { COPY_CHUNK = 1 << 18 };

void ra_copy_threads(void *dst, const void *src, size_t bytes, int threads)
{
    const int64_t chunks = (int64_t)((bytes + COPY_CHUNK - 1) / COPY_CHUNK);
    if (threads < 2 || chunks < 2) {
        memcpy(dst, src, bytes);
        return;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        const size_t at = (size_t)c * COPY_CHUNK;
        const size_t len = bytes - at < COPY_CHUNK ? bytes - at : COPY_CHUNK;
        memcpy((char *)dst + at, (const char *)src + at, len);
    }
}
