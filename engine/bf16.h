/* bf16.h: bfloat16 values and the tile products of a bf16 call (internal).
 *
 * bfloat16 keeps float32's sign and 8-bit exponent and the top 7 bits of
 * its fraction (8 significant bits): unit roundoff u = 2^-8 under
 * rounding to nearest, ties to even. A float32 that is already a bf16
 * value converts exactly, so rounding twice changes nothing. Pure: no MPI,
 * no allocation but in ra_mm16_create. */
#ifndef RA_BF16_H
#define RA_BF16_H

#include <stdint.h>
#include <string.h>

#include "gemm.h"

/* The unit roundoff of bf16 (round to nearest): 2^-8. */
#define RA_BF16_UNIT 0.00390625

/* x rounded to the nearest bf16, ties to even; a NaN stays a (quiet) NaN,
 * infinities stay, and values beyond bf16's largest finite one become
 * infinite as IEEE rounding makes them. */
static inline uint16_t ra_bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x40u;
    /* branch-free, so that loops over it vectorise */
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : nearest);
}

/* The float32 of a bf16 value (exact). */
static inline float ra_bf16_to_f32(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x (n) rounded to bf16 values, held in float32, in place. */
void ra_bf16_round(float *x, int64_t n);
/* x (n) rounded in place as a bf16 run rounds its inputs: to float32,
 * then to the nearest bf16 (the fp64 references' operands). */
void ra_bf16_round_f64(double *x, int64_t n);
/* out (n) = x (n) rounded to bf16; back: out (n) = the float32 of x (n). */
void ra_bf16_pack(const float *x, int64_t n, uint16_t *out);
void ra_bf16_unpack(const uint16_t *x, int64_t n, float *out);

/* A product as the kernels declare it before a call: its full-tile shape
 * (op(A) m x k, op(B) k x n), transposes, alpha, beta (0 or 1) and C's
 * row stride. The same product on a smaller edge tile matches no entry. */
typedef struct {
    int ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    int64_t ldc;
} ra_mm_shape;

enum { RA_MM16_MAX = 8 }; /* shapes one engine holds */

/* The bf16 products of one call: on oneDNN one matmul primitive per shape
 * (bf16 x bf16 -> fp32, `brg:avx512_core_bf16` on cores with
 * AVX512_BF16), created here once with each thread's stream, memory
 * objects and scratch, reused for every tile of every step; on OpenBLAS
 * none. */
typedef struct ra_mm16 ra_mm16;

/* Makes the engine of count (<= RA_MM16_MAX) shapes on engine gemm for
 * threads threads; RA_ERR_NOMEM or RA_ERR_ARG (oneDNN refused a
 * primitive) with a message. */
ra_status ra_mm16_create(ra_gemm gemm, const ra_mm_shape *shapes, int count,
                         int threads, ra_mm16 **out);
void ra_mm16_free(ra_mm16 *e);

/* Product x on thread tid (0 .. threads - 1, each thread its own) in
 * bf16: op(A) and op(B) rounded to bf16, products summed in fp32. A
 * declared shape runs its primitive; any other (an edge tile, or every
 * product on OpenBLAS) rounds the operands to bf16 values held in fp32
 * and runs sgemm: the same numbers up to the order of the fp32 sums.
 * x->m * x->k and x->k * x->n must not exceed the largest of the declared
 * shapes'. */
void ra_mm16_run(const ra_mm16 *e, int tid, const ra_mm *x);

/* Whether e runs oneDNN primitives (0: every product emulated, as on
 * OpenBLAS). */
int ra_mm16_native(const ra_mm16 *e);

/* rows x cols of x (row stride ld) into out (rows * cols) in bf16, as e
 * packs a product's operands: an operand packed once this way may be
 * given to many products (ra_mm.b16) with the same numbers. */
void ra_mm16_pack(const ra_mm16 *e, const float *x, int64_t rows,
                  int64_t cols, int64_t ld, uint16_t *out);

/* One tile product of a kernel: in bf16 on e when it is set, else
 * sgemm on engine gemm. */
static inline void ra_mm_tile(ra_gemm gemm, const ra_mm16 *e, int tid,
                              const ra_mm *x)
{
    if (e)
        ra_mm16_run(e, tid, x);
    else
        ra_sgemm(gemm, x);
}

#endif /* RA_BF16_H */
