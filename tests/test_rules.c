/* test_rules.c: the one band rule (engine/band.h) against a pair-by-pair
 * count, and the one error tally (engine/compare.h) on rows whose verdict
 * is known. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "band.h"
#include "compare.h"
#include "internal.h"

/* Whether query position i sees key j: ringattn.h's rules, written out. */
static int sees(int causal, int window, int64_t left, int64_t right,
                int64_t diag, int64_t i, int64_t j)
{
    if (causal && j > i + diag)
        return 0;
    if (window && (j < i + diag - left || j > i + diag + right))
        return 0;
    return 1;
}

static void test_band_against_pairs(void **state)
{
    (void)state;
    int64_t checked = 0;
    for (uint64_t trial = 0; trial < 400; trial++) {
        const uint64_t r = ra_random_u64(9, RA_STREAM_Q, trial);
        const int causal = (int)(r & 1), window = (int)((r >> 1) & 1);
        const int64_t left = (int64_t)((r >> 2) % 7);
        const int64_t right = (int64_t)((r >> 5) % 5);
        const int64_t N = 1 + (int64_t)((r >> 8) % 17);
        const int64_t M = 1 + (int64_t)((r >> 13) % 17);
        const int64_t kv_len = (int64_t)((r >> 18) % (uint64_t)(M + 1));
        const int64_t q_len = (int64_t)((r >> 23) % (uint64_t)(N + 1));
        const ra_band band = ra_band_make(causal, window, left, right, M - N);
        double pairs = 0.0;
        for (int64_t i = 0; i < N; i++) {
            int64_t first, last, count = 0, lo = -1, hi = -1;
            const int64_t n = ra_band_keys(band, i, kv_len, &first, &last);
            for (int64_t j = 0; j < kv_len; j++)
                if (sees(causal, window, left, right, M - N, i, j)) {
                    count++;
                    lo = lo < 0 ? j : lo;
                    hi = j;
                }
            assert_int_equal(n, count);
            if (count > 0) {
                assert_int_equal(first, lo);
                assert_int_equal(last, hi);
            }
            if (i < q_len)
                pairs += (double)count;
            checked++;
        }
        assert_true(ra_band_pairs(band, NULL, N, q_len, kv_len) == pairs);
    }
    printf("# band: %lld queries checked key by key\n", (long long)checked);
}

static void test_tally_verdicts(void **state)
{
    (void)state;
    ra_tally t = {0};
    ra_tally_o(&t, 1.0 + 1e-7, 1.0);
    ra_tally_o(&t, -2.0, -2.0);
    ra_tally_lse(&t, 3.0, 3.0 + 1e-7);
    assert_int_equal(t.rows, 1);
    assert_true(ra_tally_ok(&t, RA_TOLERANCE));
    assert_true(fabs(t.rel_o - 1e-7 / sqrt(5.0)) < 1e-12);

    ra_tally empty = {0}; /* a row that sees nothing: o = 0, lse = -inf */
    ra_tally_o(&empty, 0.0, 0.0);
    ra_tally_lse(&empty, -INFINITY, -INFINITY);
    assert_true(ra_tally_ok(&empty, RA_TOLERANCE));

    ra_tally lost = {0}; /* -inf where the reference sees keys */
    ra_tally_o(&lost, 0.0, 0.5);
    ra_tally_lse(&lost, -INFINITY, 1.0);
    assert_int_equal(lost.bad_inf, 1);
    assert_false(ra_tally_ok(&lost, RA_TOLERANCE));

    ra_tally nan = {0}; /* NaN where the reference has none */
    ra_tally_o(&nan, NAN, 0.5);
    ra_tally_lse(&nan, 1.0, 1.0);
    assert_true(nan.bad_inf >= 1);
    assert_false(ra_tally_ok(&nan, RA_TOLERANCE));

    ra_tally both = {0}; /* NaN in both still fails: nothing to compare */
    ra_tally_o(&both, NAN, NAN);
    ra_tally_lse(&both, NAN, NAN);
    assert_false(ra_tally_ok(&both, RA_TOLERANCE));

    ra_tally far = {0}; /* a few times the tolerance */
    ra_tally_o(&far, 1.0 + 5e-5, 1.0);
    ra_tally_lse(&far, 0.0, 0.0);
    assert_false(ra_tally_ok(&far, RA_TOLERANCE));

    ra_tally_merge(&t, &empty);
    assert_int_equal(t.rows, 2);
    assert_true(ra_tally_ok(&t, RA_TOLERANCE));
    ra_tally_merge(&t, &far);
    assert_false(ra_tally_ok(&t, RA_TOLERANCE));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_band_against_pairs),
        cmocka_unit_test(test_tally_verdicts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
