/* ref_block.h: the fp64 reference's passes over one block of keys for a
 * set of sampled query rows, the maths of `ringattn verify` (internal,
 * pure): the block's scores (dgemm, or the additive score's tanh sum),
 * the mask and ALiBi's bias, the online softmax and P V, all in fp64. The
 * caller reads the rows and the blocks (io/verify_fp64.c). */
#ifndef RA_REF_BLOCK_H
#define RA_REF_BLOCK_H

#include <stdint.h>

#include "internal.h"

/* One block of kb keys against nr query rows, and the rows' running
 * state. Shapes: q (nr, H, D); k (kb, G, Dk), v (kb, G, Dv); with the
 * additive score qa (nr, H, A) and ka (kb, G, A), else NULL; vis (nr, kb)
 * whether row r sees key j; kpos (kb) the keys' positions and qat (nr)
 * the rows' aligned positions (ALiBi's distance); sc (nr, kb) scratch;
 * mx, sum (H, nr) and acc (H, nr, Dv) the running max, sum and P V;
 * with va (|v|, as v) also acc_abs += P |v| (H, nr, Dv), else NULL. */
typedef struct {
    const ra_shape *s;
    const ra_params *p;
    double scale; /* the dot score's scale */
    int64_t nr, kb;
    const double *q, *k, *v, *qa, *ka, *va;
    const unsigned char *vis;
    const int64_t *kpos, *qat;
    double *sc, *mx, *sum, *acc, *acc_abs;
} ra_ref_block;

/* Folds the block into head h's state: scores, mask and bias, online
 * softmax, acc += P V. */
void ra_ref_block_fold(const ra_ref_block *x, int64_t h);

/* Head h's scores of the block with the mask and ALiBi's bias into sc
 * (nr, kb): -inf where a row does not see a key (pass 1 and 2 of the
 * fold; the backward check's weights follow from them and the rows'
 * LSE). */
void ra_ref_block_scores(const ra_ref_block *x, int64_t h);

/* x[i] = exp(x[i]) for i < n in fp64 within a few ulp of libm's, 0 for
 * arguments below -708 (-inf among them), vectorised by what the core has
 * (ref_exp.c). */
void ra_ref_exp(double *x, int64_t n);

/* This core's fp64 multiply-adds per second of CPU time (dgemm of a
 * check's shape, one thread) and exp per second (ra_ref_exp): the best
 * of a few runs of a few milliseconds. */
void ra_ref_rates(double *madd, double *exps);

/* out (n, A) = rows (n, D) W^T in fp64, W (A, D): the additive score's
 * projections W_q q and W_k k of n head rows. */
void ra_ref_project(const float *W, int64_t A, int64_t D, const double *rows,
                    int64_t n, double *out);

#endif /* RA_REF_BLOCK_H */
