/* test_core_peak.c: bench's physical-peak loops (engine/core_peak.c) and
 * products-only yardstick (engine/products.c). Every loop this core has
 * runs at a positive rate; every loop it lacks is refused with the name
 * of what it lacks and rates 0; the precision's choice is the first
 * available of its list. The products run the shapes given, fp32 and
 * bf16, and count 2 m n k FLOPs per product. No timing is asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core_peak.h"
#include "internal.h"
#include "products.h"

static void test_loops(void **state)
{
    (void)state;
    for (int l = 0; l < RA_LOOP_COUNT; l++) {
        const char *why = NULL;
        const int has = ra_loop_available((ra_loop)l, &why);
        const double rate = ra_loop_rate((ra_loop)l, 0.01);
        printf("# %-24s %s\n", ra_loop_name((ra_loop)l),
               has ? "available" : why);
        if (has)
            assert_true(rate > 0.0);
        else
            assert_true(rate == 0.0 && why && strlen(why) > 0);
    }
}

static void test_choice(void **state)
{
    (void)state;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const char *why = NULL;
        const ra_loop l = ra_loop_for(bf16, &why);
        const ra_loop first = bf16 ? RA_LOOP_AMX_BF16 : RA_LOOP_AVX512_FMA;
        if (l == RA_LOOP_COUNT) {
            assert_true(why && strlen(why) > 0);
            continue;
        }
        assert_true(ra_loop_available(l, NULL));
        assert_true(l == first || !ra_loop_available(first, NULL));
        assert_true(bf16 ? l <= RA_LOOP_AVX512_BF16
                         : l >= RA_LOOP_AVX512_FMA);
    }
}

static void test_products(void **state)
{
    (void)state;
    const ra_mm_shape shapes[2] = {{0, 1, 48, 40, 24, 0.5f, 0.0f, 40},
                                   {0, 0, 48, 16, 40, 1.0f, 1.0f, 16}};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        ra_products *x = NULL;
        assert_int_equal(ra_products_open(RA_GEMM_AUTO, bf16, 1, shapes, 2,
                                          &x), RA_OK);
        const double flops = ra_products_run(x, 3);
        assert_true(flops == 3 * 2.0 * (48 * 40 * 24 + 48 * 16 * 40));
        ra_products_close(x);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loops),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_products),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
