/* ref_grads.c: see ref_grads.h. */
#include <cblas.h>
#include <math.h>

#include "kernel.h"
#include "ref_grads.h"

/* Pass 2: sc (nr, kb) from masked scores to P = exp(score - lse); a row
 * that sees nothing (lse -inf) has P = 0. */
static void block_probs(const ra_ref_block *x, int64_t h, const double *lse)
{
    for (int64_t r = 0; r < x->nr; r++) {
        const double l = lse[h * x->nr + r];
        double *row = x->sc + r * x->kb;
        for (int64_t j = 0; j < x->kb; j++) /* -inf - lse stays -inf */
            row[j] = l == -INFINITY ? -INFINITY : row[j] - l;
        ra_ref_exp(row, x->kb);
    }
}

/* Pass 4 (Gaussian): the score's derivative has a -q term (dq) and a
 * -k term (dk): y_r -= c t_r xs_r for the rows r of xs and y (stride ld,
 * D values), t_r the sum of row r of dS (by_row: dq) or of column r. */
static void gauss_term(const ra_ref_block *x, const double *ds, int by_row,
                       double c, const double *xs, double *y, int64_t ld,
                       int64_t D)
{
    const int64_t nr = x->nr, kb = x->kb;
    for (int64_t r = 0; r < (by_row ? nr : kb); r++) {
        double t = 0.0;
        for (int64_t i = 0; i < (by_row ? kb : nr); i++)
            t += by_row ? ds[r * kb + i] : ds[i * kb + r];
        for (int64_t d = 0; d < D; d++)
            y[r * ld + d] -= c * t * xs[r * ld + d];
    }
}

/* The score features' derivative of every pair of the dot score's
 * block into d (nr, kb), from the scores recomputed: q and k are head h's
 * and its kv head's rows. */
static void cap_slopes(const ra_ref_block *x, const double *q,
                       const double *k, double *d)
{
    const ra_shape *s = x->s;
    const int64_t nr = x->nr, kb = x->kb;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)kb,
                (int)s->D, x->scale, q, (int)(s->H * s->D), k,
                (int)(s->G * ra_shape_dk(s)), 0.0, d, (int)kb);
    for (int64_t i = 0; i < nr * kb; i++) {
        double sc = d[i];
        ra_features_ref(&x->p->num, &sc, &d[i]);
    }
}

void ra_ref_block_backward(const ra_ref_block *x, int64_t h,
                           const ra_ref_bgrads *g)
{
    const ra_shape *s = x->s;
    const int64_t H = s->H, G = s->G, D = s->D, Dv = s->Dv;
    const int64_t Dk = ra_shape_dk(s), gh = h / (H / G);
    const int nr = (int)x->nr, kb = (int)x->kb;
    const int gauss = x->p->num.score == RA_SCORE_GAUSSIAN;
    const double c =
        gauss ? 1.0 / (x->p->num.sigma * x->p->num.sigma) : x->scale;
    const double *q = x->q + h * D, *k = x->k + gh * Dk;
    const double *dout = g->dout + h * Dv;
    ra_ref_block_scores(x, h);
    const int mapped = ra_features_on(&x->p->num);
    if (mapped) /* the features' derivative, in dp for now */
        cap_slopes(x, q, k, g->dp);
    block_probs(x, h, g->lse);
    for (int64_t r = 0; g->pv && r < nr; r++)
        for (int64_t j = 0; j < kb; j++)
            g->psum[h * nr + r] += x->sc[r * kb + j];
    if (g->pv)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, (int)Dv,
                    kb, 1.0, x->sc, kb, x->v + gh * Dv, (int)(G * Dv), 1.0,
                    g->pv + h * Dv, (int)(H * Dv));
    /* pass 3: dv += P^T do; P times the cap's derivative; dP = do V^T;
     * dS = P (dP - Drow) */
    if (g->dv)
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kb, (int)Dv, nr,
                    1.0, x->sc, kb, dout, (int)(H * Dv), 1.0, g->dv + gh * Dv,
                    (int)(G * Dv));
    for (int64_t i = 0; mapped && i < (int64_t)nr * kb; i++)
        x->sc[i] *= g->dp[i];
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, kb, (int)Dv,
                1.0, dout, (int)(H * Dv), x->v + gh * Dv, (int)(G * Dv), 0.0,
                g->dp, kb);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < kb; j++)
            g->dp[r * kb + j] = x->sc[r * kb + j] *
                                (g->dp[r * kb + j] - g->drow[h * nr + r]);
    /* pass 4: dq += c dS K, dk += c dS^T Q (Gaussian: minus the own row) */
    if (g->dq) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, (int)D, kb,
                    c, g->dp, kb, k, (int)(G * Dk), 1.0, g->dq + h * D,
                    (int)(H * D));
        if (gauss)
            gauss_term(x, g->dp, 1, c, q, g->dq + h * D, H * D, D);
    }
    if (g->dk) {
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kb, (int)Dk, nr,
                    c, g->dp, kb, q, (int)(H * D), 1.0, g->dk + gh * Dk,
                    (int)(G * Dk));
        if (gauss)
            gauss_term(x, g->dp, 0, c, k, g->dk + gh * Dk, G * Dk, Dk);
    }
}
