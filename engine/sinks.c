/* sinks.c: attention sinks on a call's final (o, lse), and this rank's
 * part of their gradient (kernel.h). A sink is one more column of every
 * row's softmax, of logit sinks[h] and value 0. */
#include <math.h>
#include <omp.h>

#include "kernel.h"

void ra_sinks_fold(const ra_shape *s, int64_t n, const float *sinks,
                   float *o, float *lse, int threads)
{
    const int64_t B = s->B, H = s->H, Dv = s->Dv;
#pragma omp parallel for num_threads(threads > 0 ? threads : 1) schedule(static)
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, h = bh % H;
        const double sink = sinks[h];
        for (int64_t i = 0; i < n; i++) {
            float *l = lse + bh * n + i, *oi = o + ((b * n + i) * H + h) * Dv;
            const double la = *l;
            if (isnan(la))
                continue; /* nonfinite: the row's NaN stands */
            const double hi = la > sink ? la : sink;
            const double lo = la > sink ? sink : la;
            const double lnew = hi + log1p(exp(lo - hi));
            const float w = (float)exp(la - lnew); /* 0 for lse = -inf */
            for (int64_t d = 0; d < Dv; d++)
                oi[d] = la == -INFINITY ? 0.0f : oi[d] * w;
            *l = (float)lnew;
        }
    }
}

void ra_sinks_grad(const ra_shape *s, int64_t n, const float *sinks,
                   const float *o, const float *lse, const float *dout,
                   double *dsinks)
{
    const int64_t B = s->B, H = s->H, Dv = s->Dv;
    for (int64_t h = 0; h < H; h++) {
        double sum = 0.0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < n; i++) {
                const int64_t at = ((b * n + i) * H + h) * Dv;
                double drow = 0.0;
                for (int64_t d = 0; d < Dv; d++)
                    drow += (double)dout[at + d] * o[at + d];
                sum += exp((double)sinks[h] - lse[(b * H + h) * n + i]) * drow;
            }
        dsinks[h] = -sum;
    }
}
