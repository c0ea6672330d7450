/* simd.h: the vectorised helpers of the kernel (internal contract).
 *
 * Each helper has a portable scalar path and AVX2/FMA and AVX-512 paths;
 * one table, picked once per process, says which runs (simd.c). All paths
 * compute the same polynomials, so they agree to the last bit per element.
 * The exp polynomial lives here so that the softmax (vexp.c) and the tanh
 * of the additive score (simd.c) share it.
 */
#ifndef RA_SIMD_H
#define RA_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RA_HAVE_X86 1
#endif

/* ln(2)^k / k! for k = 1..7: 2^f = exp(f ln 2) for f in [-1/2, 1/2] with a
 * truncation error below 1e-8 relative. */
#define RA_EXP2_C1 0.693147180559945309f
#define RA_EXP2_C2 0.240226506959100712f
#define RA_EXP2_C3 0.0555041086648215800f
#define RA_EXP2_C4 0.00961812910762847716f
#define RA_EXP2_C5 0.00133335581464284434f
#define RA_EXP2_C6 0.000154035303933816099f
#define RA_EXP2_C7 0.0000152527338040598403f

/* Arguments below this give 0 (2^-126 is the smallest normal float). */
#define RA_EXP2_MIN (-126.0f)

/* 2^x, 0 below RA_EXP2_MIN (and for -inf or NaN). */
static inline float ra_exp2_one(float x)
{
    if (!(x >= RA_EXP2_MIN))
        return 0.0f;
    float n = nearbyintf(x);
    float f = x - n;
    float p = RA_EXP2_C7;
    p = fmaf(p, f, RA_EXP2_C6);
    p = fmaf(p, f, RA_EXP2_C5);
    p = fmaf(p, f, RA_EXP2_C4);
    p = fmaf(p, f, RA_EXP2_C3);
    p = fmaf(p, f, RA_EXP2_C2);
    p = fmaf(p, f, RA_EXP2_C1);
    p = fmaf(p, f, 1.0f);
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

#ifdef RA_HAVE_X86
/* 2^t for t >= RA_EXP2_MIN, 8 lanes: the same polynomial. */
__attribute__((target("avx2,fma")))
static inline __m256 ra_exp2_avx2(__m256 t)
{
    __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(t, n);
    __m256 p = _mm256_set1_ps(RA_EXP2_C7);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(RA_EXP2_C6));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(RA_EXP2_C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(RA_EXP2_C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(RA_EXP2_C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(RA_EXP2_C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(RA_EXP2_C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* The wide paths of the exp (vexp.c), for the table in simd.c. */
float ra_exp2_shift_sum_avx2(float *x, int64_t len, float shift);
float ra_exp2_shift_sum_avx512(float *x, int64_t len, float shift);
#endif

/* x[j] = 2^(x[j] - shift) for j < len, returning the sum of the results:
 * the exponentials of the softmax pass. Inputs of -inf give 0. */
float ra_exp2_shift_sum(float *x, int64_t len, float shift);
/* The portable path, exposed for tests. */
float ra_exp2_shift_sum_scalar(float *x, int64_t len, float shift);

/* The same pass for a bf16 call, fused with the row's max: p[j] =
 * 2^(x[j] - shift) rounded to bf16 (nearest even) for j < len, x
 * unchanged, *mx = the largest x[j] (-inf for len 0), returning the sum
 * of the unrounded values; 2^f within 3e-6 relative (bf16 keeps 2^-8),
 * every path the same bits (vexp.c). Inputs of -inf give 0; an
 * x[j] - shift above 127 gives a meaningless p and sum (the caller
 * checks *mx and runs the pass again from a larger shift). */
float ra_exp2_shift_sum_bf16(const float *x, int64_t len, float shift,
                             uint16_t *p, float *mx);
/* The paths, exposed for tests. */
float ra_exp2_shift_sum_bf16_scalar(const float *x, int64_t len,
                                    float shift, uint16_t *p, float *mx);
#ifdef RA_HAVE_X86
float ra_exp2_shift_sum_bf16_avx2(const float *x, int64_t len, float shift,
                                  uint16_t *p, float *mx);
#endif

/* The additive score of one (query, key) pair from their projections:
 * sum over j < len of w[j] * tanh(a[j] + b[j]) (absolute error ~1e-7 per
 * term). */
float ra_additive_score(const float *a, const float *b, const float *w,
                        int64_t len);
float ra_additive_score_scalar(const float *a, const float *b,
                               const float *w, int64_t len);

/* The additive score's derivative terms of one pair with weight ds on its
 * score: with t = tanh(a[j] + b[j]) and u = ds w[j] (1 - t^2),
 * da[j] += u, db[j] += u, dw[j] += ds t for j < len (the same tanh as
 * ra_additive_score). */
void ra_additive_grad(const float *a, const float *b, const float *w,
                      float ds, float *da, float *db, float *dw, int64_t len);
void ra_additive_grad_scalar(const float *a, const float *b, const float *w,
                             float ds, float *da, float *db, float *dw,
                             int64_t len);

/* The scaled tanh of x[0..len): x[j] = cap tanh(x[j] / cap), cap > 0
 * (relative error about 2e-7; NaN stays NaN, +-inf gives +-cap within
 * 1e-7), and when dt is not NULL its derivative dt[j] = 1 - tanh^2. */
void ra_scaled_tanh(float *x, int64_t len, float cap, float *dt);
void ra_scaled_tanh_scalar(float *x, int64_t len, float cap, float *dt);

/* The largest of x[0..len), -inf for len 0. */
float ra_max(const float *x, int64_t len);
float ra_max_scalar(const float *x, int64_t len);

/* Over the finite entries of x[0..len) (NaN and inf count as 0): the
 * sum of their squares in float (inf when it overflows), and the largest
 * |x| (exact). The input range checks' scans (range.h). */
float ra_sum_squares(const float *x, int64_t len);
float ra_sum_squares_scalar(const float *x, int64_t len);
float ra_max_abs(const float *x, int64_t len);
float ra_max_abs_scalar(const float *x, int64_t len);

/* Name of the path in use: "avx512f", "avx2-fma" or "scalar". */
const char *ra_exp2_impl(void);

/* Picks the path again with a cap: "scalar" or "avx2" (to test or compare
 * the narrower paths); NULL or anything else: the widest the CPU has. The
 * command line passes its RA_EXP variable here (the library reads no
 * environment); call it before any kernel runs. */
void ra_simd_cap(const char *name);

#endif /* RA_SIMD_H */
