/* compare.c: see compare.h. */
#include <math.h>

#include "compare.h"

static double rel_of(double err2, double ref2)
{
    return ref2 > 0.0 ? sqrt(err2 / ref2) : sqrt(err2);
}

void ra_tally_o(ra_tally *t, double got, double ref)
{
    const double e = fabs(got - ref);
    if (isnan(got) && !isnan(ref))
        t->bad_inf++;
    t->err2 += e * e;
    t->ref2 += ref * ref;
    if (e > t->max_abs_o)
        t->max_abs_o = e;
}

void ra_tally_lse(ra_tally *t, double got, double ref)
{
    if (isinf(ref) || !isfinite(got)) {
        if (!(isinf(ref) && ref < 0 && isinf(got) && got < 0))
            t->bad_inf++;
    } else {
        const double e = fabs(got - ref) / fmax(1.0, fabs(ref));
        if (e > t->max_lse)
            t->max_lse = e;
    }
    t->rows++;
    t->rel_o = rel_of(t->err2, t->ref2);
}

void ra_tally_o_abs(ra_tally *t, double ref_abs)
{
    t->abs2 += ref_abs * ref_abs;
}

double ra_tally_tol_o(const ra_tally *t, double tol)
{
    return tol + t->p_unit * rel_of(t->abs2, t->ref2);
}

void ra_tally_merge(ra_tally *a, const ra_tally *b)
{
    a->abs2 += b->abs2;
    a->p_unit = fmax(a->p_unit, b->p_unit);
    a->err2 += b->err2;
    a->ref2 += b->ref2;
    a->rel_o = rel_of(a->err2, a->ref2);
    a->max_abs_o = fmax(a->max_abs_o, b->max_abs_o);
    a->max_lse = fmax(a->max_lse, b->max_lse);
    a->bad_inf += b->bad_inf;
    a->rows += b->rows;
}

int ra_tally_ok(const ra_tally *t, double tol)
{
    return t->rel_o < ra_tally_tol_o(t, tol) && t->max_lse < tol &&
           t->bad_inf == 0;
}
