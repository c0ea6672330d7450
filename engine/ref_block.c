/* ref_block.c: see ref_block.h. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernel.h"
#include "ref_block.h"

void ra_ref_project(const float *W, int64_t A, int64_t D, const double *rows,
                    int64_t n, double *out)
{
    for (int64_t x = 0; x < n; x++)
        for (int64_t a = 0; a < A; a++) {
            double acc = 0.0;
            for (int64_t d = 0; d < D; d++)
                acc += (double)W[a * D + d] * rows[x * D + d];
            out[x * A + a] = acc;
        }
}

/* The additive score of every (row, key) pair for head h into sc. */
static void scores_additive(const ra_ref_block *x, int64_t h)
{
    const ra_additive *ad = x->p->num.additive;
    const int64_t H = x->s->H, G = x->s->G, g = h / (H / G);
    for (int64_t r = 0; r < x->nr; r++)
        for (int64_t j = 0; j < x->kb; j++) {
            const double *qa = x->qa + (r * H + h) * ad->A;
            const double *ka = x->ka + (j * G + g) * ad->A;
            double e = 0.0;
            for (int64_t a = 0; a < ad->A; a++)
                e += (double)ad->w_v[a] * tanh(qa[a] + ka[a]);
            x->sc[r * x->kb + j] = e;
        }
}

/* Pass 1 for head h: the block's scores (nr, kb) into sc, mapped by the
 * score features (the dot score's only: the call refuses the others). */
static void scores(const ra_ref_block *x, int64_t h)
{
    const ra_shape *s = x->s;
    const int64_t H = s->H, G = s->G, D = s->D, nr = x->nr, kb = x->kb;
    const int64_t g = h / (H / G), Dk = ra_shape_dk(s);
    if (x->p->num.score == RA_SCORE_ADDITIVE) {
        scores_additive(x, h);
        return;
    }
    const int gauss = x->p->num.score == RA_SCORE_GAUSSIAN;
    const double inv2 = gauss ? 1.0 / (x->p->num.sigma * x->p->num.sigma) : 0.0;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)kb,
                (int)D, gauss ? inv2 : x->scale, x->q + h * D, (int)(H * D),
                x->k + g * Dk, (int)(G * Dk), 0.0, x->sc, (int)kb);
    const ra_numerics *mapped = gauss ? NULL : ra_features_of(&x->p->num);
    for (int64_t i = 0; mapped && i < nr * kb; i++)
        ra_features_ref(mapped, &x->sc[i], NULL);
    if (!gauss)
        return;
    for (int64_t r = 0; r < nr; r++) { /* -(|q|^2 + |k|^2) / (2 sigma^2) */
        const double *qr = x->q + (r * H + h) * D;
        double qq = 0.0;
        for (int64_t d = 0; d < D; d++)
            qq += qr[d] * qr[d];
        for (int64_t j = 0; j < kb; j++) {
            const double *kr = x->k + (j * G + g) * Dk;
            double kk = 0.0;
            for (int64_t d = 0; d < D; d++)
                kk += kr[d] * kr[d];
            x->sc[r * kb + j] -= 0.5 * inv2 * (qq + kk);
        }
    }
}

/* Pass 2 for row r: the mask (-inf where hidden) and ALiBi's bias; returns
 * the row's largest score. */
static double row_mask(const ra_ref_block *x, int64_t r, double slope)
{
    const int64_t kb = x->kb, qd = x->qat[r];
    const unsigned char *vis = x->vis + r * kb;
    double *row = x->sc + r * kb, bmax = -INFINITY;
    if (slope != 0.0)
        for (int64_t j = 0; j < kb; j++)
            row[j] -= slope * fabs((double)(x->kpos[j] - qd));
    for (int64_t j = 0; j < kb; j++) {
        row[j] = vis[j] ? row[j] : -INFINITY;
        bmax = row[j] > bmax ? row[j] : bmax;
    }
    return bmax;
}

/* Head h's ALiBi slope, 0 without ALiBi. */
static double block_slope(const ra_ref_block *x, int64_t h)
{
    return x->p->num.alibi ? ra_params_alibi_slope(x->p, x->s->H, h) : 0.0;
}

void ra_ref_block_scores(const ra_ref_block *x, int64_t h)
{
    const double slope = block_slope(x, h);
    scores(x, h);
    for (int64_t r = 0; r < x->nr; r++)
        row_mask(x, r, slope);
}

/* Passes 2 and 3 for row r of head h: mask and bias, then the online
 * softmax (the row's weights replace its scores). */
static void row_softmax(const ra_ref_block *x, int64_t h, int64_t r,
                        double slope)
{
    const int64_t nr = x->nr, kb = x->kb, Dv = x->s->Dv;
    double *row = x->sc + r * kb;
    const double bmax = row_mask(x, r, slope);
    double *mx = x->mx + h * nr + r, *sum = x->sum + h * nr + r;
    double *acc = x->acc + (h * nr + r) * Dv;
    const double mnew = bmax > *mx ? bmax : *mx;
    if (mnew == -INFINITY) { /* nothing visible yet */
        memset(row, 0, sizeof(double) * (size_t)kb);
        return;
    }
    const double corr = exp(*mx - mnew); /* 0 when mx was -inf */
    *sum *= corr;
    for (int64_t d = 0; d < Dv; d++)
        acc[d] *= corr;
    for (int64_t d = 0; x->acc_abs && d < Dv; d++)
        x->acc_abs[(h * nr + r) * Dv + d] *= corr;
    *mx = mnew;
    for (int64_t j = 0; j < kb; j++)
        row[j] -= mnew;
    ra_ref_exp(row, kb);
    for (int64_t j = 0; j < kb; j++)
        *sum += row[j];
}

void ra_ref_block_fold(const ra_ref_block *x, int64_t h)
{
    const ra_shape *s = x->s;
    const int64_t nr = x->nr, kb = x->kb, Dv = s->Dv, G = s->G;
    const int64_t g = h / (s->H / G);
    const double slope = block_slope(x, h);
    scores(x, h);
    for (int64_t r = 0; r < nr; r++)
        row_softmax(x, h, r, slope);
    /* pass 4: acc += P V (and P |V| for the bf16 tolerance) */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)Dv,
                (int)kb, 1.0, x->sc, (int)kb, x->v + g * Dv, (int)(G * Dv),
                1.0, x->acc + h * nr * Dv, (int)Dv);
    if (x->acc_abs)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr,
                    (int)Dv, (int)kb, 1.0, x->sc, (int)kb, x->va + g * Dv,
                    (int)(G * Dv), 1.0, x->acc_abs + h * nr * Dv, (int)Dv);
}

/* This thread's CPU seconds (the rates are per core, whatever else the
 * machine runs). */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The rates are those of a check's typical product: the scores of
 * RATE_M rows against RATE_N keys of dim RATE_K (packing and all). */
enum { RATE_M = 512, RATE_N = 2048, RATE_K = 64, RATE_EXP = 1 << 18,
       RATE_REPS = 5 };

void ra_ref_rates(double *madd, double *exps)
{
    const size_t m = RATE_M, n = RATE_N, k = RATE_K;
    const double work = (double)(m * n * k);
    double *a = malloc(sizeof(double) * (m * k + n * k + m * n));
    *madd = *exps = 0.0;
    for (size_t i = 0; a && i < m * k + n * k; i++)
        a[i] = (double)(i % 7) * 0.125 - 0.375;
    double *c = a ? a + m * k + n * k : NULL;
    const int blas = ra_blas_enter(1);
    for (int r = 0; a && r < RATE_REPS; r++) {
        double t = now();
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n,
                    (int)k, 1.0, a, (int)k, a + m * k, (int)k, 0.0, c,
                    (int)n);
        t = now() - t;
        if (t > 0 && work / t > *madd)
            *madd = work / t;
        for (size_t i = 0; i < RATE_EXP; i++)
            c[i] = -(double)(i & 1023) * 0x1p-6;
        t = now();
        ra_ref_exp(c, RATE_EXP);
        t = now() - t;
        if (t > 0 && RATE_EXP / t > *exps)
            *exps = RATE_EXP / t;
    }
    ra_blas_leave(blas);
    free(a);
}
