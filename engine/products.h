/* products.h: the products-only yardstick (internal): the tile products a
 * kernel issues for a problem (ra_kernel_mm_shapes: the same shapes,
 * engine and precision; the forward's K and V staged in bf16 once per
 * block as the kernel stages them, and its P in bf16 as the softmax
 * hands it to P V) with none of the softmax between
 * them, so that a call's rate reads against what its products alone
 * allow. One thread; the caller times ra_products_run. Pure: no MPI; all
 * allocation in ra_products_open. */
#ifndef RA_PRODUCTS_H
#define RA_PRODUCTS_H

#include "bf16.h"

typedef struct ra_products ra_products;

/* The count full-tile products shapes (as ra_kernel_mm_shapes gives them)
 * on engine gemm, in bf16 when bf16 (one ra_mm16 engine), with each
 * product's op(B), and P V's A, staged in bf16 once when stage (the
 * forward's products on oneDNN); operands filled with
 * seeded values. RA_ERR_NOMEM or the engine's refusal, with a message. */
ra_status ra_products_open(ra_gemm gemm, int bf16, int stage,
                           const ra_mm_shape *shapes, int count,
                           ra_products **out);

/* Issues `tiles` rounds of the products (each shape once per round, A of
 * the first kept from round to round, as a query tile's scores against
 * a row of key tiles); returns their FLOPs (2 m n k each). */
double ra_products_run(ra_products *x, int64_t tiles);

void ra_products_close(ra_products *x);

#endif /* RA_PRODUCTS_H */
