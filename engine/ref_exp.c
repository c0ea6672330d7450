/* ref_exp.c: exp of an array of doubles for the fp64 reference passes of
 * verify (ref_block.h), written so that the compiler vectorises it: the
 * check's exp count equals its pair count, and libm's scalar exp would
 * cost more than its products. Independent of the kernels' fp32 exp
 * (vexp.c): reduction by ln 2 in two parts (Cody and Waite) and the
 * Taylor polynomial of degree 12 on |r| <= ln(2)/2, whose truncation
 * (|r|^13 / 13! < 2e-16) and rounding keep it within a few ulp of libm. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ref_block.h"

/* Below EXP_FLOOR the result is under 2^-1021: returned as 0 (an attention
 * weight that small adds nothing a double can hold beside the others);
 * above EXP_CEIL, exp(EXP_CEIL) (the passes' arguments are a score minus
 * its row's max or LSE: at most a rounding above 0). */
#define EXP_FLOOR (-708.0)
#define EXP_CEIL 709.0

/* The loop, compiled once per instruction set below. Without trapping
 * maths the clamps and the select are branch-free and the loop vectorises
 * (the arguments are finite or -inf; nothing here may trap). */
static inline __attribute__((always_inline)) void exp_loop(double *x,
                                                           int64_t n)
{
    const double log2e = 0x1.71547652b82fep0, shift = 0x1.8p52;
    const double ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
    int64_t shift_bits;
    memcpy(&shift_bits, &shift, sizeof shift_bits);
    for (int64_t i = 0; i < n; i++) {
        const double v0 = x[i];
        const double lo = v0 > EXP_FLOOR ? v0 : EXP_FLOOR;
        const double v = lo < EXP_CEIL ? lo : EXP_CEIL;
        const double t = v * log2e + shift; /* k in the low bits */
        const double k = t - shift;
        const double r = (v - k * ln2_hi) - k * ln2_lo;
        double p = 1.0 / 479001600.0;
        p = p * r + 1.0 / 39916800.0;
        p = p * r + 1.0 / 3628800.0;
        p = p * r + 1.0 / 362880.0;
        p = p * r + 1.0 / 40320.0;
        p = p * r + 1.0 / 5040.0;
        p = p * r + 1.0 / 720.0;
        p = p * r + 1.0 / 120.0;
        p = p * r + 1.0 / 24.0;
        p = p * r + 1.0 / 6.0;
        p = p * r + 0.5;
        p = p * r + 1.0;
        p = p * r + 1.0;
        int64_t bits;
        memcpy(&bits, &t, sizeof bits);
        const int64_t e = (bits - shift_bits + 1023) << 52;
        double scale;
        memcpy(&scale, &e, sizeof scale);
        const double y = p * scale;
        x[i] = v0 > EXP_FLOOR ? y : 0.0;
    }
}

#define NO_TRAP optimize("no-trapping-math")

__attribute__((NO_TRAP)) static void exp_base(double *x, int64_t n)
{
    exp_loop(x, n);
}

__attribute__((NO_TRAP, target("avx2,fma")))
static void exp_avx2(double *x, int64_t n)
{
    exp_loop(x, n);
}

__attribute__((NO_TRAP, target("avx512f,prefer-vector-width=512")))
static void exp_avx512(double *x, int64_t n)
{
    exp_loop(x, n);
}

void ra_ref_exp(double *x, int64_t n)
{
    static void (*fn)(double *, int64_t);
    if (!fn)
        fn = __builtin_cpu_supports("avx512f") ? exp_avx512
             : __builtin_cpu_supports("avx2") &&
                     __builtin_cpu_supports("fma") ? exp_avx2
                                                   : exp_base;
    fn(x, n);
}
