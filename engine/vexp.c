/* vexp.c: 2^x for the softmax pass, AVX2/FMA with a portable fallback.
 *
 * Range reduction x = n + f with n = round(x), f in [-1/2, 1/2]; 2^f is the
 * degree-7 Taylor polynomial of exp(f ln 2) (truncation below 1e-8 relative,
 * so rounding dominates: about 1 ulp), 2^n goes straight into the exponent
 * bits. Arguments below -126 (including -inf) give 0: the softmax only ever
 * exponentiates x - max <= 0, where such terms are below fp32 resolution. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RA_HAVE_X86 1
#endif

/* ln(2)^k / k! for k = 1..7 */
#define C1 0.693147180559945309f
#define C2 0.240226506959100712f
#define C3 0.0555041086648215800f
#define C4 0.00961812910762847716f
#define C5 0.00133335581464284434f
#define C6 0.000154035303933816099f
#define C7 0.0000152527338040598403f

static inline float exp2_one(float x)
{
    if (!(x >= -126.0f))
        return 0.0f;
    float n = nearbyintf(x);
    float f = x - n;
    float p = C7;
    p = fmaf(p, f, C6);
    p = fmaf(p, f, C5);
    p = fmaf(p, f, C4);
    p = fmaf(p, f, C3);
    p = fmaf(p, f, C2);
    p = fmaf(p, f, C1);
    p = fmaf(p, f, 1.0f);
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

float ra_exp2_shift_sum_scalar(float *x, int64_t len, float shift)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < len; j++) {
        x[j] = exp2_one(x[j] - shift);
        sum += x[j];
    }
    return sum;
}

#ifdef RA_HAVE_X86
/* 2^t for t >= -126 (8 lanes): the polynomial and the exponent bits. */
__attribute__((target("avx2,fma")))
static inline __m256 exp2_avx2(__m256 t)
{
    __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(t, n);
    __m256 p = _mm256_set1_ps(C7);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(C6));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma")))
static float exp2_shift_sum_avx2(float *x, int64_t len, float shift)
{
    const __m256 vshift = _mm256_set1_ps(shift);
    const __m256 lo = _mm256_set1_ps(-126.0f);
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
        __m256 t = _mm256_sub_ps(_mm256_loadu_ps(x + j), vshift);
        __m256 keep = _mm256_cmp_ps(t, lo, _CMP_GE_OQ); /* false for -inf */
        __m256 r = _mm256_and_ps(exp2_avx2(_mm256_max_ps(t, lo)), keep);
        _mm256_storeu_ps(x + j, r);
        acc = _mm256_add_ps(acc, r);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
                ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    return sum + ra_exp2_shift_sum_scalar(x + j, len - j, shift);
}
#endif

/* tanh(x) = 1 - 2 / (exp(2|x|) + 1), sign restored; |x| capped at 9, where
 * tanh is 1 to within 3e-8. Absolute error about 1e-7 everywhere. */
static inline float tanh_one(float x)
{
    float ax = fminf(fabsf(x), 9.0f);
    float e = exp2_one(2.0f * 1.44269504088896341f * ax);
    return copysignf(1.0f - 2.0f / (e + 1.0f), x);
}

float ra_additive_score_scalar(const float *a, const float *b,
                               const float *w, int64_t len)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < len; j++)
        sum += w[j] * tanh_one(a[j] + b[j]);
    return sum;
}

float ra_max_scalar(const float *x, int64_t len)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; j++)
        mx = x[j] > mx ? x[j] : mx;
    return mx;
}

#ifdef RA_HAVE_X86
__attribute__((target("avx2,fma")))
static float additive_score_avx2(const float *a, const float *b,
                                 const float *w, int64_t len)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), cap = _mm256_set1_ps(9.0f);
    const __m256 two_log2e = _mm256_set1_ps(2.0f * 1.44269504088896341f);
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
        __m256 x = _mm256_add_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j));
        __m256 sx = _mm256_and_ps(x, sign);
        __m256 t = _mm256_mul_ps(_mm256_min_ps(_mm256_andnot_ps(sign, x), cap),
                                 two_log2e); /* 2|x| log2 e, in [0, 26] */
        __m256 ex = exp2_avx2(t);
        __m256 th = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(ex, one)));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_or_ps(th, sx), acc);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
                ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    return sum + ra_additive_score_scalar(a + j, b + j, w + j, len - j);
}

__attribute__((target("avx2,fma")))
static float max_avx2(const float *x, int64_t len)
{
    __m256 acc = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= len; j += 8)
        acc = _mm256_max_ps(acc, _mm256_loadu_ps(x + j));
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    float mx = ra_max_scalar(x + j, len - j);
    for (int i = 0; i < 8; i++)
        mx = lanes[i] > mx ? lanes[i] : mx;
    return mx;
}

__attribute__((target("avx512f")))
static float exp2_shift_sum_avx512(float *x, int64_t len, float shift)
{
    const __m512 vshift = _mm512_set1_ps(shift);
    const __m512 lo = _mm512_set1_ps(-126.0f);
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
        __m512 t = _mm512_sub_ps(_mm512_loadu_ps(x + j), vshift);
        __mmask16 keep = _mm512_cmp_ps_mask(t, lo, _CMP_GE_OQ);
        t = _mm512_max_ps(t, lo);
        __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT |
                                               _MM_FROUND_NO_EXC);
        __m512 f = _mm512_sub_ps(t, n);
        __m512 p = _mm512_set1_ps(C7);
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(C6));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(C5));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(C4));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(C3));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(C2));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(C1));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
        __m512i e = _mm512_slli_epi32(
            _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)),
            23);
        __m512 r = _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
        _mm512_storeu_ps(x + j, r);
        acc = _mm512_add_ps(acc, r);
    }
    /* the tail (< 16) through the 8-wide path keeps the same arithmetic */
    return _mm512_reduce_add_ps(acc) + exp2_shift_sum_avx2(x + j, len - j, shift);
}

__attribute__((target("avx512f")))
static float max_avx512(const float *x, int64_t len)
{
    __m512 acc = _mm512_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 16 <= len; j += 16)
        acc = _mm512_max_ps(acc, _mm512_loadu_ps(x + j));
    float mx = _mm512_reduce_max_ps(acc), tail = max_avx2(x + j, len - j);
    return tail > mx ? tail : mx;
}
#endif

typedef float (*exp2_fn)(float *, int64_t, float);
typedef float (*max_fn)(const float *, int64_t);
typedef float (*additive_fn)(const float *, const float *, const float *,
                             int64_t);

/* The table of paths, picked once: AVX-512 when the CPU has it, else
 * AVX2/FMA, else scalar; RA_EXP=avx2 or RA_EXP=scalar caps the choice (to
 * test or compare the narrower paths). All three compute the same
 * polynomial, so they agree to the last bit on each element. */
typedef struct {
    const char *name;
    exp2_fn exp2;
    max_fn max;
    additive_fn additive;
} vec_impl;

static const vec_impl scalar_impl = {"scalar", ra_exp2_shift_sum_scalar,
                                     ra_max_scalar, ra_additive_score_scalar};
#ifdef RA_HAVE_X86
static const vec_impl avx2_impl = {"avx2-fma", exp2_shift_sum_avx2, max_avx2,
                                   additive_score_avx2};
static const vec_impl avx512_impl = {"avx512f", exp2_shift_sum_avx512,
                                     max_avx512, additive_score_avx2};
#endif

static const vec_impl *pick_impl(void)
{
    const char *env = getenv("RA_EXP");
    if (env && strcmp(env, "scalar") == 0)
        return &scalar_impl;
#ifdef RA_HAVE_X86
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f") &&
        !(env && strcmp(env, "avx2") == 0))
        return &avx512_impl;
    if (avx2)
        return &avx2_impl;
#endif
    return &scalar_impl;
}

static const vec_impl *active;

static const vec_impl *impl(void)
{
    /* Every thread computes the same answer, so a racing first call only
     * stores the same pointer twice. */
    const vec_impl *p = __atomic_load_n(&active, __ATOMIC_ACQUIRE);
    if (!p) {
        p = pick_impl();
        __atomic_store_n(&active, p, __ATOMIC_RELEASE);
    }
    return p;
}

float ra_exp2_shift_sum(float *x, int64_t len, float shift)
{
    return impl()->exp2(x, len, shift);
}

float ra_max(const float *x, int64_t len) { return impl()->max(x, len); }

float ra_additive_score(const float *a, const float *b, const float *w,
                        int64_t len)
{
    return impl()->additive(a, b, w, len);
}

const char *ra_exp2_impl(void) { return impl()->name; }
