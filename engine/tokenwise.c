/* tokenwise.c: the token-wise parts of the attention layer: linear maps and
 * sinusoidal positional encodings. Pure: no MPI, no allocation. */
#include <cblas.h>
#include <math.h>

#include "kernel.h"

void ra_linear(const float *x, int64_t rows, int64_t in, const float *w,
               const float *bias, int64_t out, float *y)
{
    if (rows == 0)
        return;
    /* y (rows x out) = x (rows x in) w^T, w (out x in) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)out,
                (int)in, 1.0f, x, (int)in, w, (int)in, 0.0f, y, (int)out);
    if (bias)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < out; c++)
                y[r * out + c] += bias[c];
}

void ra_posenc_add(float *x, int64_t B, int64_t n, int64_t E,
                   const int64_t *pos)
{
    for (int64_t i = 0; i < n; i++) {
        const double p = (double)pos[i];
        for (int64_t c = 0; c < E; c++) {
            /* columns 2j and 2j + 1 share the frequency 10000^(-2j/E) */
            const double freq = pow(10000.0, -(double)(c - c % 2) / (double)E);
            const float pe = (float)(c % 2 ? cos(p * freq) : sin(p * freq));
            for (int64_t b = 0; b < B; b++)
                x[(b * n + i) * E + c] += pe;
        }
    }
}
