/* vexp.c: 2^x for the softmax pass, scalar, AVX2/FMA and AVX-512.
 *
 * Range reduction x = n + f with n = round(x), f in [-1/2, 1/2]; 2^f is the
 * degree-7 Taylor polynomial of exp(f ln 2) (simd.h; truncation below 1e-8
 * relative, so rounding dominates: about 1 ulp), 2^n goes straight into the
 * exponent bits. Arguments below -126 (including -inf) give 0: the softmax
 * only ever exponentiates x - max <= 0, where such terms are below fp32
 * resolution. The table that picks a path is in simd.c. The bf16 pass
 * (below) writes its weights rounded to bf16 with a shorter polynomial. */
#include "bf16.h"
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
        /* p 2^n by scalef, exact where kept (n >= -126): the same bits
         * as building 2^n in the exponent field, in one instruction */
        __m512 r = _mm512_maskz_scalef_ps(keep, p, n);
        _mm512_storeu_ps(x + j, r);
        acc = _mm512_add_ps(acc, r);
    }
    /* the tail (< 16) through the 8-wide path keeps the same arithmetic */
    return _mm512_reduce_add_ps(acc) +
           ra_exp2_shift_sum_avx2(x + j, len - j, shift);
}
#endif

/* The softmax pass of a bf16 call (simd.h: ra_exp2_shift_sum_bf16). Its
 * weights are rounded to bf16 (8 significant bits) before P V, so 2^f
 * needs only the degree-4 polynomial below, fitted for relative error on
 * [-1/2, 1/2] (at most 2.9e-6, evaluated in fp32): three FMAs fewer than
 * the fp32 pass, and the weights go out rounded, so that P V packs
 * nothing. Every path rounds to nearest even the same way (bf16.h), and
 * the results are never subnormal (below 2^-126 they are 0), so the
 * AVX512_BF16 conversion gives the same bits as the integer one. */
#define B16_C1 0.6931241750717163f
#define B16_C2 0.2402409017086029f
#define B16_C3 0.055906590074300766f
#define B16_C4 0.00958329439163208f

float ra_exp2_shift_sum_bf16_scalar(const float *x, int64_t len,
                                    float shift, uint16_t *p, float *mx)
{
    float sum = 0.0f, top = -INFINITY;
    for (int64_t j = 0; j < len; j++) {
        const float t = x[j] - shift;
        float e = 0.0f;
        if (t >= RA_EXP2_MIN) {
            const float n = nearbyintf(t), f = t - n;
            float q = fmaf(B16_C4, f, B16_C3);
            q = fmaf(q, f, B16_C2);
            q = fmaf(q, f, B16_C1);
            q = fmaf(q, f, 1.0f);
            e = ldexpf(q, (int)n);
        }
        p[j] = ra_bf16_of(e);
        sum += e;
        top = x[j] > top ? x[j] : top;
    }
    *mx = top;
    return sum;
}

#ifdef RA_HAVE_X86
/* 2^(x - shift) of 8 lanes by the degree-4 polynomial; 0 below
 * RA_EXP2_MIN and for -inf. */
__attribute__((target("avx2,fma")))
static inline __m256 exp2_b16_avx2(__m256 x, __m256 shift)
{
    const __m256 lo = _mm256_set1_ps(RA_EXP2_MIN);
    const __m256 t = _mm256_sub_ps(x, shift);
    const __m256 keep = _mm256_cmp_ps(t, lo, _CMP_GE_OQ);
    const __m256 tc = _mm256_max_ps(t, lo);
    const __m256 n = _mm256_round_ps(tc, _MM_FROUND_TO_NEAREST_INT |
                                             _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(tc, n);
    __m256 q = _mm256_fmadd_ps(_mm256_set1_ps(B16_C4), f,
                               _mm256_set1_ps(B16_C3));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(B16_C2));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(B16_C1));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(q, _mm256_castsi256_ps(e)), keep);
}

/* ra_bf16_of of 8 finite lanes >= 0, in the low halves of 32-bit lanes. */
__attribute__((target("avx2,fma")))
static inline __m256i bf16_bits_avx2(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16),
                                         _mm256_set1_epi32(1));
    return _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd),
        16);
}

/* The sum of 8 lanes in a fixed order. */
__attribute__((target("avx2,fma")))
static inline float sum8(__m256 v)
{
    float l[8];
    _mm256_storeu_ps(l, v);
    return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

__attribute__((target("avx2,fma")))
float ra_exp2_shift_sum_bf16_avx2(const float *x, int64_t len, float shift,
                                  uint16_t *p, float *mx)
{
    const __m256 vshift = _mm256_set1_ps(shift);
    __m256 acc = _mm256_setzero_ps(), top = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
        const __m256 xa = _mm256_loadu_ps(x + j);
        const __m256 xb = _mm256_loadu_ps(x + j + 8);
        const __m256 a = exp2_b16_avx2(xa, vshift);
        const __m256 b = exp2_b16_avx2(xb, vshift);
        top = _mm256_max_ps(top, _mm256_max_ps(xa, xb));
        acc = _mm256_add_ps(acc, _mm256_add_ps(a, b));
        /* packus interleaves 128-bit halves: put them back in order */
        const __m256i h = _mm256_packus_epi32(bf16_bits_avx2(a),
                                              bf16_bits_avx2(b));
        _mm256_storeu_si256((__m256i *)(p + j),
                            _mm256_permute4x64_epi64(h, 0xd8));
    }
    const float sum = sum8(acc) + ra_exp2_shift_sum_bf16_scalar(
                                      x + j, len - j, shift, p + j, mx);
    float l[8];
    _mm256_storeu_ps(l, top);
    for (int i = 0; i < 8; i++)
        *mx = l[i] > *mx ? l[i] : *mx;
    return sum;
}

/* 2^(x - shift) of 16 lanes by the degree-4 polynomial, scaled by scalef
 * as in the fp32 pass. */
__attribute__((target("avx512f")))
static inline __m512 exp2_b16_avx512(__m512 x, __m512 shift)
{
    const __m512 t = _mm512_sub_ps(x, shift);
    const __mmask16 keep = _mm512_cmp_ps_mask(
        t, _mm512_set1_ps(RA_EXP2_MIN), _CMP_GE_OQ);
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT |
                                                 _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(B16_C4), f,
                               _mm512_set1_ps(B16_C3));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(B16_C2));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(B16_C1));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, q, n);
}

/* The tail of the 16-lane path: the 8-lane one, and the max of both. */
__attribute__((target("avx512f")))
static float tail_bf16(const float *x, int64_t len, float shift,
                       uint16_t *p, float *mx, __m512 acc, __m512 top)
{
    const float sum = ra_exp2_shift_sum_bf16_avx2(x, len, shift, p, mx);
    const float t = _mm512_reduce_max_ps(top);
    *mx = t > *mx ? t : *mx;
    return _mm512_reduce_add_ps(acc) + sum;
}

__attribute__((target("avx512f,avx512bf16")))
static float exp2_bf16_cvt(const float *x, int64_t len, float shift,
                           uint16_t *p, float *mx)
{
    const __m512 vshift = _mm512_set1_ps(shift);
    __m512 acc = _mm512_setzero_ps(), top = _mm512_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
        const __m512 v = _mm512_loadu_ps(x + j);
        const __m512 e = exp2_b16_avx512(v, vshift);
        top = _mm512_max_ps(top, v);
        acc = _mm512_add_ps(acc, e);
        _mm256_storeu_si256((__m256i *)(p + j),
                            (__m256i)_mm512_cvtneps_pbh(e));
    }
    return tail_bf16(x + j, len - j, shift, p + j, mx, acc, top);
}
#endif

typedef float (*exp2_bf16_fn)(const float *, int64_t, float, uint16_t *,
                              float *);

/* The path for each name ra_exp2_impl() gives (ra_simd_cap included):
 * AVX-512's needs AVX512_BF16's conversion too, else the AVX2 path runs
 * (the same bits either way). */
typedef struct {
    const char *name; /* ra_exp2_impl()'s pointer, once picked */
    exp2_bf16_fn fn;
} bf16_path;

static const bf16_path *pick_bf16(const char *name)
{
    static bf16_path rows[3];
    int i = 0;
    exp2_bf16_fn fn = ra_exp2_shift_sum_bf16_scalar;
#ifdef RA_HAVE_X86
    if (strcmp(name, "avx512f") == 0) {
        i = 1;
        fn = __builtin_cpu_supports("avx512bf16")
                 ? exp2_bf16_cvt : ra_exp2_shift_sum_bf16_avx2;
    } else if (strcmp(name, "avx2-fma") == 0) {
        i = 2;
        fn = ra_exp2_shift_sum_bf16_avx2;
    }
#endif
    /* every thread writes the same values */
    __atomic_store_n(&rows[i].fn, fn, __ATOMIC_RELAXED);
    __atomic_store_n(&rows[i].name, name, __ATOMIC_RELEASE);
    return &rows[i];
}

float ra_exp2_shift_sum_bf16(const float *x, int64_t len, float shift,
                             uint16_t *p, float *mx)
{
    static const bf16_path *last;
    const char *name = ra_exp2_impl();
    const bf16_path *path = __atomic_load_n(&last, __ATOMIC_ACQUIRE);
    if (!path || __atomic_load_n(&path->name, __ATOMIC_ACQUIRE) != name) {
        path = pick_bf16(name);
        __atomic_store_n(&last, path, __ATOMIC_RELEASE);
    }
    return path->fn(x, len, shift, p, mx);
}
