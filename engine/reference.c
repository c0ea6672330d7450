/* reference.c: the naive fp64 attention that everything is checked against.
 * Written for clarity, not speed: one query row at a time, every score
 * materialised, exp and log from libm. */
#include <math.h>

#include "kernel.h"

static int64_t pos_at(const int64_t *pos, int64_t i) { return pos ? pos[i] : i; }

/* Query i's aligned position: qalign[i], or its position plus diag. */
static int64_t aligned_at(const ra_mask *mk, int64_t i)
{
    return mk->qalign ? mk->qalign[i] : pos_at(mk->qpos, i) + mk->diag;
}

/* The visibility rules of ra_mask, one pair at a time, batch-local. */
int ra_ref_visible(const ra_mask *mk, int64_t i, int64_t j)
{
    if (!mk)
        return 1;
    const int64_t qp = pos_at(mk->qpos, i), kp = pos_at(mk->kpos, j);
    const int64_t at = aligned_at(mk, i);
    if (mk->causal && kp > at)
        return 0;
    if (mk->window && (kp < at - mk->left || kp > at + mk->right))
        return 0;
    if (mk->q_lens && qp >= mk->q_lens[0])
        return 0;
    if (mk->kv_lens && kp >= mk->kv_lens[0])
        return 0;
    if (mk->q_seg && mk->k_seg && mk->q_seg[i] != mk->k_seg[j])
        return 0;
    return 1;
}

/* -|kpos - a| (a the aligned position): minus the distance that ALiBi
 * penalises, on both sides of the diagonal. */
double ra_ref_alibi_distance(const ra_mask *mk, int64_t i, int64_t j)
{
    const double d = !mk ? (double)(j - i)
                         : (double)(pos_at(mk->kpos, j) - aligned_at(mk, i));
    return -fabs(d);
}

/* One score from its definition, in fp64. */
static double score_of(const ra_ref_score *sc, int64_t D, const double *q,
                       const double *k)
{
    double s = 0.0;
    switch (sc->score) {
    case RA_SCORE_GAUSSIAN:
        for (int64_t d = 0; d < D; d++)
            s += (q[d] - k[d]) * (q[d] - k[d]);
        return -s / (2.0 * sc->sigma * sc->sigma);
    case RA_SCORE_ADDITIVE: {
        const ra_additive *ad = sc->additive;
        const int64_t Dk = sc->Dk > 0 ? sc->Dk : D;
        for (int64_t a = 0; a < ad->A; a++) {
            double h = 0.0;
            for (int64_t d = 0; d < D; d++)
                h += (double)ad->w_q[a * D + d] * q[d];
            for (int64_t d = 0; d < Dk; d++)
                h += (double)ad->w_k[a * Dk + d] * k[d];
            s += (double)ad->w_v[a] * tanh(h);
        }
        return s;
    }
    case RA_SCORE_DOT:
    default:
        for (int64_t d = 0; d < D; d++)
            s += q[d] * k[d];
        return s * sc->scale;
    }
}

void ra_reference_scored(const ra_ref_score *sc, const ra_mask *mask,
                         const ra_ref_rows *x, double *scores)
{
    const int64_t m = x->m, D = x->D, Dv = x->Dv;
    const double *k = x->k, *v = x->v;
    const int64_t ldk = x->ldk, ldv = x->ldv;
    double *lse = x->lse;
    for (int64_t i = 0; i < x->nq; i++) {
        const double *qi = x->q + i * x->ldq;
        double mx = -INFINITY;
        for (int64_t j = 0; j < m; j++) {
            double s = ra_ref_visible(mask, i, j) ? score_of(sc, D, qi, k + j * ldk)
                                           : -INFINITY;
            if (s > -INFINITY)
                ra_features_ref(sc->features, &s, NULL);
            if (sc->alibi && s > -INFINITY)
                s += sc->alibi_slope * ra_ref_alibi_distance(mask, i, j);
            scores[j] = s;
            if (s > mx)
                mx = s;
        }
        double *oi = x->o + i * x->ldo;
        for (int64_t d = 0; d < Dv; d++)
            oi[d] = 0.0;
        if (mx == -INFINITY) { /* sees no key: o = 0, lse = -inf (sink) */
            lse[i] = sc->sink_on ? sc->sink : -INFINITY;
            continue;
        }
        if (sc->sink_on && sc->sink > mx)
            mx = sc->sink;
        double sum = sc->sink_on ? exp(sc->sink - mx) : 0.0;
        for (int64_t j = 0; j < m; j++) {
            if (!ra_ref_visible(mask, i, j))
                continue; /* weight 0, and no 0 x NaN from its value */
            double p = exp(scores[j] - mx);
            sum += p;
            /* a visible NaN or inf counts whatever its weight: the weight
             * is > 0 in exact arithmetic even where exp underflows */
            for (int64_t d = 0; d < Dv; d++)
                oi[d] += isfinite(v[j * ldv + d]) ? p * v[j * ldv + d]
                                                  : v[j * ldv + d];
        }
        for (int64_t d = 0; d < Dv; d++)
            oi[d] /= sum;
        lse[i] = mx + log(sum);
    }
}

double ra_params_alibi_slope(const ra_params *params, int64_t H, int64_t h)
{
    return params->num.alibi_slopes ? params->num.alibi_slopes[h]
                                    : ra_alibi_slope(H, h);
}

void ra_rope_row_ref(ra_rope rope, double base, double *x, int64_t D,
                     int64_t pos)
{
    if (rope == RA_ROPE_NONE)
        return;
    for (int64_t k = 0; k < D / 2; k++) {
        /* the pair's two dims: neighbours, or k and k + D/2 */
        const int64_t a = rope == RA_ROPE_INTERLEAVED ? 2 * k : k;
        const int64_t b = rope == RA_ROPE_INTERLEAVED ? 2 * k + 1 : k + D / 2;
        const double theta = (double)pos / pow(base, (double)(2 * k) / (double)D);
        const double xa = x[a], xb = x[b];
        x[a] = xa * cos(theta) - xb * sin(theta);
        x[b] = xa * sin(theta) + xb * cos(theta);
    }
}
