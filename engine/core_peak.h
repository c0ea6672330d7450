/* core_peak.h: the core's physical peak per precision (internal), bench's
 * and probe's first yardstick: a register-resident loop of the instruction
 * the tile products use, timed on the calling thread. fp32: AVX-512 FMA
 * (vfmadd231ps) or AVX2 FMA; bf16: AMX tile products (tdpbf16ps) where
 * the core has AMX-BF16, else AVX512-BF16 dot products (vdpbf16ps). The
 * instruction is chosen at run time by what the core has; a path the core
 * lacks is skipped by name. Pure: no MPI, no allocation. */
#ifndef RA_CORE_PEAK_H
#define RA_CORE_PEAK_H

/* The instruction loops, in the order the bf16 choice tries them. */
typedef enum {
    RA_LOOP_AMX_BF16,    /* tdpbf16ps, 16 x 16 x 32 per instruction */
    RA_LOOP_AVX512_BF16, /* vdpbf16ps, 16 lanes x 2 pairs */
    RA_LOOP_AVX512_FMA,  /* vfmadd231ps zmm, 16 lanes */
    RA_LOOP_AVX2_FMA,    /* vfmadd231ps ymm, 8 lanes */
    RA_LOOP_COUNT
} ra_loop;

/* The loop's name ("amx-bf16 tdpbf16ps"). */
const char *ra_loop_name(ra_loop l);

/* Whether this core (and, for AMX, the kernel) can run loop l; when not,
 * *why names what it lacks. */
int ra_loop_available(ra_loop l, const char **why);

/* GFLOP/s of loop l on the calling thread over about `seconds` (the best
 * of a few rounds), 0 when it is not available. */
double ra_loop_rate(ra_loop l, double seconds);

/* The loop the tile products of a precision use on this core: bf16 the
 * first available of AMX-BF16 and AVX512-BF16, fp32 of AVX-512 and AVX2
 * FMA; RA_LOOP_COUNT when none (*why then names what the core lacks). */
ra_loop ra_loop_for(int bf16, const char **why);

#endif /* RA_CORE_PEAK_H */
