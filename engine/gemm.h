/* gemm.h: the kernels' tile products, on OpenBLAS or oneDNN (internal).
 * Pure: no MPI, no allocation; runs on the calling thread only. */
#ifndef RA_GEMM_H
#define RA_GEMM_H

#include <stdint.h>

#include "ringattn.h"

/* C = alpha op(A) op(B) + beta C, row-major, as cblas_sgemm takes it:
 * op(A) is m x k, op(B) k x n, C m x n; ta / tb: 1 when the stored operand
 * is the transpose. */
typedef struct {
    int ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    int64_t lda, ldb;
    float *c;
    int64_t ldc;
    int a_kept; /* 1: A is the same unchanged operand as in this thread's
                   previous product of the same shape, whose bf16 copy
                   may be reused (bf16.h); sgemm ignores it */
    const uint16_t *b16; /* op(B) already packed in bf16 as a bf16 product
                            packs it (bf16.h: ra_mm16_pack), or NULL;
                            sgemm and emulated products ignore it */
    const uint16_t *a16; /* op(A) (not transposed) already in bf16, its
                            m x k values in rows of k, or NULL; a bf16
                            product then reads it instead of a (emulated
                            products too); sgemm ignores it */
} ra_mm;

/* The engine RA_GEMM_AUTO stands for in this build: oneDNN when the
 * build has it, else OpenBLAS; other values are returned as they are. */
ra_gemm ra_gemm_resolve(ra_gemm gemm);

/* One product on engine gemm (RA_GEMM_AUTO: ra_gemm_resolve), on the
 * calling thread. gemm must be available (ra_gemm_available). */
void ra_sgemm(ra_gemm gemm, const ra_mm *x);

#endif
