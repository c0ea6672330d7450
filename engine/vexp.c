/* vexp.c: 2^x for the softmax pass, scalar, AVX2/FMA and AVX-512.
 *
 * Range reduction x = n + f with n = round(x), f in [-1/2, 1/2]; 2^f is the
 * degree-7 Taylor polynomial of exp(f ln 2) (simd.h; truncation below 1e-8
 * relative, so rounding dominates: about 1 ulp), 2^n goes straight into the
 * exponent bits. Arguments below -126 (including -inf) give 0: the softmax
 * only ever exponentiates x - max <= 0, where such terms are below fp32
 * resolution. The table that picks a path is in simd.c. */
#include "simd.h"

float ra_exp2_shift_sum_scalar(float *x, int64_t len, float shift)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < len; j++) {
        x[j] = ra_exp2_one(x[j] - shift);
        sum += x[j];
    }
    return sum;
}

#ifdef RA_HAVE_X86
__attribute__((target("avx2,fma")))
float ra_exp2_shift_sum_avx2(float *x, int64_t len, float shift)
{
    const __m256 vshift = _mm256_set1_ps(shift);
    const __m256 lo = _mm256_set1_ps(RA_EXP2_MIN);
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
        __m256 t = _mm256_sub_ps(_mm256_loadu_ps(x + j), vshift);
        __m256 keep = _mm256_cmp_ps(t, lo, _CMP_GE_OQ); /* false for -inf */
        __m256 r = _mm256_and_ps(ra_exp2_avx2(_mm256_max_ps(t, lo)), keep);
        _mm256_storeu_ps(x + j, r);
        acc = _mm256_add_ps(acc, r);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
                ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    return sum + ra_exp2_shift_sum_scalar(x + j, len - j, shift);
}

__attribute__((target("avx512f")))
float ra_exp2_shift_sum_avx512(float *x, int64_t len, float shift)
{
    const __m512 vshift = _mm512_set1_ps(shift);
    const __m512 lo = _mm512_set1_ps(RA_EXP2_MIN);
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
        __m512 t = _mm512_sub_ps(_mm512_loadu_ps(x + j), vshift);
        __mmask16 keep = _mm512_cmp_ps_mask(t, lo, _CMP_GE_OQ);
        t = _mm512_max_ps(t, lo);
        __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT |
                                               _MM_FROUND_NO_EXC);
        __m512 f = _mm512_sub_ps(t, n);
        __m512 p = _mm512_set1_ps(RA_EXP2_C7);
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(RA_EXP2_C6));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(RA_EXP2_C5));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(RA_EXP2_C4));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(RA_EXP2_C3));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(RA_EXP2_C2));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(RA_EXP2_C1));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
        __m512i e = _mm512_slli_epi32(
            _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)),
            23);
        __m512 r = _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
        _mm512_storeu_ps(x + j, r);
        acc = _mm512_add_ps(acc, r);
    }
    /* the tail (< 16) through the 8-wide path keeps the same arithmetic */
    return _mm512_reduce_add_ps(acc) +
           ra_exp2_shift_sum_avx2(x + j, len - j, shift);
}
#endif
