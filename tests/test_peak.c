/* test_peak.c: bench's oneDNN yardstick (engine/peak.c). With oneDNN in
 * the build, the fp32 product is created and runs, 2 n^3 FLOPs, and names
 * oneDNN's implementation; the bf16 one runs (its implementation printed:
 * brg:avx512_core_bf16 here) or is refused naming bf16. Without oneDNN both are
 * refused naming the build, so no figure can be made up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "peak.h"
#include "ringattn.h"

enum { PEAK_TEST_N = 96 };

static void test_fp32(void **state)
{
    const char *why = NULL;
    ra_peak *pk = ra_peak_open(PEAK_TEST_N, 0, 1, &why);
    if (!ra_gemm_available(RA_GEMM_ONEDNN)) {
        assert_null(pk);
        assert_string_equal(why, "this build has no oneDNN");
        return;
    }
    assert_non_null(pk);
    assert_int_equal(ra_peak_run(pk), 0);
    assert_int_equal(ra_peak_run(pk), 0); /* created once, run again */
    assert_true(ra_peak_flops(pk) == 2.0 * PEAK_TEST_N * PEAK_TEST_N *
                                          PEAK_TEST_N);
    assert_true(strlen(ra_peak_impl(pk)) > 0);
    assert_string_not_equal(ra_peak_impl(pk), "unknown");
    ra_peak_close(pk);
}

static void test_bf16(void **state)
{
    const char *why = NULL;
    ra_peak *pk = ra_peak_open(PEAK_TEST_N, 1, 1, &why);
    if (!pk) {
        assert_true(strstr(why, "bf16") || strstr(why, "no oneDNN"));
        return;
    }
    assert_int_equal(ra_peak_run(pk), 0);
    assert_string_not_equal(ra_peak_impl(pk), "unknown");
    print_message("bf16 peak: %s\n", ra_peak_impl(pk));
    ra_peak_close(pk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
