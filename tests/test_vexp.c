/* test_vexp.c: the softmax's base-2 exponential and max, both the dispatched
 * path (AVX2/FMA where the CPU has it) and the portable one, against libm in
 * double. Errors are in ulps of fp32: |y - 2^x| / 2^x / FLT_EPSILON. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "kernel.h"
#include "simd.h"

typedef float (*exp2_fn)(float *, int64_t, float);
typedef float (*max_fn)(const float *, int64_t);

/* The two paths under test; [0] is whatever ra_exp2_impl() names. */
typedef struct {
    const char *name;
    exp2_fn exp2;
    max_fn max;
} path;

static path paths[2] = {
    {"dispatched", ra_exp2_shift_sum, ra_max},
    {"scalar", ra_exp2_shift_sum_scalar, ra_max_scalar},
};

static const double ulp_bound = 1.0;

/* Error of y in fp32 ulps relative to the exact ref > 0. */
static double ulps(float y, double ref)
{
    return fabs((double)y - ref) / ref / FLT_EPSILON;
}

/* Runs fn over x[0..len) with shift and checks each result against
 * exp2(x - shift) in double, where the subtraction is exact by construction
 * or done in fp32 as the path does it: t < -126 must give exactly 0, others
 * within ulp_bound. Returns the largest error in ulps. */
static double expect_exp2(exp2_fn fn, const float *x, int64_t len, float shift,
                          float *y)
{
    memcpy(y, x, sizeof(float) * (size_t)len);
    fn(y, len, shift);
    double worst = 0.0;
    for (int64_t j = 0; j < len; j++) {
        float t = x[j] - shift;
        if (!(t >= -126.0f)) {
            if (y[j] != 0.0f)
                fail_msg("2^%a gave %a, expected 0", (double)t, (double)y[j]);
            continue;
        }
        double e = ulps(y[j], exp2((double)t));
        if (!(e <= ulp_bound))
            fail_msg("2^%a gave %a: %.3f ulp", (double)t, (double)y[j], e);
        worst = fmax(worst, e);
    }
    return worst;
}

/* x in [-126, 0] on a grid of 2^-12, every binade of |x| down to the
 * smallest subnormal, and arguments below the range (which give 0). */
static void test_exp2_sweep(void **state)
{
    (void)state;
    const int64_t grid = 126 * 4096 + 1;
    const int64_t cap = grid + 156 * 64 + 16;
    float *x = malloc(sizeof(float) * (size_t)cap);
    float *y = malloc(sizeof(float) * (size_t)cap);
    int64_t len = 0;
    for (int64_t k = 0; k < grid; k++)
        x[len++] = -(float)k / 4096.0f;
    for (int e = -149; e <= 6; e++)
        for (int k = 0; k < 64; k++) {
            float v = -ldexpf(1.0f + (float)k / 64.0f, e);
            if (v >= -126.0f)
                x[len++] = v;
        }
    const float below[] = {nextafterf(-126.0f, -INFINITY), -126.5f, -127.0f,
                           -149.0f, -150.0f, -1000.0f, -FLT_MAX, -INFINITY};
    for (size_t i = 0; i < sizeof below / sizeof below[0]; i++)
        x[len++] = below[i];
    assert_true(len <= cap);

    float *y0 = malloc(sizeof(float) * (size_t)len);
    for (int pi = 0; pi < 2; pi++) {
        double worst = expect_exp2(paths[pi].exp2, x, len, 0.0f, y);
        printf("# exp2 sweep %-10s (%s): %lld points, max %.3f ulp\n",
               paths[pi].name, pi == 0 ? ra_exp2_impl() : "scalar",
               (long long)len, worst);
        if (pi == 0)
            memcpy(y0, y, sizeof(float) * (size_t)len);
    }
    int64_t differ = 0;
    for (int64_t j = 0; j < len; j++)
        differ += memcmp(&y0[j], &y[j], sizeof(float)) != 0;
    printf("# exp2 sweep: the two paths differ in %lld of %lld results\n",
           (long long)differ, (long long)len);
    free(x);
    free(y);
    free(y0);
}

/* A non-zero shift, with x chosen so that x - shift is exact in fp32. */
static void test_exp2_shifted(void **state)
{
    (void)state;
    static const float shifts[3] = {37.25f, -3.5f, 100.0f};
    const int64_t len = 20 * 4096 + 1;
    float *x = malloc(sizeof(float) * (size_t)len);
    float *y = malloc(sizeof(float) * (size_t)len);
    for (int si = 0; si < 3; si++) {
        for (int64_t k = 0; k < len; k++)
            x[k] = shifts[si] - (float)k / 4096.0f;
        for (int pi = 0; pi < 2; pi++) {
            double worst = expect_exp2(paths[pi].exp2, x, len, shifts[si], y);
            printf("# exp2 shift %g %-10s: max %.3f ulp\n",
                   (double)shifts[si], paths[pi].name, worst);
        }
    }
    free(x);
    free(y);
}

/* Softmax-like rows as the kernel passes them (shift = row max, some -inf),
 * at lengths that leave a tail after the 8-wide loop: each result within
 * ulp_bound, the returned sum close to the exact one, and nothing written
 * past len. */
static void test_exp2_tails(void **state)
{
    (void)state;
    static const int64_t lens[9] = {0, 1, 7, 8, 9, 15, 17, 512, 1001};
    const int64_t pad = 8;
    float *x = malloc(sizeof(float) * (size_t)(1001 + pad));
    float *y = malloc(sizeof(float) * (size_t)(1001 + pad));
    double worst_ulp[2] = {0.0, 0.0}, worst_sum[2] = {0.0, 0.0};
    for (int li = 0; li < 9; li++)
        for (uint64_t seed = 1; seed <= 50; seed++) {
            const int64_t len = lens[li];
            ra_random_normal(seed, (uint64_t)li, 0, len + pad, x);
            float shift = -INFINITY;
            for (int64_t j = 0; j < len; j++) {
                x[j] *= 6.0f;
                if ((j + seed) % 5 == 0 && j != 0)
                    x[j] = -INFINITY;
                shift = x[j] > shift ? x[j] : shift;
            }
            for (int pi = 0; pi < 2; pi++) {
                memcpy(y, x, sizeof(float) * (size_t)(len + pad));
                float sum = paths[pi].exp2(y, len, shift);
                assert_memory_equal(y + len, x + len, sizeof(float) * pad);
                double exact = 0.0;
                for (int64_t j = 0; j < len; j++) {
                    float t = x[j] - shift;
                    double ref = t >= -126.0f ? exp2((double)t) : 0.0;
                    exact += ref;
                    if (ref == 0.0) {
                        assert_true(y[j] == 0.0f);
                        continue;
                    }
                    double e = ulps(y[j], ref);
                    assert_true(e <= ulp_bound);
                    worst_ulp[pi] = fmax(worst_ulp[pi], e);
                }
                if (len == 0) {
                    assert_true(sum == 0.0f);
                    continue;
                }
                double rel = fabs((double)sum - exact) / exact;
                worst_sum[pi] = fmax(worst_sum[pi], rel);
                /* Recursive fp32 summation of positive terms, each within
                 * ulp_bound: first-order bound for every input, widened by
                 * 0.1% for the second-order terms. */
                double bound = (ulp_bound * FLT_EPSILON +
                                (double)(len - 1) * FLT_EPSILON / 2) * 1.001;
                /* The 8-lane AVX2 sum has 8 short chains and stays far
                 * tighter; the scalar chain of 1001 terms reaches ~1.6e-6. */
                if (pi == 0 && strcmp(ra_exp2_impl(), "avx2-fma") == 0)
                    bound = fmin(bound, 1e-6);
                if (!(rel <= bound))
                    fail_msg("%s len %lld seed %llu: sum rel error %.3e > %.3e",
                             paths[pi].name, (long long)len,
                             (unsigned long long)seed, rel, bound);
            }
        }
    for (int pi = 0; pi < 2; pi++)
        printf("# exp2 tails %-10s: max %.3f ulp, sum rel error %.3e\n",
               paths[pi].name, worst_ulp[pi], worst_sum[pi]);
    free(x);
    free(y);
}

static float max_loop(const float *x, int64_t len)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < len; j++)
        if (x[j] > m)
            m = x[j];
    return m;
}

/* Random rows, rows with -inf, all -inf, all far below 0, and the maximum
 * placed in the head or the tail of the 8-wide loop. */
static void test_max(void **state)
{
    (void)state;
    static const int64_t lens[10] = {0, 1, 7, 8, 9, 15, 16, 17, 256, 1001};
    float *x = malloc(sizeof(float) * 1001);
    int cases = 0;
    for (int li = 0; li < 10; li++)
        for (int pattern = 0; pattern < 6; pattern++) {
            const int64_t len = lens[li];
            ra_random_normal(77, (uint64_t)(li * 6 + pattern), 0, len, x);
            for (int64_t j = 0; j < len; j++) {
                if (pattern == 1 && j % 3 == 0)
                    x[j] = -INFINITY;
                if (pattern == 2)
                    x[j] = -INFINITY;
                if (pattern >= 3)
                    x[j] -= 100.0f;
            }
            if (pattern == 4 && len > 0)
                x[len - 1] = 0.0f; /* in the tail when len % 8 != 0 */
            if (pattern == 5 && len > 0)
                x[0] = 0.0f;
            float want = max_loop(x, len);
            for (int pi = 0; pi < 2; pi++) {
                float got = paths[pi].max(x, len);
                if (memcmp(&got, &want, sizeof got) != 0)
                    fail_msg("%s len %lld pattern %d: %a, expected %a",
                             paths[pi].name, (long long)len, pattern,
                             (double)got, (double)want);
            }
            cases++;
        }
    for (int pi = 0; pi < 2; pi++)
        assert_true(paths[pi].max(x, 0) == -INFINITY);
    printf("# max: %d cases agree on both paths\n", cases);
    free(x);
}

/* The range check's scans over the finite entries, on every path the CPU
 * has (AVX-512, AVX2 by cap, scalar): rows with NaN, +-inf and huge
 * values at the head, the tail and the 8- and 16-wide loops. The maximum
 * |x| is exact; the float sum of squares is within len ulps of fp64
 * (and at least 2^100, or inf, where fp64 says it is that large). */
static void test_finite_scans(void **state)
{
    (void)state;
    static const int64_t lens[9] = {0, 1, 7, 8, 15, 16, 17, 64, 1001};
    static const char *caps[3] = {NULL, "avx2", "scalar"};
    float *x = malloc(sizeof(float) * 1001);
    int cases = 0;
    for (int li = 0; li < 9; li++)
        for (int pattern = 0; pattern < 5; pattern++) {
            const int64_t len = lens[li];
            ra_random_normal(78, (uint64_t)(li * 5 + pattern), 0, len, x);
            for (int64_t j = 0; j < len; j++) {
                if (pattern == 1 && j % 5 == 0)
                    x[j] = j % 2 ? NAN : -INFINITY;
                if (pattern == 2 && j == len - 1)
                    x[j] = INFINITY;
                if (pattern == 3 && j % 7 == 3)
                    x[j] = -3e30f; /* squares overflow float */
                if (pattern == 4)
                    x[j] *= 1e15f;
            }
            double mx = 0.0, ss = 0.0;
            for (int64_t j = 0; j < len; j++)
                if (isfinite(x[j])) {
                    mx = fmax(mx, fabs((double)x[j]));
                    ss += (double)x[j] * x[j];
                }
            for (int ci = 0; ci < 3; ci++) {
                ra_simd_cap(caps[ci]);
                const float m = ra_max_abs(x, len), q = ra_sum_squares(x, len);
                if ((double)m != mx)
                    fail_msg("%s len %lld pattern %d: max |x| %a, expected %a",
                             ra_exp2_impl(), (long long)len, pattern,
                             (double)m, mx);
                const int ok = ss < 0x1p100
                                   ? fabs(q - ss) <= 2.0 * (double)(len + 1) *
                                                         FLT_EPSILON * ss
                                   : !(q < 0x1p100f);
                if (!ok)
                    fail_msg("%s len %lld pattern %d: sum of squares %a, "
                             "fp64 %a", ra_exp2_impl(), (long long)len,
                             pattern, (double)q, ss);
                cases++;
            }
        }
    ra_simd_cap(NULL);
    printf("# finite scans: %d cases on every path\n", cases);
    free(x);
}

/* The additive score's derivative terms: the dispatched and the scalar
 * path agree bit for bit, and both within 1e-6 of the fp64 derivative. */
static void test_additive_grad(void **state)
{
    (void)state;
    enum { LEN = 37 };
    float in[3 * LEN], got[2][3 * LEN];
    for (int rep = 0; rep < 50; rep++) {
        ra_random_normal(91, (uint64_t)rep, 0, 3 * LEN, in);
        const float ds = 0.01f * (float)(rep - 25);
        for (int i = 0; i < LEN; i++)
            in[i] *= 1.0f + 0.2f * (float)(rep % 7); /* reach tanh's rails */
        memset(got, 0, sizeof got);
        ra_additive_grad(in, in + LEN, in + 2 * LEN, ds, got[0],
                         got[0] + LEN, got[0] + 2 * LEN, LEN);
        ra_additive_grad_scalar(in, in + LEN, in + 2 * LEN, ds, got[1],
                                got[1] + LEN, got[1] + 2 * LEN, LEN);
        assert_memory_equal(got[0], got[1], sizeof got[0]);
        for (int j = 0; j < LEN; j++) {
            const double t = tanh((double)in[j] + in[LEN + j]);
            const double u = ds * (double)in[2 * LEN + j] * (1.0 - t * t);
            assert_true(fabs(got[0][j] - u) <= 1e-6 * (1.0 + fabs(u)));
            assert_true(fabs(got[0][LEN + j] - u) <= 1e-6 * (1.0 + fabs(u)));
            assert_true(fabs(got[0][2 * LEN + j] - ds * t) <= 1e-6);
        }
    }
    printf("# additive grad: 50 rows agree on both paths and with fp64\n");
}

/* Softcap (issue 42): every path gives the scalar one's bits (a NaN's
 * sign aside), the cap times tanh within 3e-7 relative of fp64, the
 * derivative 1 - tanh^2 within 1e-6, NaN stays NaN and -inf gives -cap
 * within 1e-7; lengths cover every path's tail. */
static void test_softcap(void **state)
{
    (void)state;
    static const int64_t lens[6] = {1, 7, 8, 17, 64, 1001};
    static const char *caps[2] = {NULL, "avx2"};
    float *x = malloc(sizeof(float) * 1001), *ref = malloc(sizeof(float) * 1001);
    float *y = malloc(sizeof(float) * 1001), *dt = malloc(sizeof(float) * 1001);
    float *dref = malloc(sizeof(float) * 1001);
    double worst = 0.0;
    for (int li = 0; li < 6; li++)
        for (int rep = 0; rep < 4; rep++) {
            const int64_t len = lens[li];
            const float cap = 0.5f + 7.0f * (float)rep;
            ra_random_normal(42, (uint64_t)(li * 4 + rep), 0, len, x);
            for (int64_t j = 0; j < len; j++)
                x[j] *= cap * (0.3f + (float)(j % 5)); /* both forms */
            x[0] = rep == 1 ? NAN : rep == 2 ? -INFINITY : x[0];
            memcpy(ref, x, sizeof(float) * (size_t)len);
            ra_scaled_tanh_scalar(ref, len, cap, dref);
            for (int ci = 0; ci < 2; ci++) {
                ra_simd_cap(caps[ci]);
                memcpy(y, x, sizeof(float) * (size_t)len);
                ra_scaled_tanh(y, len, cap, dt);
                for (int64_t j = 0; j < len; j++) /* a NaN's sign is free */
                    assert_true(isnan(ref[j])
                                    ? isnan(y[j]) && isnan(dt[j])
                                    : memcmp(&y[j], &ref[j], 4) == 0 &&
                                          memcmp(&dt[j], &dref[j], 4) == 0);
            }
            for (int64_t j = 0; j < len; j++) {
                if (isnan(x[j]) || isinf(x[j])) {
                    assert_true(isnan(x[j]) ? isnan(ref[j])
                                            : fabsf(ref[j] + cap) <=
                                                  1e-7f * cap);
                    continue;
                }
                const double t = tanh((double)x[j] / cap);
                const double e = fabs(ref[j] - cap * t) / (cap * fabs(t));
                worst = e > worst ? e : worst;
                assert_true(e <= 3e-7 || fabs(t) < 1e-30);
                assert_true(fabs(dref[j] - (1.0 - t * t)) <= 1e-6);
            }
        }
    ra_simd_cap(NULL);
    printf("# softcap: every path agrees bit for bit; worst relative error "
           "%.2e\n", worst);
    free(x);
    free(ref);
    free(y);
    free(dt);
    free(dref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_exp2_sweep),
        cmocka_unit_test(test_exp2_shifted),
        cmocka_unit_test(test_exp2_tails),
        cmocka_unit_test(test_max),
        cmocka_unit_test(test_finite_scans),
        cmocka_unit_test(test_additive_grad),
    };
    printf("# exp path: %s\n", ra_exp2_impl());
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
