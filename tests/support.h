/* support.h: shared test helpers: random problems and the fp64 check. */
#ifndef RA_TEST_SUPPORT_H
#define RA_TEST_SUPPORT_H

#include <stdint.h>

#include "compare.h"
#include "internal.h"
#include "kernel.h"
#include "ringattn.h"

/* Full tensors of one problem, generated from a seed. */
typedef struct {
    ra_shape s;
    float *q, *k, *v; /* (B,N,H,D) (B,M,G,D) (B,M,G,Dv) */
} problem;

void problem_make(problem *p, const ra_shape *s, uint64_t seed);
void problem_free(problem *p);

/* Errors of a computed (o, lse) against the fp64 reference: the library's
 * one tally (compare.h). */
typedef ra_tally check_result;

/* Checks query rows [n0, n0 + n) of every (b, h): o (B, n, H, Dv) and
 * lse (B, H, n) as laid out by ra_forward on a slice starting at n0; of
 * them the rows check_slice_every(..., every) picks (1: all). */
check_result check_rows(const problem *p, int causal, double scale,
                        int64_t n0, int64_t n, const float *o,
                        const float *lse, int64_t every);

/* Global masks of a test problem (any pointer NULL: rule off):
 * q_lens, kv_lens (B); q_seg (B, N); kv_seg (B, M). */
typedef struct {
    const int64_t *q_lens, *kv_lens, *q_seg, *kv_seg;
} test_masks;

/* The global masks of a test case from its seed (free with
 * test_masks_free): lens != 0, random padding lengths (ra_random_lens);
 * segment_avg > 0, sorted segment ids of that mean run length, on the key
 * side with every third id moved away (kv_side_apart), so that some query
 * segments see no key. */
test_masks test_masks_make(const ra_shape *s, uint64_t seed, int lens,
                           int64_t segment_avg, int kv_side_apart);
void test_masks_free(test_masks *m);

/* Sorted segment ids of B rows of len tokens, a new id where the random
 * stream of (seed, stream) is 0 modulo avg; kv_side_apart: every third id
 * moved by 1000. */
void test_segment_ids(uint64_t seed, uint64_t stream, int64_t B, int64_t len,
                      int64_t avg, int kv_side_apart, int64_t *out);

/* Checks the local rows of a layout slice: o (B, n, H, Dv) and lse (B, H, n)
 * in slice order, against the reference under params' causal and window
 * rules, RoPE and ALiBi, and the global masks (NULL: none). */
check_result check_slice(const problem *p, const ra_params *params,
                         const test_masks *masks, const ra_slice *qs,
                         const float *o, const float *lse);
/* check_slice on the rows whose global position is a multiple of every,
 * and the last row: the same rows at any P. A stride prime to the tile
 * sizes meets every position within a tile in some tile, and each row is
 * still checked against all its keys (the long tests' fp64 reference,
 * O(N M D), costs more than the call it checks). */
check_result check_slice_every(const problem *p, const ra_params *params,
                               const test_masks *masks, const ra_slice *qs,
                               const float *o, const float *lse,
                               int64_t every);

/* Copies the tokens of a slice out of a full (B, len, row) tensor into
 * (B, slice->count, row); elem is the element size in bytes. */
void slice_gather(const void *full, int64_t B, int64_t len, int64_t row,
                  size_t elem, const ra_slice *sl, void *out);

/* The start of every MPI test: MPI with MPI_THREAD_FUNNELED, this
 * process's rank and the rank count; ranks other than 0 write their
 * stdout and stderr to /dev/null, since verdicts are reduced over the
 * communicator and rank 0's report speaks for every rank. */
void mpi_test_init(int *argc, char ***argv, int *rank, int *nranks);

/* The end: MPI_Finalize and the exit status of a cmocka group result. */
int mpi_test_finish(int failed);

/* One rank's part of a problem under a layout: its token slices and the
 * local q (B, n, H, D), k (B, m, G, Dk), v (B, m, G, Dv) gathered from the
 * full tensors, with o (B, n, H, Dv) and lse (B, H, n) to fill. */
typedef struct {
    ra_slice qs, ks;
    float *q, *k, *v, *o, *lse;
} local_part;

/* This rank's slices under layout (the balanced one weighed by prm's
 * rules; prm may be NULL for the others) and its part of p's tensors. */
void local_part_make(local_part *lp, const problem *p, const ra_params *prm,
                     ra_layout layout, int rank, int nranks);
void local_part_free(local_part *lp);

/* Accumulates b into a (for sums over ranks or cases); updates rel_o. */
void check_merge(check_result *a, const check_result *b);

/* Sums a result over comm so that every rank holds the global one. */
check_result check_allreduce(MPI_Comm comm, const check_result *c);

/* Default acceptance: rel_o and max_lse below RA_TOLERANCE, no bad rows. */
int check_ok(const check_result *c);

/* The engine of the tests' own kernel calls: the one a library call's
 * RA_GEMM_AUTO stands for (comm/gemm_env.h), so that the suite's pass with
 * RINGATTN_GEMM=openblas (.ci/run) runs them on OpenBLAS too; fails the
 * test on a value the library refuses. */
ra_gemm test_gemm(void);

/* The arithmetic of a run as the tests print it: "bf16" (precision),
 * "wire-bf16" (fp32 with K/V in bf16 between ranks) or "fp32". */
const char *test_arith_name(ra_precision precision, ra_wire wire);

#endif
