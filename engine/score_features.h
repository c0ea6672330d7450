/* score_features.h: the pointwise score features, one row each. A feature
 * is a double field of ra_numerics, 0 when off, that maps the scaled score
 * s to f(s) after the score products and before ALiBi's bias and the
 * masks. The kernels, the fp64 references, the call's checks and
 * fingerprint, the output file's record, verify and the command line loop
 * over ra_score_features and never name a feature.
 *
 * Adding one (docs/DESIGN.md): its field and its row of RA_SCORE_FEATURES
 * (ringattn.h: the option, the Python keyword, the attribute), and its
 * rule, tile map and fp64 map in score_features.c. */
#ifndef RA_SCORE_FEATURES_H
#define RA_SCORE_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "ringattn.h"

typedef struct {
    const char *name;   /* the field: the output's attribute, the Python
                           keyword */
    const char *key;    /* "num.NAME": the call fingerprint's key */
    const char *option; /* the command line's */
    size_t offset;      /* of the double field in ra_numerics */
    /* RA_OK, or RA_ERR_ARG with a message naming the field, for a value
     * that is on (finite and > 0: the range is checked before) */
    ra_status (*rule)(const ra_numerics *num, double value);
    /* n base-2 scores s (the kernel's units: s log2 e) in place; with d,
     * the derivative df/ds into d[0..n) */
    void (*tile)(double value, float *s, int64_t n, float *d);
    /* one natural score in place; with d, *d = df/ds */
    void (*ref)(double value, double *s, double *d);
} ra_score_feature;

extern const ra_score_feature ra_score_features[];
extern const int ra_score_feature_count;

/* Feature i's value in num (0: off), and setting it. */
double ra_feature_get(const ra_numerics *num, int i);
void ra_feature_set(ra_numerics *num, int i, double value);

/* The first feature of num that is on (table order), or NULL. */
const ra_score_feature *ra_features_first(const ra_numerics *num);

/* 1 if any feature of num is on. */
int ra_features_on(const ra_numerics *num);

/* num when a feature of it is on, else NULL: what ra_block.features and
 * ra_ref_score.features take. */
const ra_numerics *ra_features_of(const ra_numerics *num);

/* Every feature's value from src into dst (the other fields untouched);
 * src NULL: every feature off. */
void ra_features_copy(ra_numerics *dst, const ra_numerics *src);

/* The first feature whose value differs between a and b, or NULL. */
const ra_score_feature *ra_features_differ(const ra_numerics *a,
                                           const ra_numerics *b);

/* Every feature's range (a finite number >= 0) and rule; RA_ERR_ARG with
 * a message naming the field. */
ra_status ra_features_check(const ra_numerics *num);

/* The features that are on, in table order, over the rows x cols base-2
 * scores of s (row stride ld); with d (the same stride), the derivative
 * of their composition. num NULL: nothing. */
void ra_features_tile(const ra_numerics *num, float *s, int64_t rows,
                      int64_t cols, int64_t ld, float *d);

/* The same on one natural score (the fp64 references); with d, *d = the
 * derivative (1 when none is on). num NULL: nothing. */
void ra_features_ref(const ra_numerics *num, double *s, double *d);

#endif /* RA_SCORE_FEATURES_H */
