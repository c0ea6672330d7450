/*
 * tile-products.c: the forward's two tile products (S = Q K^T, then
 * acc += P V) at the shapes of full-attention tiles and of sliding-window
 * band tiles, on each engine, one thread, operands in cache. Prints
 * GFLOP/s (4 D flops per scored entry); with the entries a tile scores per
 * visible (query, key) pair, this bounds what a band can reach against
 * full attention (docs/PERFORMANCE.md, "Windows: what bounds window 512").
 * Not part of the product build; against a build tree:
 *
 *   mpicc -O2 -fopenmp -I engine -I include bench/tile-products.c \
 *       build/libra_internal.a -lopenblas -ldnnl -lm -o /tmp/tile-products
 *   OMP_NUM_THREADS=1 taskset -c 0 /tmp/tile-products [KV_HEADS]
 *
 * KV_HEADS (default 4) is how many heads' rows sit side by side in the
 * key and value rows, as in a block's (B, m, G, D) layout; 1 gives each
 * head's keys rows of their own, as the kernel's band copy does
 * (kernel.c, band_keys). The queries keep 4 heads per row.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "gemm.h"

enum { D = 64, HEADS = 4, LDS = 1024, ROWS_MAX = 4096 };

static int64_t kv_heads = HEADS;

typedef struct {
    const char *what;
    int groups;          /* row groups, each with its own key range */
    int64_t rows, keys;  /* all groups' rows; keys per group */
} tile_case;

/* One tile's products: per group of rows/groups rows, its keys start at
 * the group's first row (a band moves with its rows). */
static void tile(ra_gemm g, const tile_case *c, const float *q,
                 const float *k, const float *v, float *s, float *acc)
{
    const int64_t ld = HEADS * D, ldkv = kv_heads * D;
    const int64_t gr = c->rows / c->groups;
    for (int grp = 0; grp < c->groups; grp++) {
        const int64_t off = grp * gr;
        const ra_mm qk = {.tb = 1, .m = gr, .n = c->keys, .k = D,
                          .alpha = 1.0f, .a = q + off * ld, .lda = ld,
                          .b = k + off * ldkv, .ldb = ldkv, .c = s,
                          .ldc = LDS};
        const ra_mm pv = {.m = gr, .n = D, .k = c->keys, .alpha = 1.0f,
                          .beta = 1.0f, .a = s, .lda = LDS,
                          .b = v + off * ldkv, .ldb = ldkv, .c = acc,
                          .ldc = D};
        ra_sgemm(g, &qk);
        ra_sgemm(g, &pv);
    }
}

/* GFLOP/s of the best of 15 rounds of 50 tiles. */
static double rate(ra_gemm g, const tile_case *c, const float *q,
                   const float *k, const float *v, float *s, float *acc)
{
    double best = 1e30;
    for (int round = 0; round < 15; round++) {
        const double t0 = omp_get_wtime();
        for (int it = 0; it < 50; it++)
            tile(g, c, q, k, v, s, acc);
        const double t = (omp_get_wtime() - t0) / 50;
        best = t < best ? t : best;
    }
    return 4.0 * D * (double)c->rows * (double)c->keys / best / 1e9;
}

int main(int argc, char **argv)
{
    kv_heads = argc > 1 ? atoi(argv[1]) : HEADS;
    if (kv_heads < 1 || kv_heads > HEADS)
        return 2;
    const size_t n = (size_t)ROWS_MAX * HEADS * D;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4);
    float *s = calloc((size_t)512 * LDS, 4), *acc = calloc(512 * D, 4);
    if (!q || !k || !v || !s || !acc)
        return 1;
    for (size_t i = 0; i < n; i++) {
        q[i] = (float)(i * 7919 % 1000) / 1000.0f;
        k[i] = (float)(i * 104729 % 1000) / 1000.0f;
        v[i] = (float)(i * 1299709 % 1000) / 1000.0f;
    }
    const tile_case cases[] = {
        {"full: 256 rows x 256 keys", 1, 256, 256},
        {"full: 256 rows x 512 keys", 1, 256, 512},
        {"window 512: 128 x 640", 1, 128, 640},
        {"window 512: 2 groups of 64 x 576", 2, 128, 576},
        {"window 512: 4 groups of 32 x 544", 4, 128, 544},
    };
    for (int e = 0; e < 2; e++) {
        const ra_gemm g = e ? RA_GEMM_OPENBLAS : RA_GEMM_ONEDNN;
        if (!ra_gemm_available(g))
            continue;
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            printf("%-9s %-34s %6.1f GFLOP/s\n", ra_gemm_name(g),
                   cases[i].what, rate(g, &cases[i], q, k, v, s, acc));
    }
    free(q), free(k), free(v), free(s), free(acc);
    return 0;
}
