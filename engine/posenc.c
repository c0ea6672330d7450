/* posenc.c: positional encodings that act on q and k or on the scores:
 * rotary embeddings (RoPE) and the ALiBi slopes. Pure functions: no MPI,
 * no allocation; the kernel adds the ALiBi bias itself (kernel.c). */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "kernel.h"

static const char *const rope_names[] = {"none", "interleaved", "half"};
/* ra_rope_name, ra_rope_parse */
RA_NAMED_ENUM(rope, ra_rope, "rotary pairing", rope_names)

/* One token's rows of every (batch, head) (row stride D, batch stride
 * stride_b) and the cosine and sine of one pair's angle. */
typedef struct {
    float *tok;
    int64_t B, stride_b, heads, D;
    double c, s;
} rope_token;

/* Rotates the pair (x[a], x[b]) of every row of the token. */
static void rotate_pair(const rope_token *t, int64_t a, int64_t b)
{
    for (int64_t bi = 0; bi < t->B; bi++)
        for (int64_t h = 0; h < t->heads; h++) {
            float *row = t->tok + bi * t->stride_b + h * t->D;
            const double xa = row[a], xb = row[b];
            row[a] = (float)(xa * t->c - xb * t->s);
            row[b] = (float)(xb * t->c + xa * t->s);
        }
}

void ra_rope_turn(const ra_rope_rows *r, float *x, double sign)
{
    if (r->rope == RA_ROPE_NONE)
        return;
    const int64_t D = r->D, half = D / 2;
    rope_token t = {NULL, r->B, r->n * r->heads * D, r->heads, D, 0.0, 0.0};
    for (int64_t i = 0; i < r->n; i++) {
        t.tok = x + i * r->heads * D; /* batch 0's row of token i */
        const double p = (double)r->pos[i] + (double)r->offset;
        for (int64_t k = 0; k < half; k++) {
            /* theta_k = base^(-2k/D), as inv_freq in PyTorch models */
            const double ang =
                sign * p * pow(r->base, -2.0 * (double)k / (double)D);
            t.c = cos(ang);
            t.s = sin(ang);
            if (r->rope == RA_ROPE_INTERLEAVED)
                rotate_pair(&t, 2 * k, 2 * k + 1);
            else
                rotate_pair(&t, k, k + half);
        }
    }
}

/* What ra_rope_apply refuses by doing nothing (ringattn.h). */
static int rope_rows_valid(const ra_rope_rows *r, const float *x)
{
    if (!r || (unsigned)r->rope > RA_ROPE_HALF || !(r->base > 0) ||
        !isfinite(r->base) || r->D % 2 != 0)
        return 0;
    const int64_t dims[4] = {r->B, r->n, r->heads, r->D};
    const int64_t count = ra_count_checked(4, dims);
    return count == 0 || (count > 0 && x && r->pos);
}

void ra_rope_apply(const ra_rope_rows *rows, float *x)
{
    if (rope_rows_valid(rows, x))
        ra_rope_turn(rows, x, 1.0);
}

/* Head h (0-based) of H: of the largest power of two p <= H, slope
 * 2^(-8(h+1)/p); beyond p, every other slope of 2p. */
double ra_alibi_slope(int64_t H, int64_t h)
{
    int64_t p = 1;
    while (p <= H / 2)
        p *= 2;
    if (h < p)
        return pow(2.0, -8.0 * (double)(h + 1) / (double)p);
    return pow(2.0, -8.0 * (double)(2 * (h - p) + 1) / (double)(2 * p));
}

void ra_alibi_slopes(int64_t H, double *slopes)
{
    if (!slopes)
        return;
    for (int64_t h = 0; h < H; h++)
        slopes[h] = ra_alibi_slope(H, h);
}
