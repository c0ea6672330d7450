/* matrix_ref.c: see matrix_ref.h. One (batch, query head) at a time: its
 * rows are loaded and rotated in fp64, every score materialised, the
 * softmax and its gradient taken row by row, then the gradients of q and k
 * rotated back and added into the outputs. Clarity over speed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "matrix_ref.h"

/* Scratch of one (b, h), as rows of the head's dims. */
typedef struct {
    double *q, *k, *v, *dout; /* (N, D) (M, D) (M, Dv) (N, Dv), rotated */
    double *dq, *dk;          /* (N, D), (M, D): gradients of rotated q, k */
    double *s;                /* (M): one row's scores, -inf when hidden */
    double *gq, *gk;          /* (D) each: one pair's score gradient */
} head_work;

/* Turns pair (a, b) of x by pos * base^(-2k/D) for pair k, times sign
 * (-1: the transpose, which takes a gradient back). */
static void rope_turn(const ra_params *p, double *x, int64_t D, double pos,
                      double sign)
{
    if (p->num.rope == RA_ROPE_NONE)
        return;
    for (int64_t kk = 0; kk < D / 2; kk++) {
        const double ang = sign * pos * pow(p->num.rope_base, -2.0 * kk / D);
        const int64_t a = p->num.rope == RA_ROPE_HALF ? kk : 2 * kk;
        const int64_t b = p->num.rope == RA_ROPE_HALF ? kk + D / 2 : 2 * kk + 1;
        const double xa = x[a], xb = x[b];
        x[a] = xa * cos(ang) - xb * sin(ang);
        x[b] = xb * cos(ang) + xa * sin(ang);
    }
}

/* One past the last index of x[0..len) holding id, or 0 when none does. */
static int64_t last_of(const int64_t *x, int64_t len, int64_t id)
{
    int64_t end = 0;
    for (int64_t t = 0; t < len; t++)
        if (x[t] == id)
            end = t + 1;
    return end;
}

/* Query i's aligned position i' in batch b (matrix_ref.h). */
static int64_t aligned(const mref_in *in, int64_t b, int64_t i)
{
    const int64_t N = in->s.N, M = in->s.M;
    if (in->p->num.align != RA_ALIGN_SEQUENCE)
        return i + M - N;
    if (in->q_seg) {
        const int64_t id = in->q_seg[b * N + i];
        return i + last_of(in->kv_seg + b * M, M, id) -
               last_of(in->q_seg + b * N, N, id);
    }
    return i + (in->kv_lens ? in->kv_lens[b] : M) -
           (in->q_lens ? in->q_lens[b] : N);
}

static int visible(const mref_in *in, int64_t b, int64_t i, int64_t j)
{
    const int64_t N = in->s.N, M = in->s.M, ip = aligned(in, b, i);
    const ra_params *p = in->p;
    if (p->num.causal && j > ip)
        return 0;
    if (p->num.window &&
        (j < ip - p->num.window_left || j > ip + p->num.window_right))
        return 0;
    if ((in->q_lens && i >= in->q_lens[b]) ||
        (in->kv_lens && j >= in->kv_lens[b]))
        return 0;
    return !in->q_seg || in->q_seg[b * N + i] == in->kv_seg[b * M + j];
}

/* The score of rotated rows q, k without ALiBi; with gq, gk (not NULL) also
 * its gradients with respect to q and k. */
static double pair_score(const mref_in *in, const double *q, const double *k,
                         double *gq, double *gk)
{
    const ra_params *p = in->p;
    const int64_t D = in->s.D;
    double s = 0.0;
    if (p->num.score == RA_SCORE_ADDITIVE) {
        const ra_additive *w = p->num.additive;
        if (gq) {
            memset(gq, 0, sizeof(double) * (size_t)D);
            memset(gk, 0, sizeof(double) * (size_t)D);
        }
        for (int64_t a = 0; a < w->A; a++) {
            double x = 0.0;
            for (int64_t d = 0; d < D; d++)
                x += w->w_q[a * D + d] * q[d] + w->w_k[a * D + d] * k[d];
            const double t = tanh(x), u = w->w_v[a] * (1.0 - t * t);
            s += w->w_v[a] * t;
            for (int64_t d = 0; gq && d < D; d++) {
                gq[d] += u * w->w_q[a * D + d];
                gk[d] += u * w->w_k[a * D + d];
            }
        }
        return s;
    }
    const int gauss = p->num.score == RA_SCORE_GAUSSIAN;
    const double c =
        gauss ? 1.0 / (p->num.sigma * p->num.sigma)
              : (isnan(p->num.scale) ? 1.0 / sqrt((double)D) : p->num.scale);
    for (int64_t d = 0; d < D; d++) {
        const double x = gauss ? q[d] - k[d] : q[d] * k[d];
        s += gauss ? -0.5 * c * x * x : c * x;
        if (gq) {
            gq[d] = gauss ? -c * x : c * k[d];
            gk[d] = gauss ? c * x : c * q[d];
        }
    }
    return s;
}

/* Loads head h of batch b into w: q at positions i', k at j, rotated. */
static void head_load(const mref_in *in, int64_t b, int64_t h, head_work *w)
{
    const ra_shape *s = &in->s;
    const int64_t g = h / (s->H / s->G), D = s->D, Dv = s->Dv;
    for (int64_t i = 0; i < s->N; i++) {
        for (int64_t d = 0; d < D; d++)
            w->q[i * D + d] = in->q[((b * s->N + i) * s->H + h) * D + d];
        for (int64_t d = 0; d < Dv; d++)
            w->dout[i * Dv + d] =
                in->dout[((b * s->N + i) * s->H + h) * Dv + d];
        rope_turn(in->p, w->q + i * D, D, (double)aligned(in, b, i), 1.0);
    }
    for (int64_t j = 0; j < s->M; j++) {
        for (int64_t d = 0; d < D; d++)
            w->k[j * D + d] = in->k[((b * s->M + j) * s->G + g) * D + d];
        for (int64_t d = 0; d < Dv; d++)
            w->v[j * Dv + d] = in->v[((b * s->M + j) * s->G + g) * Dv + d];
        rope_turn(in->p, w->k + j * D, D, (double)j, 1.0);
    }
    memset(w->dq, 0, sizeof(double) * (size_t)(s->N * D));
    memset(w->dk, 0, sizeof(double) * (size_t)(s->M * D));
}

/* Row i's scores (w->s), o row (Dv) and lse; returns the lse. */
static double row_forward(const mref_in *in, int64_t b, int64_t h, int64_t i,
                          head_work *w, double *o)
{
    const ra_shape *s = &in->s;
    const int64_t ip = aligned(in, b, i);
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < s->M; j++) {
        w->s[j] = -INFINITY;
        if (!visible(in, b, i, j))
            continue;
        w->s[j] = pair_score(in, w->q + i * s->D, w->k + j * s->D, NULL, NULL);
        if (in->p->num.alibi)
            w->s[j] -= in->slopes[h] * fabs((double)(j - ip));
        mx = fmax(mx, w->s[j]);
    }
    memset(o, 0, sizeof(double) * (size_t)s->Dv);
    if (mx == -INFINITY)
        return -INFINITY;
    for (int64_t j = 0; j < s->M; j++)
        sum += exp(w->s[j] - mx);
    const double lse = mx + log(sum);
    for (int64_t j = 0; j < s->M; j++) {
        const double pij = exp(w->s[j] - lse); /* 0 for a hidden key */
        for (int64_t d = 0; d < s->Dv; d++)
            o[d] += pij * w->v[j * s->Dv + d];
    }
    return lse;
}

/* Row i's part of every gradient, from its scores, o row and lse:
 * P = exp(S - lse), dv += P^T dout, dS = P (dout.v - dout.o), dq and dk
 * through the score's gradient. dv is the head's kv rows (M, Dv) of the
 * output. */
static void row_backward(const mref_in *in, int64_t i, head_work *w,
                         const double *o, double lse, double *dv, int64_t ldv)
{
    const ra_shape *s = &in->s;
    const int64_t D = s->D, Dv = s->Dv;
    const double *dout = w->dout + i * Dv;
    double drow = 0.0;
    for (int64_t d = 0; d < Dv; d++)
        drow += dout[d] * o[d];
    for (int64_t j = 0; j < s->M && lse > -INFINITY; j++) {
        if (w->s[j] == -INFINITY)
            continue;
        const double pij = exp(w->s[j] - lse);
        double dp = 0.0;
        for (int64_t d = 0; d < Dv; d++) {
            dp += dout[d] * w->v[j * Dv + d];
            dv[j * ldv + d] += pij * dout[d];
        }
        const double ds = pij * (dp - drow);
        pair_score(in, w->q + i * D, w->k + j * D, w->gq, w->gk);
        for (int64_t d = 0; d < D; d++) {
            w->dq[i * D + d] += ds * w->gq[d];
            w->dk[j * D + d] += ds * w->gk[d];
        }
    }
}

/* Takes the head's gradients of rotated q and k back through the rotation
 * and adds them into dq and dk (k's summed over the kv head's group). */
static void head_store(const mref_in *in, int64_t b, int64_t h, head_work *w,
                       mref_out *out)
{
    const ra_shape *s = &in->s;
    const int64_t g = h / (s->H / s->G), D = s->D;
    for (int64_t i = 0; i < s->N; i++) {
        rope_turn(in->p, w->dq + i * D, D, (double)aligned(in, b, i), -1.0);
        for (int64_t d = 0; d < D; d++)
            out->dq[((b * s->N + i) * s->H + h) * D + d] = w->dq[i * D + d];
    }
    for (int64_t j = 0; j < s->M; j++) {
        rope_turn(in->p, w->dk + j * D, D, (double)j, -1.0);
        for (int64_t d = 0; d < D; d++)
            out->dk[((b * s->M + j) * s->G + g) * D + d] += w->dk[j * D + d];
    }
}

static void ref_head(const mref_in *in, int64_t b, int64_t h, head_work *w,
                     mref_out *out)
{
    const ra_shape *s = &in->s;
    const int64_t g = h / (s->H / s->G), Dv = s->Dv;
    double *dv = out->dv + (b * s->M * s->G + g) * Dv;
    head_load(in, b, h, w);
    for (int64_t i = 0; i < s->N; i++) {
        double *o = out->o + ((b * s->N + i) * s->H + h) * Dv;
        const double lse = row_forward(in, b, h, i, w, o);
        out->lse[(b * s->H + h) * s->N + i] = lse;
        row_backward(in, i, w, o, lse, dv, s->G * Dv);
    }
    head_store(in, b, h, w, out);
}

int mref_compute(const mref_in *in, mref_out *out)
{
    const ra_shape *s = &in->s;
    const int64_t B = s->B, N = s->N, M = s->M, H = s->H, G = s->G;
    const int64_t D = s->D, Dv = s->Dv;
    const int64_t nout = B * N * H * Dv + B * H * N + B * N * H * D +
                         B * M * G * D + B * M * G * Dv;
    const int64_t nwork = 2 * N * D + 2 * M * D + M * Dv + N * Dv + M + 2 * D;
    double *mem = calloc((size_t)(nout + nwork), sizeof(double));
    out->mem = mem;
    if (!mem)
        return -1;
    out->o = mem;
    out->lse = out->o + B * N * H * Dv;
    out->dq = out->lse + B * H * N;
    out->dk = out->dq + B * N * H * D;
    out->dv = out->dk + B * M * G * D;
    head_work w;
    w.q = out->dv + B * M * G * Dv;
    w.k = w.q + N * D;
    w.v = w.k + M * D;
    w.dout = w.v + M * Dv;
    w.dq = w.dout + N * Dv;
    w.dk = w.dq + N * D;
    w.s = w.dk + M * D;
    w.gq = w.s + M;
    w.gk = w.gq + D;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            ref_head(in, b, h, &w, out);
    return 0;
}

void mref_free(mref_out *out)
{
    free(out->mem);
    out->mem = NULL;
}

int64_t mref_rows_multi(const mref_in *in)
{
    int64_t rows = 0;
    for (int64_t b = 0; b < in->s.B; b++)
        for (int64_t i = 0; i < in->s.N; i++) {
            int64_t seen = 0;
            for (int64_t j = 0; j < in->s.M && seen < 2; j++)
                seen += visible(in, b, i, j);
            rows += seen > 1;
        }
    return rows;
}

/* The power-of-two sequence: start 2^(-8/n), ratio the same. */
static double pow2_slope(int64_t n, int64_t idx)
{
    const double start = exp2(-8.0 / (double)n);
    double x = start;
    for (int64_t i = 0; i < idx; i++)
        x *= start;
    return x;
}

void mref_alibi_slopes(int64_t H, double *slopes)
{
    int64_t p = 1;
    while (2 * p <= H)
        p *= 2;
    for (int64_t h = 0; h < p; h++)
        slopes[h] = pow2_slope(p, h);
    for (int64_t h = p; h < H; h++) /* elements 0, 2, 4, ... of 2p's */
        slopes[h] = pow2_slope(2 * p, 2 * (h - p));
}
