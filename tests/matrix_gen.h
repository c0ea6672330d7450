/* matrix_gen.h: a deterministic covering design for test matrices: the
 * full product of a few core factors, and every pair of levels of any two
 * factors in at least one case (greedy, in the manner of AETG/IPO: each
 * case is completed factor by factor with the level that covers the most
 * pairs not yet covered). Pure: no I/O, no randomness, same cases on every
 * rank and every run. */
#ifndef RA_MATRIX_GEN_H
#define RA_MATRIX_GEN_H

#define MGEN_MAX_FACTORS 16
#define MGEN_MAX_LEVELS  8

typedef struct {
    int nf;          /* factors, <= MGEN_MAX_FACTORS */
    const int *nlev; /* (nf) levels of each, 1 .. MGEN_MAX_LEVELS */
    unsigned core;   /* bit f set: factor f is enumerated in full product
                        with the other core factors */
    /* Whether the factors in `set` (bit f), at levels lev[f], may appear
     * together; pairs it rejects need no case. NULL: any. Every partial
     * case it accepts must be completable. */
    int (*allowed)(const int *lev, unsigned set);
} mgen_spec;

/* Writes the cases into cases[c * nf + f] (level of factor f in case c),
 * core product first, and returns their number; -1 when more than max
 * would be needed or a partial case the constraints accept cannot be
 * completed. */
int mgen_cases(const mgen_spec *sp, int *cases, int max);

#endif
