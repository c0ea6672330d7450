/* simd.c: the max and the tanhs (additive score, scaled tanh) of the
 * kernel, and the table that picks one path (scalar, AVX2/FMA, AVX-512)
 * for every vectorised helper, the way ggml's vec helpers do. The exp
 * paths are in vexp.c. */
#include <float.h>

#include "simd.h"

/* tanh(x) = 1 - 2 / (exp(2|x|) + 1), sign restored; |x| capped at 9, where
 * tanh is 1 to within 3e-8. Absolute error about 1e-7 everywhere. */
#define TANH_CAP 9.0f
#define TWO_LOG2E 2.88539008177792682f /* 2 log2(e) */

static inline float tanh_one(float x)
{
    float ax = fminf(fabsf(x), TANH_CAP);
    float e = ra_exp2_one(TWO_LOG2E * ax);
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

void ra_additive_grad_scalar(const float *a, const float *b, const float *w,
                             float ds, float *da, float *db, float *dw,
                             int64_t len)
{
    for (int64_t j = 0; j < len; j++) {
        const float th = tanh_one(a[j] + b[j]);
        const float u = ds * w[j] * fmaf(-th, th, 1.0f); /* as the wide paths */
        da[j] += u;
        db[j] += u;
        dw[j] = fmaf(ds, th, dw[j]);
    }
}

/* The scaled tanh c tanh(x / c), relative error about 1e-7 everywhere
 * (c times it is the score: an absolute error there is a relative one of
 * the weight): below SMALL_TANH in magnitude the odd polynomial
 * y (1 + y^2 P(y^2)), P fitted on [0, 0.625] (truncation 1.3e-8
 * relative); above it, tanh_one's 1 - 2 / (exp(2|y|) + 1). */
#define SMALL_TANH 0.625f
#define TANH_P0 (-0.333333260515971f)
#define TANH_P1 0.13332582376097474f
#define TANH_P2 (-0.0538273091180712f)
#define TANH_P3 0.020899182943591686f
#define TANH_P4 (-0.005968736375391161f)

static inline float tanh_small(float y)
{
    const float u = y * y;
    float p = TANH_P4;
    p = fmaf(p, u, TANH_P3);
    p = fmaf(p, u, TANH_P2);
    p = fmaf(p, u, TANH_P1);
    p = fmaf(p, u, TANH_P0);
    return fmaf(y * u, p, y);
}

void ra_scaled_tanh_scalar(float *x, int64_t len, float cap, float *dt)
{
    const float inv = 1.0f / cap;
    for (int64_t j = 0; j < len; j++) {
        const float y = x[j] * inv;
        const float th = fabsf(y) < SMALL_TANH ? tanh_small(y)
                         : isnan(y)            ? y
                                               : tanh_one(y);
        x[j] = cap * th;
        if (dt)
            dt[j] = fmaf(-th, th, 1.0f);
    }
}

float ra_max_scalar(const float *x, int64_t len)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; j++)
        mx = x[j] > mx ? x[j] : mx;
    return mx;
}

/* x, or 0 when it is NaN or inf. */
static inline float finite_or_zero(float x)
{
    return fabsf(x) <= FLT_MAX ? x : 0.0f;
}

float ra_sum_squares_scalar(const float *x, int64_t len)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < len; j++) {
        const float e = finite_or_zero(x[j]);
        sum += e * e;
    }
    return sum;
}

float ra_max_abs_scalar(const float *x, int64_t len)
{
    float mx = 0.0f;
    for (int64_t j = 0; j < len; j++) {
        const float e = fabsf(finite_or_zero(x[j]));
        mx = e > mx ? e : mx;
    }
    return mx;
}

#ifdef RA_HAVE_X86
/* The finite entries of 8 or 16 floats, the others 0 (|x| <= FLT_MAX
 * fails for NaN and inf). */
__attribute__((target("avx2,fma")))
static inline __m256 finite8(__m256 v)
{
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    return _mm256_and_ps(v, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX),
                                          _CMP_LE_OQ));
}

__attribute__((target("avx512f")))
static inline __m512 finite16(__m512 v)
{
    const __m512 a = _mm512_abs_ps(v);
    return _mm512_maskz_mov_ps(
        _mm512_cmp_ps_mask(a, _mm512_set1_ps(FLT_MAX), _CMP_LE_OQ), v);
}

__attribute__((target("avx2,fma")))
static float sum_squares_avx2(const float *x, int64_t len)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
        const __m256 v = finite8(_mm256_loadu_ps(x + j));
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    float lanes[8], sum = ra_sum_squares_scalar(x + j, len - j);
    _mm256_storeu_ps(lanes, acc);
    for (int i = 0; i < 8; i++)
        sum += lanes[i];
    return sum;
}

__attribute__((target("avx2,fma")))
static float max_abs_avx2(const float *x, int64_t len)
{
    __m256 acc = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int64_t j = 0;
    for (; j + 8 <= len; j += 8)
        acc = _mm256_max_ps(acc, _mm256_andnot_ps(
                                     sign, finite8(_mm256_loadu_ps(x + j))));
    float lanes[8], mx = ra_max_abs_scalar(x + j, len - j);
    _mm256_storeu_ps(lanes, acc);
    for (int i = 0; i < 8; i++)
        mx = lanes[i] > mx ? lanes[i] : mx;
    return mx;
}

__attribute__((target("avx512f")))
static float sum_squares_avx512(const float *x, int64_t len)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
        const __m512 v = finite16(_mm512_loadu_ps(x + j));
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    return _mm512_reduce_add_ps(acc) + sum_squares_avx2(x + j, len - j);
}

__attribute__((target("avx512f")))
static float max_abs_avx512(const float *x, int64_t len)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= len; j += 16)
        acc = _mm512_max_ps(acc, _mm512_abs_ps(finite16(_mm512_loadu_ps(x + j))));
    const float mx = _mm512_reduce_max_ps(acc),
                tail = max_abs_avx2(x + j, len - j);
    return tail > mx ? tail : mx;
}

__attribute__((target("avx2,fma")))
static float additive_score_avx2(const float *a, const float *b,
                                 const float *w, int64_t len)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), cap = _mm256_set1_ps(TANH_CAP);
    const __m256 two_log2e = _mm256_set1_ps(TWO_LOG2E);
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
        __m256 x = _mm256_add_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j));
        __m256 sx = _mm256_and_ps(x, sign);
        __m256 t = _mm256_mul_ps(_mm256_min_ps(_mm256_andnot_ps(sign, x), cap),
                                 two_log2e); /* 2|x| log2 e, in [0, 26] */
        __m256 ex = ra_exp2_avx2(t);
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
static void additive_grad_avx2(const float *a, const float *b, const float *w,
                               float ds, float *da, float *db, float *dw,
                               int64_t len)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), cap = _mm256_set1_ps(TANH_CAP);
    const __m256 two_log2e = _mm256_set1_ps(TWO_LOG2E);
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    const __m256 vds = _mm256_set1_ps(ds);
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
        __m256 x = _mm256_add_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j));
        __m256 sx = _mm256_and_ps(x, sign);
        __m256 t = _mm256_mul_ps(_mm256_min_ps(_mm256_andnot_ps(sign, x), cap),
                                 two_log2e);
        __m256 ex = ra_exp2_avx2(t);
        __m256 th = _mm256_or_ps(
            _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(ex, one))), sx);
        __m256 u = _mm256_mul_ps(_mm256_mul_ps(vds, _mm256_loadu_ps(w + j)),
                                 _mm256_fnmadd_ps(th, th, one));
        _mm256_storeu_ps(da + j, _mm256_add_ps(_mm256_loadu_ps(da + j), u));
        _mm256_storeu_ps(db + j, _mm256_add_ps(_mm256_loadu_ps(db + j), u));
        _mm256_storeu_ps(dw + j, _mm256_fmadd_ps(vds, th,
                                                 _mm256_loadu_ps(dw + j)));
    }
    ra_additive_grad_scalar(a + j, b + j, w + j, ds, da + j, db + j, dw + j,
                            len - j);
}

/* The scaled tanh of 8 lanes (ra_scaled_tanh_scalar's arithmetic; a NaN
 * stays NaN: min(cap, NaN) is NaN). */
__attribute__((target("avx2,fma")))
static inline __m256 tanh8(__m256 y)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 ay = _mm256_andnot_ps(sign, y);
    const __m256 t = _mm256_mul_ps(_mm256_min_ps(_mm256_set1_ps(TANH_CAP), ay),
                                   _mm256_set1_ps(TWO_LOG2E));
    const __m256 ex = ra_exp2_avx2(t);
    const __m256 big = _mm256_or_ps(
        _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f),
                                         _mm256_add_ps(ex, one))),
        _mm256_and_ps(y, sign));
    const __m256 u = _mm256_mul_ps(y, y);
    __m256 p = _mm256_set1_ps(TANH_P4);
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(TANH_P3));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(TANH_P2));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(TANH_P1));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(TANH_P0));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(y, u), p, y);
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ay, _mm256_set1_ps(
                                                  SMALL_TANH), _CMP_LT_OQ));
}

__attribute__((target("avx2,fma")))
static void scaled_tanh_avx2(float *x, int64_t len, float cap, float *dt)
{
    const __m256 vcap = _mm256_set1_ps(cap), inv = _mm256_set1_ps(1.0f / cap);
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t j = 0;
    for (; j + 8 <= len; j += 8) {
        const __m256 th = tanh8(_mm256_mul_ps(_mm256_loadu_ps(x + j), inv));
        _mm256_storeu_ps(x + j, _mm256_mul_ps(vcap, th));
        if (dt)
            _mm256_storeu_ps(dt + j, _mm256_fnmadd_ps(th, th, one));
    }
    ra_scaled_tanh_scalar(x + j, len - j, cap, dt ? dt + j : NULL);
}

/* tanh8 on 16 lanes. */
__attribute__((target("avx512f")))
static inline __m512 tanh16(__m512 y)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 ay = _mm512_abs_ps(y);
    const __m512 t = _mm512_mul_ps(_mm512_min_ps(_mm512_set1_ps(TANH_CAP), ay),
                                   _mm512_set1_ps(TWO_LOG2E));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT |
                                                 _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 e = _mm512_set1_ps(RA_EXP2_C7);
    e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(RA_EXP2_C6));
    e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(RA_EXP2_C5));
    e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(RA_EXP2_C4));
    e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(RA_EXP2_C3));
    e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(RA_EXP2_C2));
    e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(RA_EXP2_C1));
    e = _mm512_fmadd_ps(e, f, one);
    const __m512 ex = _mm512_mul_ps(e, _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23)));
    const __m512 mag = _mm512_sub_ps(
        one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(ex, one)));
    const __m512 big = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(mag),
        _mm512_and_si512(_mm512_castps_si512(y),
                         _mm512_set1_epi32((int)0x80000000u))));
    const __m512 u = _mm512_mul_ps(y, y);
    __m512 p = _mm512_set1_ps(TANH_P4);
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(TANH_P3));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(TANH_P2));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(TANH_P1));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(TANH_P0));
    const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(y, u), p, y);
    return _mm512_mask_mov_ps(
        big, _mm512_cmp_ps_mask(ay, _mm512_set1_ps(SMALL_TANH), _CMP_LT_OQ),
        small);
}

__attribute__((target("avx512f")))
static void scaled_tanh_avx512(float *x, int64_t len, float cap, float *dt)
{
    const __m512 vcap = _mm512_set1_ps(cap), inv = _mm512_set1_ps(1.0f / cap);
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
        const __m512 th = tanh16(_mm512_mul_ps(_mm512_loadu_ps(x + j), inv));
        _mm512_storeu_ps(x + j, _mm512_mul_ps(vcap, th));
        if (dt)
            _mm512_storeu_ps(dt + j, _mm512_fnmadd_ps(th, th, one));
    }
    scaled_tanh_avx2(x + j, len - j, cap, dt ? dt + j : NULL);
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
typedef void (*additive_grad_fn)(const float *, const float *, const float *,
                                 float, float *, float *, float *, int64_t);
typedef float (*reduce_fn)(const float *, int64_t);
typedef void (*scaled_tanh_fn)(float *, int64_t, float, float *);

/* One row per path; the additive score has no AVX-512 variant of its own. */
typedef struct {
    const char *name;
    exp2_fn exp2;
    max_fn max;
    additive_fn additive;
    additive_grad_fn additive_grad;
    reduce_fn sum_squares, max_abs;
    scaled_tanh_fn scaled_tanh;
} vec_impl;

static const vec_impl scalar_impl = {
    "scalar", ra_exp2_shift_sum_scalar, ra_max_scalar,
    ra_additive_score_scalar, ra_additive_grad_scalar, ra_sum_squares_scalar,
    ra_max_abs_scalar, ra_scaled_tanh_scalar};
#ifdef RA_HAVE_X86
static const vec_impl avx2_impl = {
    "avx2-fma", ra_exp2_shift_sum_avx2, max_avx2, additive_score_avx2,
    additive_grad_avx2, sum_squares_avx2, max_abs_avx2, scaled_tanh_avx2};
static const vec_impl avx512_impl = {
    "avx512f", ra_exp2_shift_sum_avx512, max_avx512, additive_score_avx2,
    additive_grad_avx2, sum_squares_avx512, max_abs_avx512, scaled_tanh_avx512};
#endif

/* The widest path the CPU has, at most the one named by cap. */
static const vec_impl *pick_impl(const char *cap)
{
    if (cap && strcmp(cap, "scalar") == 0)
        return &scalar_impl;
#ifdef RA_HAVE_X86
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f") &&
        !(cap && strcmp(cap, "avx2") == 0))
        return &avx512_impl;
    if (avx2)
        return &avx2_impl;
#endif
    return &scalar_impl;
}

static const vec_impl *active;

void ra_simd_cap(const char *name)
{
    __atomic_store_n(&active, pick_impl(name), __ATOMIC_RELEASE);
}

static const vec_impl *impl(void)
{
    /* Every thread computes the same answer, so a racing first call only
     * stores the same pointer twice. */
    const vec_impl *p = __atomic_load_n(&active, __ATOMIC_ACQUIRE);
    if (!p) {
        p = pick_impl(NULL);
        __atomic_store_n(&active, p, __ATOMIC_RELEASE);
    }
    return p;
}

float ra_exp2_shift_sum(float *x, int64_t len, float shift)
{
    return impl()->exp2(x, len, shift);
}

float ra_max(const float *x, int64_t len) { return impl()->max(x, len); }

float ra_sum_squares(const float *x, int64_t len)
{
    return impl()->sum_squares(x, len);
}

float ra_max_abs(const float *x, int64_t len)
{
    return impl()->max_abs(x, len);
}

float ra_additive_score(const float *a, const float *b, const float *w,
                        int64_t len)
{
    return impl()->additive(a, b, w, len);
}

void ra_additive_grad(const float *a, const float *b, const float *w,
                      float ds, float *da, float *db, float *dw, int64_t len)
{
    impl()->additive_grad(a, b, w, ds, da, db, dw, len);
}

void ra_scaled_tanh(float *x, int64_t len, float cap, float *dt)
{
    impl()->scaled_tanh(x, len, cap, dt);
}

const char *ra_exp2_impl(void) { return impl()->name; }
