/* test_carve.c: ra_carve and ra_carve_alloc (engine/internal.h) on random
 * plans: every array aligned, never NULL, inside the block and apart from
 * the others; a size that overflows fails the whole plan. Big blocks
 * given back with ra_carve_free serve later plans of bytes .. 2 bytes,
 * the four largest at most, until ra_buffers_release. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

enum { MAX_PIECES = 12 };

/* A plan of pieces (count elements of elem bytes) and where they landed. */
typedef struct {
    int n;
    int64_t count[MAX_PIECES];
    size_t elem[MAX_PIECES];
    unsigned char *at[MAX_PIECES];
    int64_t used; /* the sizing pass's total */
} plan;

static void plan_fill(void *arg, ra_carver *c)
{
    plan *p = arg;
    for (int i = 0; i < p->n; i++)
        p->at[i] = ra_carve(c, p->count[i], p->elem[i]);
    if (!c->base)
        p->used = c->used;
}

static void test_carve_random_plans(void **state)
{
    (void)state;
    static const size_t elems[4] = {1, 4, 8, 12};
    for (uint64_t trial = 0; trial < 300; trial++) {
        plan p = {.n = 1 + (int)(ra_random_u64(5, RA_STREAM_Q, trial) %
                                 MAX_PIECES)};
        for (int i = 0; i < p.n; i++) {
            const uint64_t r = ra_random_u64(5, RA_STREAM_K,
                                             trial * MAX_PIECES + i);
            p.count[i] = (int64_t)(r % 300) * ((r >> 20) % 4 != 0);
            p.elem[i] = elems[(r >> 10) % 4];
        }
        unsigned char *block = ra_carve_alloc(plan_fill, &p);
        assert_non_null(block);
        assert_true(p.used >= 0);
        int64_t end = 0; /* where the previous piece ended */
        for (int i = 0; i < p.n; i++) {
            const int64_t bytes = p.count[i] * (int64_t)p.elem[i];
            assert_non_null(p.at[i]);
            assert_int_equal((uintptr_t)p.at[i] % RA_CARVE_ALIGN, 0);
            assert_true(p.at[i] - block >= end);
            end = (p.at[i] - block) + bytes;
            assert_true(end <= p.used);
            memset(p.at[i], i + 1, (size_t)bytes);
        }
        for (int i = 0; i < p.n; i++) /* no piece wrote over another */
            for (int64_t b = 0; b < p.count[i] * (int64_t)p.elem[i]; b++)
                assert_int_equal(p.at[i][b], i + 1);
        free(block);
    }
}

static void test_carve_overflow(void **state)
{
    (void)state;
    plan p = {.n = 3, .count = {10, INT64_MAX / 4, 10}, .elem = {4, 8, 4}};
    assert_null(ra_carve_alloc(plan_fill, &p));
    assert_int_equal(p.used, -1);
    plan q = {.n = 2, .count = {10, -1}, .elem = {4, 4}};
    assert_null(ra_carve_alloc(plan_fill, &q));
    assert_int_equal(q.used, -1);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(TEST_ASAN)
enum { KEEPS = 0 }; /* engine/carve.c keeps nothing under ASan */
#else
enum { KEEPS = 1 };
#endif

/* A block of one piece of `mib` MiB, its first and last bytes written. */
static unsigned char *big_block(double mib)
{
    plan p = {.n = 1, .count = {(int64_t)(mib * (1 << 20))}, .elem = {1}};
    unsigned char *b = ra_carve_alloc(plan_fill, &p);
    assert_non_null(b);
    assert_ptr_equal(p.at[0], b);
    b[0] = 1;
    b[p.count[0] - 1] = 2;
    return b;
}

static void test_carve_keeps_big_blocks(void **state)
{
    (void)state;
    if (!KEEPS)
        skip();
    ra_buffers_release();
    unsigned char *a = big_block(5);
    ra_carve_free(a);
    unsigned char *small = big_block(2); /* under 4 MiB: never kept */
    assert_ptr_not_equal(small, a);
    ra_carve_free(small);
    unsigned char *w = big_block(11); /* more than a holds */
    assert_ptr_not_equal(w, a);
    ra_carve_free(w);                 /* kept: a (5), w (11) */
    unsigned char *x = big_block(5);  /* a, not w: 11 > 2 * 5 */
    assert_ptr_equal(x, a);
    unsigned char *y = big_block(5);  /* none fits: fresh */
    assert_ptr_not_equal(y, w);
    assert_ptr_not_equal(y, a);
    assert_ptr_equal(big_block(6), w); /* 11 <= 2 * 6 */
    ra_carve_free(a);
    ra_carve_free(y);
    ra_carve_free(w);                 /* kept: a, y (5), w (11) */
    unsigned char *f20 = big_block(20), *f21 = big_block(21);
    ra_carve_free(f20);               /* the four slots full */
    ra_carve_free(f21);               /* evicts a 5 MiB block */
    assert_ptr_equal(big_block(21), f21);
    assert_ptr_equal(big_block(20), f20);
    assert_ptr_equal(big_block(11), w);
    unsigned char *five = big_block(5);
    assert_true(five == a || five == y);
    ra_carve_free(five);
    ra_carve_free(w);
    ra_carve_free(f20);
    ra_carve_free(f21);
    ra_buffers_release();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_carve_random_plans),
        cmocka_unit_test(test_carve_overflow),
        cmocka_unit_test(test_carve_keeps_big_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
