/* range.c: see range.h. Every bound is computed in double, where none of
 * these products can overflow (float32 inputs stay below 2^128). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compare.h"
#include "internal.h"
#include "kernel.h"
#include "range.h"
#include "simd.h"

/* The kernel's float32 limit: scores, norm terms and accumulators must
 * stay below it. A factor 16 under FLT_MAX leaves room for the roundings
 * and the sums of the fp32 kernel (max shifts, P V over many tiles, the
 * LSE merge). */
#define SAFE_MAX ((double)FLT_MAX / 16.0)

/* x, or 0 when it is NaN or inf (NaN fails the compare). */
static inline float finite_or_zero(float x)
{
    return fabsf(x) <= FLT_MAX ? x : 0.0f;
}

/* The sum of the squares of the finite entries of x[0..dim), in double,
 * in eight lanes combined at the end: the rows too large for float. */
static double row_squares(const float *x, int64_t dim)
{
    double lane[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t d = 0;
    for (; d + 8 <= dim; d += 8)
        for (int l = 0; l < 8; l++) {
            const double e = finite_or_zero(x[d + l]);
            lane[l] += e * e;
        }
    for (; d < dim; d++) {
        const double e = finite_or_zero(x[d]);
        lane[0] += e * e;
    }
    double ss = 0.0;
    for (int l = 0; l < 8; l++)
        ss += lane[l];
    return ss;
}

/* The squared norm of a row of dim floats, summed in float by the vector
 * path: its relative error (a few ulps times dim) is far inside the
 * factor 16 that SAFE_MAX keeps from FLT_MAX. Trusted below 2^100; above
 * that, or on overflow, the row is summed again in double. */
static double row_norm2(const float *x, int64_t dim)
{
    const float ss = ra_sum_squares(x, dim);
    return ss < 0x1p100f ? (double)ss : row_squares(x, dim);
}

/* The largest squared norm of `rows` rows of `dim` floats. */
static double scan_norms(const float *x, int64_t rows, int64_t dim)
{
    double mx = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const double ss = row_norm2(x + r * dim, dim);
        mx = ss > mx ? ss : mx;
    }
    return mx;
}

/* The largest norm of `rows` rows of `dim` floats (norm = 1), or the
 * largest |x| of their entries (norm = 0), on up to `threads` threads,
 * a chunk of rows each (a maximum: the same whatever the split). */
static double max_over_rows(const float *x, int64_t rows, int64_t dim,
                            int norm, int threads)
{
    double mx = 0.0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : mx)
    for (int t = 0; t < threads; t++) {
        const int64_t a = rows * t / threads, z = rows * (t + 1) / threads;
        const double v = norm ? scan_norms(x + a * dim, z - a, dim)
                              : (double)ra_max_abs(x + a * dim, (z - a) * dim);
        mx = v > mx ? v : mx;
    }
    return norm ? sqrt(mx) : mx;
}

ra_input_bounds ra_input_bounds_of(const ra_shape *s, int64_t n, int64_t m,
                                   const float *q, const float *k,
                                   const float *v, int threads)
{
    const int64_t rows = s->B * m * s->G;
    threads = threads > 0 ? threads : 1;
    return (ra_input_bounds){
        max_over_rows(q, s->B * n * s->H, s->D, 1, threads),
        max_over_rows(k, rows, ra_shape_dk(s), 1, threads),
        max_over_rows(v, rows, s->Dv, 0, threads)};
}

int64_t ra_first_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return -1;
}

ra_status ra_check_finite(const char *what, const float *x, int64_t n)
{
    const int64_t i = x ? ra_first_nonfinite(x, n) : -1;
    if (i < 0)
        return RA_OK;
    return ra_error_set(RA_ERR_INPUT, "%s[%lld] = %g is not finite", what,
                        (long long)i, (double)x[i]);
}

/* The additive score: |score| <= sum |w_v|; the projections W_q q and
 * W_k k are bounded by the largest weight row norm times the input norm. */
static ra_status check_additive(const ra_shape *s, const ra_additive *ad,
                                const ra_input_bounds *b)
{
    const int64_t Dk = ra_shape_dk(s);
    ra_status st = ra_check_finite("score additive: weight w_q", ad->w_q,
                                   ad->A * s->D);
    if (st == RA_OK)
        st = ra_check_finite("score additive: weight w_k", ad->w_k,
                             ad->A * Dk);
    if (st == RA_OK)
        st = ra_check_finite("score additive: weight w_v", ad->w_v, ad->A);
    if (st != RA_OK)
        return st;
    double wv = 0.0;
    for (int64_t a = 0; a < ad->A; a++)
        wv += fabs((double)ad->w_v[a]);
    const double pq = max_over_rows(ad->w_q, ad->A, s->D, 1, 1) * b->q_norm;
    const double pk = max_over_rows(ad->w_k, ad->A, Dk, 1, 1) * b->k_norm;
    if (wv * M_LOG2E > SAFE_MAX)
        return ra_error_set(RA_ERR_INPUT, "score additive: sum |w_v| = %.3g "
                            "gives scores beyond the kernel's float32 limit "
                            "(%.3g)", wv, SAFE_MAX);
    if (pq > SAFE_MAX || pk > SAFE_MAX)
        return ra_error_set(RA_ERR_INPUT, "score additive: the projections "
                            "W_q q (up to %.3g) or W_k k (up to %.3g) are "
                            "beyond the kernel's float32 limit (%.3g)", pq, pk,
                            SAFE_MAX);
    return RA_OK;
}

/* The dot and Gaussian scores: alpha q.k in fp32 with |q.k| <= |q| |k|,
 * and for the Gaussian the norm terms |q|^2 and |k|^2 / (2 sigma^2). */
static ra_status check_product(const ra_shape *s, const ra_params *p,
                               const ra_input_bounds *b)
{
    const int gauss = p->num.score == RA_SCORE_GAUSSIAN;
    const double factor = gauss ? 1.0 / (p->num.sigma * p->num.sigma)
                                : fabs(ra_params_scale(p, s));
    const double alpha = factor * M_LOG2E; /* base-2 scores */
    if (!(alpha <= SAFE_MAX))
        return gauss ? ra_error_set(RA_ERR_ARG,
                                    "score gaussian: sigma = %.3g "
                                    "makes 1/sigma^2 = %.3g, beyond the "
                                    "kernel's float32 limit (%.3g)",
                                    p->num.sigma, factor, SAFE_MAX)
                     : ra_error_set(RA_ERR_ARG,
                                    "scale %.3g is beyond the "
                                    "kernel's float32 limit (%.3g)",
                                    ra_params_scale(p, s), SAFE_MAX);
    const double dot = b->q_norm * b->k_norm;
    if (dot > SAFE_MAX || alpha * dot > SAFE_MAX)
        return ra_error_set(RA_ERR_INPUT, "scores overflow float32: the "
                            "largest row norms of q (%.3g) and k (%.3g) times "
                            "%s %.3g allow |score| up to %.3g, beyond the "
                            "kernel's limit (%.3g); scale the inputs down",
                            b->q_norm, b->k_norm,
                            gauss ? "1/sigma^2" : "the scale", factor,
                            factor * dot, SAFE_MAX);
    const double norm = fmax(b->q_norm, b->k_norm);
    if (gauss && norm * norm * alpha > SAFE_MAX)
        return ra_error_set(RA_ERR_INPUT,
                            "score gaussian: |q|^2 or |k|^2 / "
                            "(2 sigma^2) reaches %.3g (largest row norm %.3g, "
                            "sigma %.3g), beyond the kernel's float32 limit "
                            "(%.3g)",
                            norm * norm * factor / 2.0, norm, p->num.sigma,
                            SAFE_MAX);
    return RA_OK;
}

ra_status ra_alibi_check(const ra_shape *s, const ra_params *p)
{
    const int64_t dist = s->N > s->M ? s->N : s->M;
    for (int64_t h = 0; p->num.alibi && h < s->H; h++) {
        const double slope = ra_params_alibi_slope(p, s->H, h);
        const double bias = fabs(slope) * M_LOG2E * (double)dist;
        if (!(bias <= SAFE_MAX))
            return ra_error_set(RA_ERR_INPUT, "ALiBi slope %.3g of head %lld: "
                                "times log2(e) and the largest distance %lld "
                                "it gives a bias of %.3g, beyond the "
                                "kernel's float32 limit (%.3g)", slope,
                                (long long)h, (long long)dist, bias,
                                SAFE_MAX);
    }
    return RA_OK;
}

ra_status ra_input_bounds_check(const ra_shape *s, const ra_params *p,
                                const ra_input_bounds *b, int64_t block_keys)
{
    ra_status st = p->num.score == RA_SCORE_ADDITIVE
                       ? check_additive(s, p->num.additive, b)
                       : check_product(s, p, b);
    if (st == RA_OK)
        st = ra_alibi_check(s, p);
    if (st != RA_OK)
        return st;
    /* acc = sum over a block's keys of p v with 0 <= p <= 1 */
    if (b->v_abs * (double)block_keys > SAFE_MAX)
        return ra_error_set(RA_ERR_INPUT, "values overflow float32: the "
                            "largest |v| (%.3g) times the %lld keys of a "
                            "block sums beyond the kernel's limit (%.3g); "
                            "scale v down", b->v_abs, (long long)block_keys,
                            SAFE_MAX);
    return RA_OK;
}

/* One row's rounding estimate over its allowance (range.h), for rows of
 * D entries: the sums of the norms and of q.k grow the rounding by about
 * sqrt(D) / 2 (measured from D = 2 to 128, docs/RELIABILITY.md), and a
 * margin of 2 keeps the rows it accepts within half the allowance. */
static double gauss_row_ratio(double q2, double lse, double sigma,
                              int64_t D)
{
    const double r = sqrt(q2), var2 = 2.0 * sigma * sigma;
    const double d = sqrt(var2 * (fmax(0.0, -lse) + 1.0));
    const double growth = fmax(1.0, 0.5 * sqrt((double)D));
    const double est = 0x1p-24 * growth * (2.0 * r + d) * (2.0 * r + d) /
                       var2;
    return 2.0 * est / (RA_TOLERANCE * fmax(1.0, fabs(lse)));
}

double ra_gauss_rope_ratio(const ra_shape *s, int64_t n, const float *q,
                           const float *lse, double sigma)
{
    double worst = 0.0;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->H; h++)
            for (int64_t i = 0; i < n; i++) {
                const double l = lse[(b * s->H + h) * n + i];
                if (!isfinite(l))
                    continue; /* a row that sees no key has no score */
                const float *row = q + ((b * n + i) * s->H + h) * s->D;
                worst = fmax(worst,
                             gauss_row_ratio(row_norm2(row, s->D), l, sigma,
                                             s->D));
            }
    return worst;
}
