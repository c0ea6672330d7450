/* posenc.c: positional encodings that act on q and k or on the scores:
 * rotary embeddings (RoPE) and the ALiBi slopes. Pure functions: no MPI,
 * no allocation; the kernel adds the ALiBi bias itself (kernel.c). */
#include <math.h>
#include <string.h>

#include "internal.h"

static const char *const rope_names[] = {"none", "interleaved", "half"};
/* ra_rope_name, ra_rope_parse */
RA_NAMED_ENUM(rope, ra_rope, "rotary pairing", rope_names)

/* Rotates the pair (x[a], x[b]) of every (batch, head) row of one token by
 * the angle whose cosine and sine are c and s. */
static void rotate_pair(float *tok, int64_t B, int64_t stride_b,
                        int64_t heads, int64_t D, int64_t a, int64_t b,
                        double c, double s)
{
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t h = 0; h < heads; h++) {
            float *row = tok + bi * stride_b + h * D;
            const double xa = row[a], xb = row[b];
            row[a] = (float)(xa * c - xb * s);
            row[b] = (float)(xb * c + xa * s);
        }
}

/* ra_rope_apply with the angles multiplied by sign (+1, or -1: the
 * transpose). */
static void rope_rotate(ra_rope rope, double base, float *x, int64_t B,
                        int64_t n, int64_t heads, int64_t D,
                        const int64_t *pos, int64_t offset, double sign)
{
    if (rope == RA_ROPE_NONE)
        return;
    const int64_t half = D / 2, stride_b = n * heads * D;
    for (int64_t t = 0; t < n; t++) {
        float *tok = x + t * heads * D; /* batch 0's row of token t */
        const double p = (double)(pos[t] + offset);
        for (int64_t i = 0; i < half; i++) {
            /* theta_i = base^(-2i/D), as inv_freq in PyTorch models */
            const double ang = sign * p * pow(base, -2.0 * (double)i / (double)D);
            const double c = cos(ang), s = sin(ang);
            if (rope == RA_ROPE_INTERLEAVED)
                rotate_pair(tok, B, stride_b, heads, D, 2 * i, 2 * i + 1, c,
                            s);
            else
                rotate_pair(tok, B, stride_b, heads, D, i, i + half, c, s);
        }
    }
}

void ra_rope_apply(ra_rope rope, double base, float *x, int64_t B, int64_t n,
                   int64_t heads, int64_t D, const int64_t *pos,
                   int64_t offset)
{
    rope_rotate(rope, base, x, B, n, heads, D, pos, offset, 1.0);
}

void ra_rope_apply_transpose(ra_rope rope, double base, float *x, int64_t B,
                             int64_t n, int64_t heads, int64_t D,
                             const int64_t *pos, int64_t offset)
{
    rope_rotate(rope, base, x, B, n, heads, D, pos, offset, -1.0);
}

/* Head h (0-based) of H: of the largest power of two p <= H, slope
 * 2^(-8(h+1)/p); beyond p, every other slope of 2p. */
double ra_alibi_slope(int64_t H, int64_t h)
{
    int64_t p = 1;
    while (p * 2 <= H)
        p *= 2;
    if (h < p)
        return pow(2.0, -8.0 * (double)(h + 1) / (double)p);
    return pow(2.0, -8.0 * (double)(2 * (h - p) + 1) / (double)(2 * p));
}

void ra_alibi_slopes(int64_t H, double *slopes)
{
    for (int64_t h = 0; h < H; h++)
        slopes[h] = ra_alibi_slope(H, h);
}
