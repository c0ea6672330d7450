/* test_fwd_checks.c: the pure parts of a forward output's checks.
 * ra_rows_see_keys (engine/band.c), which the lse check uses, against the
 * fp64 reference's pair rule ra_ref_visible on random masks; ra_hash64
 * (engine/hash.c), which the fingerprint uses: every bit of the data, the
 * length and the seed change it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "band.h"
#include "hash.h"
#include "internal.h"
#include "kernel.h"

enum { MAXLEN = 40, TRIALS = 400 };

/* A small random draw in [0, n) for trial t, item i. */
static int64_t draw(uint64_t t, uint64_t i, int64_t n)
{
    return (int64_t)(ra_random_u64(7, RA_STREAM_Q, t * 64 + i) %
                     (uint64_t)n);
}

/* One random problem: sizes, rules, lengths and segment ids. */
typedef struct {
    int64_t N, M, q_len, kv_len, left, right;
    int causal, window, segs;
    int64_t qseg[MAXLEN], kseg[MAXLEN], qpos[MAXLEN], kpos[MAXLEN];
} problem;

static problem problem_draw(uint64_t t)
{
    problem p = {.N = 1 + draw(t, 0, MAXLEN), .M = 1 + draw(t, 1, MAXLEN),
                 .causal = (int)draw(t, 2, 2), .window = (int)draw(t, 3, 2),
                 .left = draw(t, 4, 8), .right = draw(t, 5, 8),
                 .segs = (int)draw(t, 6, 2)};
    p.q_len = draw(t, 7, p.N + 1);
    p.kv_len = draw(t, 8, p.M + 1);
    for (int64_t i = 0; i < MAXLEN; i++) {
        p.qseg[i] = draw(t, 10 + (uint64_t)i, 5) - 2;  /* ids -2..2 */
        p.kseg[i] = draw(t, 50 + (uint64_t)i, 3) - 1;  /* ids -1..1 */
        p.qpos[i] = p.kpos[i] = i;
    }
    return p;
}

static void test_rows_see_keys_random(void **state)
{
    (void)state;
    int none = 0, some = 0;
    for (uint64_t t = 0; t < TRIALS; t++) {
        const problem p = problem_draw(t);
        const ra_mask mk = {p.causal, p.M - p.N, p.window, p.left, p.right,
                            p.qpos, p.kpos, &p.q_len, &p.kv_len,
                            p.segs ? p.qseg : NULL, p.segs ? p.kseg : NULL};
        ra_key_id keys[MAXLEN];
        for (int64_t j = 0; j < p.M; j++)
            keys[j] = (ra_key_id){p.kseg[j], j};
        ra_key_ids_sort(keys, p.M);
        const ra_visibility v = {
            ra_band_make(p.causal, p.window, p.left, p.right, p.M - p.N),
            p.q_len, p.kv_len, p.segs ? keys : NULL, p.M};
        unsigned char seen[MAXLEN];
        ra_rows_see_keys(&v, p.qpos, p.qseg, p.N, seen);
        for (int64_t i = 0; i < p.N; i++) {
            int any = 0;
            for (int64_t j = 0; j < p.M && !any; j++)
                any = ra_ref_visible(&mk, i, j);
            assert_int_equal(seen[i], any);
            none += !any;
            some += any;
        }
    }
    assert_true(none > 100 && some > 100); /* both verdicts were tried */
}

static void test_hash_bits_length_seed(void **state)
{
    (void)state;
    unsigned char buf[37];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 29 + 3);
    const uint64_t h = ra_hash64(buf, sizeof buf, 5);
    assert_true(h == ra_hash64(buf, sizeof buf, 5));
    for (size_t bit = 0; bit < 8 * sizeof buf; bit++) {
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        assert_true(ra_hash64(buf, sizeof buf, 5) != h);
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    assert_true(ra_hash64(buf, sizeof buf, 6) != h);
    unsigned char longer[38];
    memcpy(longer, buf, sizeof buf);
    longer[37] = 0; /* a trailing zero byte is not the same data */
    assert_true(ra_hash64(longer, sizeof longer, 5) != h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_see_keys_random),
        cmocka_unit_test(test_hash_bits_length_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
