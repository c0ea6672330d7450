/* score_features.c: the table of the pointwise score features
 * (score_features.h) and the loops every consumer runs over it. */
#include <math.h>

#include "internal.h"
#include "score_features.h"
#include "simd.h"

/* ---- softcap: s -> cap tanh(s / cap) (Gemma-2's logit softcapping) ---- */

static ra_status softcap_rule(const ra_numerics *num, double cap)
{
    if (num->score != RA_SCORE_DOT)
        return ra_error_set(RA_ERR_ARG,
                            "softcap: the %s score is not capped (softcap "
                            "caps the dot score: the gaussian's row term and "
                            "the additive score's own tanh bound leave no "
                            "cap of theirs)",
                            ra_score_name(num->score));
    return RA_OK;
}

/* In base 2 the cap is cap log2 e: the same map of the natural score. */
static void softcap_tile(double cap, float *s, int64_t n, float *d)
{
    ra_scaled_tanh(s, n, (float)(cap * M_LOG2E), d);
}

static void softcap_ref(double cap, double *s, double *d)
{
    const double t = tanh(*s / cap);
    *s = cap * t;
    if (d)
        *d = 1.0 - t * t;
}

/* ---- the table ---------------------------------------------------------- */

#define FEATURE_ROW(field, option, meta, help)                                \
    {#field, "num." #field, option, offsetof(ra_numerics, field),            \
     field##_rule, field##_tile, field##_ref},
const ra_score_feature ra_score_features[] = {RA_SCORE_FEATURES(FEATURE_ROW)};
#undef FEATURE_ROW
const int ra_score_feature_count =
    (int)(sizeof ra_score_features / sizeof ra_score_features[0]);

/* A feature's field is a double (a row of another type fails to
 * compile). */
#define FEATURE_TYPE(field, option, meta, help)                               \
    _Static_assert(_Generic(((ra_numerics *)0)->field, double: 1, default: 0),\
                   #field ": a score feature's field is a double");
RA_SCORE_FEATURES(FEATURE_TYPE)
#undef FEATURE_TYPE

double ra_feature_get(const ra_numerics *num, int i)
{
    return *(const double *)((const char *)num +
                             ra_score_features[i].offset);
}

void ra_feature_set(ra_numerics *num, int i, double value)
{
    *(double *)((char *)num + ra_score_features[i].offset) = value;
}

const ra_score_feature *ra_features_first(const ra_numerics *num)
{
    for (int i = 0; num && i < ra_score_feature_count; i++)
        if (ra_feature_get(num, i) != 0)
            return &ra_score_features[i];
    return NULL;
}

int ra_features_on(const ra_numerics *num)
{
    return ra_features_first(num) != NULL;
}

const ra_numerics *ra_features_of(const ra_numerics *num)
{
    return ra_features_on(num) ? num : NULL;
}

void ra_features_copy(ra_numerics *dst, const ra_numerics *src)
{
    for (int i = 0; i < ra_score_feature_count; i++)
        ra_feature_set(dst, i, src ? ra_feature_get(src, i) : 0.0);
}

const ra_score_feature *ra_features_differ(const ra_numerics *a,
                                           const ra_numerics *b)
{
    for (int i = 0; i < ra_score_feature_count; i++)
        if (ra_feature_get(a, i) != ra_feature_get(b, i))
            return &ra_score_features[i];
    return NULL;
}

ra_status ra_features_check(const ra_numerics *num)
{
    for (int i = 0; i < ra_score_feature_count; i++) {
        const ra_score_feature *f = &ra_score_features[i];
        const double v = ra_feature_get(num, i);
        if (!(v >= 0 && isfinite(v)))
            return ra_error_set(RA_ERR_ARG, "%s: %g is not a finite number "
                                ">= 0 (0: off)", f->name, v);
        ra_status st = v > 0 ? f->rule(num, v) : RA_OK;
        if (st != RA_OK)
            return st;
    }
    return RA_OK;
}

/* Scores the derivative of a second feature is made in, at a time: its
 * product with the earlier ones' needs a buffer of its own. */
#define CHAIN_CHUNK 256

/* Feature f (value v) over n scores whose derivative so far is in d. */
static void tile_chained(const ra_score_feature *f, double v, float *s,
                         int64_t n, float *d)
{
    float dt[CHAIN_CHUNK];
    for (int64_t j = 0; j < n; j += CHAIN_CHUNK) {
        const int64_t len = n - j < CHAIN_CHUNK ? n - j : CHAIN_CHUNK;
        f->tile(v, s + j, len, dt);
        for (int64_t c = 0; c < len; c++)
            d[j + c] *= dt[c];
    }
}

void ra_features_tile(const ra_numerics *num, float *s, int64_t rows,
                      int64_t cols, int64_t ld, float *d)
{
    int first = 1;
    for (int i = 0; num && i < ra_score_feature_count; i++) {
        const double v = ra_feature_get(num, i);
        if (v == 0)
            continue;
        const ra_score_feature *f = &ra_score_features[i];
        for (int64_t r = 0; r < rows; r++)
            if (first || !d)
                f->tile(v, s + r * ld, cols, d ? d + r * ld : NULL);
            else
                tile_chained(f, v, s + r * ld, cols, d + r * ld);
        first = 0;
    }
}

void ra_features_ref(const ra_numerics *num, double *s, double *d)
{
    if (d)
        *d = 1.0;
    for (int i = 0; num && i < ra_score_feature_count; i++) {
        const double v = ra_feature_get(num, i);
        double slope;
        if (v == 0)
            continue;
        ra_score_features[i].ref(v, s, d ? &slope : NULL);
        if (d)
            *d *= slope;
    }
}
