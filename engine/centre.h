/* centre.h: the Gaussian score's common translation of q and k (internal,
 * pure).
 *
 * -||q - k||^2 / (2 sigma^2), its softmax, dq and dk do not change when q
 * and k move by the same vector c. The kernels form the score as
 * 2 q.k - |q|^2 - |k|^2 in fp32 (kernel.h), which cancels when q and k sit
 * far from 0 (at 100, sigma 0.5: 2.5e-4 in o). So a call moves both by c,
 * per batch, kv head and dim, once it has rotated them (RoPE does not
 * commute with a translation) and before it rounds them to bf16 (so that
 * bf16 rounds the small centred values). c comes from the least and the
 * largest key that the masks let any query see: the midpoint, rounded to
 * a multiple of the power of two that covers half their spread. Keys
 * about 0 keep c = 0 (and the run its numbers exactly); keys far from 0
 * end within 3 half-spreads of it. Bounds reduce by MPI_MAX (comm/call.c),
 * so c is the same bits at every rank count, and a reference that rounds
 * the inputs as the run does gets them from these functions too. Shape
 * letters as in ringattn.h; m is this rank's key count.
 */
#ifndef RA_CENTRE_H
#define RA_CENTRE_H

#include <stdint.h>

/* Raises bounds (2, B, G, D), -inf where nothing was seen yet, to the
 * keys k (B, m, G, D) that padding does not hide (key j of batch b counts
 * when kv_lens is NULL or kpos[j] < kv_lens[b]): the first half to minus
 * their least entry, the second to their largest. NaN and inf entries are
 * left out, so that one of them moves no row's centre. */
void ra_centre_bounds(const float *k, int64_t B, int64_t m, int64_t G,
                      int64_t D, const int64_t *kpos, const int64_t *kv_lens,
                      double *bounds);

/* The centres c (B, G, D) of bounds (2, B, G, D) over every key: 0 where
 * no key counted. */
void ra_centre_of(const double *bounds, int64_t B, int64_t G, int64_t D,
                  float *c);

/* y = x - c of the rows x (B, len, heads, D), head h of batch b moving by
 * c[b][h / (heads / G)] (c (B, G, D)); y may be x. Each entry is one fp32
 * subtraction: x - c correctly rounded. */
void ra_centre_apply(const float *x, float *y, int64_t B, int64_t len,
                     int64_t heads, int64_t G, int64_t D, const float *c);

#endif /* RA_CENTRE_H */
