/* carve.c: one allocation carved into the arrays of a struct (internal.h),
 * so that a struct with many arrays has one malloc and one free. */
#include <stdlib.h>
#include <sys/mman.h>

#include "internal.h"

/* Under AddressSanitizer each array is followed by one more alignment
 * unit, and its gap is poisoned: an overrun into the next array of the
 * block is reported as if the arrays were allocated apart. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CARVE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(CARVE_ASAN)
#include <sanitizer/asan_interface.h>
enum { CARVE_REDZONE = RA_CARVE_ALIGN };
#else
#define ASAN_POISON_MEMORY_REGION(at, bytes) ((void)(at), (void)(bytes))
enum { CARVE_REDZONE = 0 };
#endif

void *ra_carve(ra_carver *c, int64_t count, size_t elem)
{
    const int64_t bytes = ra_mul_checked(count, (int64_t)elem);
    const int64_t at = c->used;
    if (at < 0 || bytes < 0) {
        c->used = -1;
        return NULL;
    }
    const int64_t end = ra_add_checked(at, bytes);
    const int64_t gap = end < 0 ? -1
                                : CARVE_REDZONE +
                                      (RA_CARVE_ALIGN - end % RA_CARVE_ALIGN) %
                                          RA_CARVE_ALIGN;
    c->used = gap < 0 ? -1 : ra_add_checked(end, gap);
    if (c->base && c->used >= 0)
        ASAN_POISON_MEMORY_REGION(c->base + end, (size_t)gap);
    return c->base && c->used >= 0 ? c->base + at : NULL;
}

/* A block of at least 4 MiB is aligned to 2 MiB and asked to live on
 * transparent huge pages where the kernel offers them (THP "madvise" mode,
 * Debian's default). A call's block holds the ring's K/V buffers, tens of
 * MiB that are freshly mapped by every call: on 4 KiB pages their first
 * touch cost one fault per page inside the call, measured at a fifth of a
 * P = 2 forward pass (docs/PERFORMANCE.md, "Page faults"). */
static void *block_alloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    const int big = bytes >= 2 * huge;
    void *block = NULL;
    if (posix_memalign(&block, big ? huge : RA_CARVE_ALIGN, bytes) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (big) /* advice only: a refusal leaves ordinary pages */
        (void)madvise(block, bytes / huge * huge, MADV_HUGEPAGE);
#endif
    return block;
}

void *ra_carve_alloc(void (*fill)(void *ctx, ra_carver *c), void *ctx)
{
    ra_carver c = {NULL, 0};
    fill(ctx, &c);
    if (c.used < 0 || (uint64_t)c.used > SIZE_MAX - RA_CARVE_ALIGN)
        return NULL;
    /* at least one alignment unit, so that an empty plan still allocates */
    void *block = block_alloc((size_t)(c.used ? c.used : RA_CARVE_ALIGN));
    if (!block)
        return NULL;
    c = (ra_carver){block, 0};
    fill(ctx, &c);
    return block;
}
