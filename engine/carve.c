/* carve.c: one allocation carved into the arrays of a struct (internal.h),
 * so that a struct with many arrays has one malloc and one free. */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

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
enum { CARVE_REDZONE = RA_CARVE_ALIGN, CARVE_KEEP = 0 };
#else
#define ASAN_POISON_MEMORY_REGION(at, bytes) ((void)(at), (void)(bytes))
enum { CARVE_REDZONE = 0, CARVE_KEEP = 1 };
#endif
/* Under valgrind a kept block is handed out again as undefined memory, so
 * that memcheck still sees a read before the new owner's first write. */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#endif
#endif
#ifndef VALGRIND_MAKE_MEM_UNDEFINED
#define VALGRIND_MAKE_MEM_UNDEFINED(at, bytes) ((void)(at), (void)(bytes))
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

/* Blocks of BIG_BLOCK bytes and more are kept between calls (below).
 * They live on ordinary pages: on transparent huge pages, the first call's
 * faults were fewer, but every later call ran 3-15% slower on this
 * project's machine (docs/PERFORMANCE.md, "Work blocks kept between
 * calls"). */
enum { BIG_BLOCK = 4 << 20 };

static void *block_alloc(size_t bytes)
{
    void *block = NULL;
    return posix_memalign(&block, RA_CARVE_ALIGN, bytes) == 0 ? block : NULL;
}

/* The big blocks that calls gave back (ra_carve_free), kept mapped for
 * the next calls. A fresh block is mapped afresh by glibc (over its mmap
 * threshold) and each of its pages faults in, one by one, inside the call
 * that first touches it: tens of MiB of ring buffers cost a P = 2 call
 * of half a second up to a fifth of its time (docs/PERFORMANCE.md, "Page
 * faults"). */
enum { KEEP_SLOTS = 4 };
static struct {
    void *block;
    size_t bytes;
} kept[KEEP_SLOTS];
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* The smallest kept block of bytes .. 2 bytes, taken out, or NULL. */
static void *kept_take(size_t bytes)
{
    if (!CARVE_KEEP || bytes < BIG_BLOCK)
        return NULL;
    pthread_mutex_lock(&kept_lock);
    int best = -1;
    for (int i = 0; i < KEEP_SLOTS; i++)
        if (kept[i].block && kept[i].bytes >= bytes &&
            kept[i].bytes / 2 <= bytes &&
            (best < 0 || kept[i].bytes < kept[best].bytes))
            best = i;
    void *block = best < 0 ? NULL : kept[best].block;
    if (best >= 0)
        kept[best].block = NULL;
    pthread_mutex_unlock(&kept_lock);
    if (block)
        VALGRIND_MAKE_MEM_UNDEFINED(block, bytes);
    return block;
}

void ra_carve_free(void *block)
{
    const size_t bytes = block ? malloc_usable_size(block) : 0;
    if (!CARVE_KEEP || bytes < BIG_BLOCK) {
        free(block);
        return;
    }
    pthread_mutex_lock(&kept_lock);
    int slot = 0; /* an empty slot, else the smallest block's */
    for (int i = 0; i < KEEP_SLOTS && kept[slot].block; i++)
        if (!kept[i].block || kept[i].bytes < kept[slot].bytes)
            slot = i;
    void *out = block;
    if (!kept[slot].block || kept[slot].bytes < bytes) {
        out = kept[slot].block;
        kept[slot].block = block;
        kept[slot].bytes = bytes;
    }
    pthread_mutex_unlock(&kept_lock);
    free(out);
}

void ra_buffers_release(void)
{
    pthread_mutex_lock(&kept_lock);
    for (int i = 0; i < KEEP_SLOTS; i++) {
        free(kept[i].block);
        kept[i].block = NULL;
    }
    pthread_mutex_unlock(&kept_lock);
}

void *ra_carve_alloc(void (*fill)(void *ctx, ra_carver *c), void *ctx)
{
    ra_carver c = {NULL, 0};
    fill(ctx, &c);
    if (c.used < 0 || (uint64_t)c.used > SIZE_MAX - RA_CARVE_ALIGN)
        return NULL;
    /* at least one alignment unit, so that an empty plan still allocates */
    const size_t bytes = (size_t)(c.used ? c.used : RA_CARVE_ALIGN);
    void *block = kept_take(bytes);
    if (!block)
        block = block_alloc(bytes);
    if (!block)
        return NULL;
    c = (ra_carver){block, 0};
    fill(ctx, &c);
    return block;
}
