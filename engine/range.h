/* range.h: whether the scores of finite inputs fit in float32 (internal,
 * pure). The kernel computes base-2 scores, their exponentials and P V in
 * fp32: a score or an accumulator beyond FLT_MAX turns whole rows into
 * o = 0, lse = -inf or NaN. Cheap bounds on the inputs, taken before the
 * work, refuse such problems with a message that says which values and why
 * instead of returning wrong results. */
#ifndef RA_RANGE_H
#define RA_RANGE_H

#include <stdint.h>

#include "internal.h"

/* Maxima over the inputs (over one rank's slices, then over all ranks):
 * the largest row norm of q and of k (per head, D or Dk entries) and the
 * largest |v|. NaN and inf entries are ignored (the non-finite scan speaks
 * for them). */
typedef struct {
    double q_norm, k_norm, v_abs;
} ra_input_bounds;

/* The bounds of this rank's q (B, n, H, D), k (B, m, G, Dk), v (B, m, G, Dv),
 * read by up to `threads` threads (the rank's; the result does not depend
 * on it). */
ra_input_bounds ra_input_bounds_of(const ra_shape *shape, int64_t n,
                                   int64_t m, const float *q, const float *k,
                                   const float *v, int threads);

/* Index of the first NaN or inf in x[0..n), or -1: for weights, which no
 * input scan sees. */
int64_t ra_first_nonfinite(const float *x, int64_t n);

/* RA_OK, or RA_ERR_INPUT naming what[index] and its value when x[0..n)
 * holds a NaN or inf. */
ra_status ra_check_finite(const char *what, const float *x, int64_t n);

/* With ALiBi on, checks that every head's bias, slope * log2(e) times the
 * largest distance max(N, M), stays well inside float32: RA_OK, or
 * RA_ERR_INPUT naming the head and its slope. */
ra_status ra_alibi_check(const ra_shape *shape, const ra_params *params);

/* Checks that every score, the key terms of the Gaussian score and the
 * accumulator of a block of up to block_keys keys stay well inside float32
 * for inputs within the bounds: RA_OK, or RA_ERR_ARG (the options alone
 * overflow) or RA_ERR_INPUT (the values do) with a message naming them. */
ra_status ra_input_bounds_check(const ra_shape *shape, const ra_params *params,
                                const ra_input_bounds *bounds,
                                int64_t block_keys);

/* The Gaussian score with RoPE: the rotation gives each position its own
 * angle, so no common offset of q and k survives it for centring to take
 * off (centre.h), and the kernels' fp32 distance 2 q.k - |q|^2 - |k|^2
 * cancels when q and k sit far from 0. For each finite row of lse
 * (B, H, n), with q (B, n, H, D) the call's rotated, centred queries, the
 * rounding estimate u g (|q| + |k|)^2 / (2 sigma^2) (u = 2^-24, g =
 * max(1, sqrt(D) / 2) the growth of the sums, |k| <= |q| + d for the keys
 * that carry the row's weight, d^2 / (2 sigma^2) <= max(0, -lse) + 1),
 * times a margin of 2, against the error `ringattn verify` accepts,
 * RA_TOLERANCE max(1, |lse|). Returns the largest ratio of the two over
 * the rows (0 without rows): above 1, the call refuses. */
double ra_gauss_rope_ratio(const ra_shape *shape, int64_t n, const float *q,
                           const float *lse, double sigma);

#endif /* RA_RANGE_H */