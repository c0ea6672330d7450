/* naive.c: materialising fp32 attention, the way a user would first write
 * it with BLAS: S = s * Q K^T for all keys at once, a plain softmax with
 * libm's expf, then O = S V. The baseline that `ringattn bench --mode naive`
 * measures the tiled kernel against; never used for results. */
#include <cblas.h>
#include <math.h>

#include "kernel.h"

void ra_naive_forward(const ra_naive_args *a, const float *q, const float *k,
                      const float *v, float *o, float *lse, float *scores)
{
    const int64_t n = a->n, M = a->M, H = a->H, G = a->G, D = a->D;
    const int64_t Dv = a->Dv;
    for (int64_t b = 0; b < a->B; b++) {
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / (H / G);
            /* S (n x M) = scale * Q K^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)M,
                        (int)D, a->scale, q + (b * n * H + h) * D, (int)(H * D),
                        k + (b * M * G + g) * D, (int)(G * D), 0.0f, scores,
                        (int)M);
            for (int64_t i = 0; i < n; i++) {
                float *row = scores + i * M;
                int64_t seen = M;
                if (a->causal) {
                    int64_t edge = a->q_start + i + (M - a->N) + 1;
                    seen = edge < 0 ? 0 : (edge > M ? M : edge);
                }
                float mx = -INFINITY, sum = 0.0f;
                for (int64_t j = 0; j < seen; j++)
                    mx = fmaxf(mx, row[j]);
                for (int64_t j = 0; j < seen; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                for (int64_t j = 0; j < seen; j++)
                    row[j] /= sum;
                for (int64_t j = seen; j < M; j++)
                    row[j] = 0.0f;
                lse[(b * H + h) * n + i] = seen ? mx + logf(sum) : -INFINITY;
            }
            /* O = P V */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n,
                        (int)Dv, (int)M, 1.0f, scores, (int)M,
                        v + (b * M * G + g) * Dv, (int)(G * Dv), 0.0f,
                        o + (b * n * H + h) * Dv, (int)(H * Dv));
        }
    }
}
