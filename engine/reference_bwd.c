/* reference_bwd.c: the naive fp64 attention gradients that the backward
 * kernel and the ring are checked against (backward.h). Written for
 * clarity: one query row at a time, libm exp and log, no tiles. */
#include <math.h>

#include "backward.h"

/* The additive score's hidden unit a of one pair: w_q[a] . q + w_k[a] . k. */
static double additive_hidden(const ra_ref_score *sc, int64_t a, int64_t D,
                              int64_t Dk, const double *q, const double *k)
{
    const ra_additive *ad = sc->additive;
    double h = 0.0;
    for (int64_t d = 0; d < D; d++)
        h += (double)ad->w_q[a * D + d] * q[d];
    for (int64_t d = 0; d < Dk; d++)
        h += (double)ad->w_k[a * Dk + d] * k[d];
    return h;
}

/* ds times the additive score's derivatives, added to the pair's dq and
 * dk rows and to the weights' gradients: with t = tanh(h_a) and
 * u = w_v[a] (1 - t^2), d/dq = sum_a u w_q[a], d/dk = sum_a u w_k[a],
 * d/dw_v[a] = t, d/dw_q[a] = u q, d/dw_k[a] = u k. */
static void additive_grads(const ra_ref_score *sc, int64_t D, double ds,
                           const double *q, const double *k, double *dq,
                           double *dk, const ra_ref_grads *g)
{
    const ra_additive *ad = sc->additive;
    const int64_t Dk = sc->Dk > 0 ? sc->Dk : D;
    for (int64_t a = 0; a < ad->A; a++) {
        const double t = tanh(additive_hidden(sc, a, D, Dk, q, k));
        const double u = ds * ad->w_v[a] * (1.0 - t * t);
        for (int64_t d = 0; d < D; d++) {
            dq[d] += u * ad->w_q[a * D + d];
            if (g->dw_q)
                g->dw_q[a * D + d] += u * q[d];
        }
        for (int64_t d = 0; d < Dk; d++) {
            dk[d] += u * ad->w_k[a * Dk + d];
            if (g->dw_k)
                g->dw_k[a * Dk + d] += u * k[d];
        }
        if (g->dw_v)
            g->dw_v[a] += ds * t;
    }
}

/* The natural score of one pair, as the forward reference defines it. */
static double pair_score(const ra_ref_score *sc, int64_t D, const double *q,
                         const double *k)
{
    double s = 0.0;
    if (sc->score == RA_SCORE_ADDITIVE) {
        const ra_additive *ad = sc->additive;
        const int64_t Dk = sc->Dk > 0 ? sc->Dk : D;
        for (int64_t a = 0; a < ad->A; a++)
            s += (double)ad->w_v[a] * tanh(additive_hidden(sc, a, D, Dk, q, k));
        return s;
    }
    if (sc->score == RA_SCORE_GAUSSIAN) {
        for (int64_t d = 0; d < D; d++)
            s += (q[d] - k[d]) * (q[d] - k[d]);
        return -s / (2.0 * sc->sigma * sc->sigma);
    }
    for (int64_t d = 0; d < D; d++)
        s += q[d] * k[d];
    return s * sc->scale;
}

/* The weights of row i in p[0..m): exp(score - lse), 0 where hidden; returns
 * 0 when the row sees no key (then p is all 0). */
static int row_probs(const ra_ref_score *sc, int64_t i, int64_t m, int64_t D,
                     const ra_mask *mask, const ra_ref_grads *g, double *p)
{
    const double *qi = g->q + i * g->ldq;
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < m; j++) {
        p[j] = ra_ref_visible(mask, i, j)
                   ? pair_score(sc, D, qi, g->k + j * g->ldk)
                   : -INFINITY;
        if (p[j] > -INFINITY)
            ra_features_ref(sc->features, &p[j], NULL);
        if (sc->alibi && p[j] > -INFINITY) /* a bias: no derivative */
            p[j] += sc->alibi_slope * ra_ref_alibi_distance(mask, i, j);
        mx = p[j] > mx ? p[j] : mx;
    }
    if (mx == -INFINITY) {
        for (int64_t j = 0; j < m; j++)
            p[j] = 0.0;
        return 0;
    }
    if (sc->sink_on && sc->sink > mx)
        mx = sc->sink;
    for (int64_t j = 0; j < m; j++)
        sum += exp(p[j] - mx);
    if (sc->sink_on) /* the sink's column: in the sum, value 0 */
        sum += exp(sc->sink - mx);
    const double lse = mx + log(sum);
    for (int64_t j = 0; j < m; j++)
        p[j] = exp(p[j] - lse);
    return 1;
}

void ra_reference_backward(const ra_ref_score *sc, int64_t nq, int64_t m,
                           int64_t D, int64_t Dv, const ra_mask *mask,
                           const ra_ref_grads *g, double *p)
{
    const int gauss = sc->score == RA_SCORE_GAUSSIAN;
    const double c = gauss ? 1.0 / (sc->sigma * sc->sigma) : sc->scale;
    for (int64_t i = 0; i < nq; i++) {
        const double *qi = g->q + i * g->ldq, *doi = g->dout + i * g->lddo;
        double *dqi = g->dq + i * g->lddq;
        for (int64_t d = 0; d < D; d++)
            dqi[d] = 0.0;
        if (!row_probs(sc, i, m, D, mask, g, p))
            continue; /* sees no key: every gradient of the row is 0 */
        /* Drow = do . o = sum_j p_j (do . v_j) */
        double drow = 0.0;
        for (int64_t j = 0; j < m; j++)
            for (int64_t d = 0; d < Dv; d++)
                drow += p[j] * doi[d] * g->v[j * g->ldv + d];
        for (int64_t j = 0; j < m; j++) {
            if (p[j] == 0.0)
                continue;
            const double *kj = g->k + j * g->ldk, *vj = g->v + j * g->ldv;
            double dp = 0.0;
            for (int64_t d = 0; d < Dv; d++) {
                dp += doi[d] * vj[d];
                g->dv[j * g->lddv + d] += p[j] * doi[d];
            }
            double ds = p[j] * (dp - drow);
            if (sc->features) { /* through the features' maps */
                double s = pair_score(sc, D, qi, kj), slope;
                ra_features_ref(sc->features, &s, &slope);
                ds *= slope;
            }
            double *dkj = g->dk + j * g->lddk;
            if (sc->score == RA_SCORE_ADDITIVE) {
                additive_grads(sc, D, ds, qi, kj, dqi, dkj, g);
                continue;
            }
            for (int64_t d = 0; d < D; d++) {
                /* d score / dq and d score / dk of the pair */
                const double sq = gauss ? c * (kj[d] - qi[d]) : c * kj[d];
                const double sk = gauss ? c * (qi[d] - kj[d]) : c * qi[d];
                dqi[d] += ds * sq;
                dkj[d] += ds * sk;
            }
        }
    }
}
