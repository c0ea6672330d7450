/* peak.h: one large matrix product on oneDNN, the machine's yardstick
 * (internal). bench times it on every rank at once beside its own passes,
 * so that a pass's GFLOP/s reads as a fraction of what the cores reach on
 * a plain product in the same process and precision. Pure: no MPI; the
 * caller times ra_peak_run. */
#ifndef RA_PEAK_H
#define RA_PEAK_H

#include <stdint.h>

/* An n x n x n product C = A B, operands allocated and filled once:
 * fp32 x fp32 -> fp32, or (bf16) bf16 x bf16 -> fp32, the kernels' own
 * tile precisions. Opaque. */
typedef struct ra_peak ra_peak;

/* Creates the product on `threads` OpenMP threads; NULL when the build
 * has no oneDNN, memory runs out or oneDNN refuses (*why says which, a
 * static string). */
ra_peak *ra_peak_open(int64_t n, int bf16, int threads, const char **why);

/* Runs the product once; 0, or -1 when oneDNN failed. */
int ra_peak_run(ra_peak *pk);

/* The FLOPs of one ra_peak_run (2 n^3). */
double ra_peak_flops(const ra_peak *pk);

/* oneDNN's name of the implementation it chose ("brg:avx512_core_bf16"). */
const char *ra_peak_impl(const ra_peak *pk);

/* Frees pk (NULL: nothing). */
void ra_peak_close(ra_peak *pk);

#endif
