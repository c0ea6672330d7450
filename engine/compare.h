/* compare.h: the one error tally of an (o, lse) output against the fp64
 * reference (internal, pure). Tests, `ringattn verify` and `ringattn bench`
 * all count the same way and accept at the same tolerance. */
#ifndef RA_COMPARE_H
#define RA_COMPARE_H

#include <stdint.h>

/* The acceptance tolerance of every check: the relative error of o and the
 * LSE error (below) must both stay under it. fp32 kernels reach about 1e-7
 * on unit-normal inputs; 1e-5 leaves room for long rows and many ranks. */
#define RA_TOLERANCE 1e-5

/* Running sums of a comparison; zero-initialise to start. */
typedef struct {
    double err2, ref2;  /* sums of |o - ref|^2 and |ref|^2 */
    double rel_o;       /* sqrt(err2 / ref2): ||o - ref|| / ||ref|| */
    double max_abs_o;   /* max |o - ref| */
    double max_lse;     /* max |lse - ref| / max(1, |ref|) over finite rows */
    int64_t bad_inf;    /* rows whose -inf status disagrees with the
                           reference, and entries NaN where it has none */
    int64_t rows;       /* rows checked */
    double abs2;        /* sum of |ref_abs|^2, ref_abs the reference on
                           |v| (ra_tally_o_abs); with p_unit only */
    double p_unit;      /* bf16 precision: the unit roundoff of P's
                           rounding, 2^-8 (docs/DESIGN.md, "Precision");
                           0: P is not rounded */
} ra_tally;

/* The weighted mean of |v| that element's reference had, sum_j p_ij
 * |v_jd| / l_i: rounding P to bf16 moves o_id by at most p_unit times it,
 * so o by at most p_unit sqrt(abs2) in Frobenius norm. */
void ra_tally_o_abs(ra_tally *t, double ref_abs);

/* The tolerance on rel_o: tol, plus p_unit sqrt(abs2 / ref2) when P was
 * rounded. */
double ra_tally_tol_o(const ra_tally *t, double tol);

/* One element of o against its reference. */
void ra_tally_o(ra_tally *t, double got, double ref);

/* Ends one row: its lse against the reference (a row that sees no key has
 * -inf in both); counts the row. */
void ra_tally_lse(ra_tally *t, double got, double ref);

/* a += b (sums over ranks or cases). */
void ra_tally_merge(ra_tally *a, const ra_tally *b);

/* The verdict: rel_o below ra_tally_tol_o, max_lse below tol and no bad
 * row. */
int ra_tally_ok(const ra_tally *t, double tol);

#endif /* RA_COMPARE_H */
