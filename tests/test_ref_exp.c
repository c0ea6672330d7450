/* test_ref_exp.c: the fp64 exp of the verify passes (engine/ref_exp.c) on
 * the path this core dispatches to, against libm: within a few ulp over
 * the arguments the passes give it (a score minus its row's max or LSE),
 * 0 for -inf and below -708, odd lengths (vector tails). */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ref_block.h"

enum { LEN = 4099 };

static void test_against_libm(void **state)
{
    (void)state;
    double *x = malloc(sizeof(double) * LEN), worst = 0.0;
    assert_non_null(x);
    for (int i = 0; i < LEN; i++) /* [-707, 1], odd steps */
        x[i] = 1.0 - 708.0 * (double)((i * 2654435761u) % LEN) / LEN;
    double *y = malloc(sizeof(double) * LEN);
    assert_non_null(y);
    for (int i = 0; i < LEN; i++)
        y[i] = x[i];
    ra_ref_exp(y, LEN);
    for (int i = 0; i < LEN; i++) {
        const double r = exp(x[i]), e = fabs(y[i] - r) / r;
        worst = e > worst ? e : worst;
    }
    assert_true(worst < 8 * DBL_EPSILON);
    free(x);
    free(y);
}

static void test_edges(void **state)
{
    (void)state;
    double x[7] = {-INFINITY, -708.5, -1000.0, 0.0, -0.0, 1e-300, -745.0};
    ra_ref_exp(x, 7);
    assert_true(x[0] == 0.0 && x[1] == 0.0 && x[2] == 0.0 && x[6] == 0.0);
    assert_true(x[3] == 1.0 && x[4] == 1.0 && x[5] == 1.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_libm),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
