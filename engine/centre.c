/* centre.c: the Gaussian score's common translation of q and k
 * (centre.h). */
#include <math.h>

#include "centre.h"

void ra_centre_bounds(const float *k, int64_t B, int64_t m, int64_t G,
                      int64_t D, const int64_t *kpos, const int64_t *kv_lens,
                      double *bounds)
{
    const int64_t len = B * G * D;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < m; j++) {
            if (kv_lens && kpos[j] >= kv_lens[b])
                continue; /* padding: no query sees it */
            const float *row = k + (b * m + j) * G * D;
            double *neg_lo = bounds + b * G * D, *hi = neg_lo + len;
            for (int64_t gd = 0; gd < G * D; gd++)
                if (isfinite(row[gd])) {
                    neg_lo[gd] = fmax(neg_lo[gd], -(double)row[gd]);
                    hi[gd] = fmax(hi[gd], (double)row[gd]);
                }
        }
}

/* The centre of keys in [lo, hi]: their midpoint to the nearest multiple
 * of unit, the least power of two >= half their spread (0 when the
 * midpoint is within unit / 2 of 0); lo itself when all are equal. */
static float centre_one(double lo, double hi)
{
    const double mid = 0.5 * (lo + hi), half = 0.5 * (hi - lo);
    if (!(half > 0.0))
        return (float)lo;
    int e;
    const double f = frexp(half, &e); /* half = f 2^e, 0.5 <= f < 1 */
    const double unit = ldexp(1.0, f == 0.5 ? e - 1 : e);
    return (float)(unit * nearbyint(mid / unit));
}

void ra_centre_of(const double *bounds, int64_t B, int64_t G, int64_t D,
                  float *c)
{
    const int64_t len = B * G * D;
    for (int64_t i = 0; i < len; i++)
        c[i] = bounds[i] == -INFINITY ? 0.0f
                                      : centre_one(-bounds[i],
                                                   bounds[len + i]);
}

void ra_centre_apply(const float *x, float *y, int64_t B, int64_t len,
                     int64_t heads, int64_t G, int64_t D, const float *c)
{
    const int64_t per = heads / G;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < len; i++)
            for (int64_t h = 0; h < heads; h++) {
                const int64_t at = ((b * len + i) * heads + h) * D;
                const float *ch = c + (b * G + h / per) * D;
                for (int64_t d = 0; d < D; d++)
                    y[at + d] = x[at + d] - ch[d];
            }
}
