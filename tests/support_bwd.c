/* support_bwd.c: see support_bwd.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support_bwd.h"

/* The columns of one (b, head) of a (B, len, heads, dim) tensor as a
 * (len, dim) double array. */
static void head_gather(const float *x, int64_t b, int64_t len, int64_t heads,
                        int64_t h, int64_t dim, double *out)
{
    for (int64_t i = 0; i < len; i++)
        for (int64_t d = 0; d < dim; d++)
            out[i * dim + d] = x[((b * len + i) * heads + h) * dim + d];
}

/* Adds a (len, dim) double array into one (b, head) of a (B, len, heads,
 * dim) double tensor. */
static void head_scatter_add(const double *x, int64_t b, int64_t len,
                             int64_t heads, int64_t h, int64_t dim,
                             double *out)
{
    for (int64_t i = 0; i < len; i++)
        for (int64_t d = 0; d < dim; d++)
            out[((b * len + i) * heads + h) * dim + d] += x[i * dim + d];
}

/* RoPE on the len rows (dim D) of one head at positions first, first + 1,
 * ... times sign (-1: the transpose). */
static void rope_rows(const ra_params *prm, double *x, int64_t len, int64_t D,
                      int64_t first, int64_t sign)
{
    for (int64_t i = 0; i < len; i++)
        ra_rope_row_ref(prm->num.rope, prm->num.rope_base, x + i * D, D,
                        sign * (first + i));
}

/* d sinks of head h over the rows of one (b, h): -sum over the rows of
 * p_sink (do . o'), from the fp64 forward's o' (N, Dv) and lse' (N). */
static void sink_grad(bwd_ref *r, double sink, int64_t N, int64_t Dv,
                      const double *dout, const double *o,
                      const double *lse, int64_t h)
{
    for (int64_t i = 0; i < N; i++) {
        double dot = 0.0;
        for (int64_t d = 0; d < Dv; d++)
            dot += dout[i * Dv + d] * o[i * Dv + d];
        r->dsinks[h] -= exp(sink - lse[i]) * dot;
    }
}

/* One (b, h): the forward state and the gradients, dk and dv summed into
 * the group's kv head. w holds the scratch arrays, in order q, k, v, do, o,
 * lse, dq, dk, dv, scores. */
static void ref_head(bwd_ref *r, const problem *p, const ra_params *prm,
                     const test_masks *mk, const float *dout, int64_t b,
                     int64_t h, double **w)
{
    const ra_shape *s = &p->s;
    const int64_t N = s->N, M = s->M, D = s->D, Dv = s->Dv;
    const int64_t Dk = ra_shape_dk(s), g = h / (s->H / s->G);
    const ra_ref_score sc = {.score = prm->num.score,
                             .scale = ra_params_scale(prm, s),
                             .sigma = prm->num.sigma,
                             .additive = prm->num.additive,
                             .Dk = Dk,
                             .alibi = prm->num.alibi,
                             .alibi_slope =
                                 prm->num.alibi
                                     ? ra_params_alibi_slope(prm, s->H, h)
                                     : 0,
                             .features = ra_features_of(&prm->num),
                             .sink_on = prm->num.sinks != NULL,
                             .sink = prm->num.sinks ? prm->num.sinks[h] : 0.0};
    const ra_mask m = {.causal = prm->num.causal,
                       .diag = M - N,
                       .window = prm->num.window,
                       .left = prm->num.window_left,
                       .right = prm->num.window_right,
                       .q_lens = mk->q_lens ? mk->q_lens + b : NULL,
                       .kv_lens = mk->kv_lens ? mk->kv_lens + b : NULL,
                       .q_seg = mk->q_seg ? mk->q_seg + b * N : NULL,
                       .k_seg = mk->kv_seg ? mk->kv_seg + b * M : NULL};
    head_gather(p->q, b, N, s->H, h, D, w[0]);
    head_gather(p->k, b, M, s->G, g, Dk, w[1]);
    head_gather(p->v, b, M, s->G, g, Dv, w[2]);
    head_gather(dout, b, N, s->H, h, Dv, w[3]);
    rope_rows(prm, w[0], N, D, M - N, 1);
    rope_rows(prm, w[1], M, Dk, 0, 1);
    const ra_ref_rows rr = {N, M, D, Dv, w[0], D, w[1], Dk, w[2], Dv, w[4], Dv,
                            w[5]};
    ra_reference_scored(&sc, &m, &rr, w[9]);
    if (prm->num.sinks)
        sink_grad(r, prm->num.sinks[h], N, Dv, w[3], w[4], w[5], h);
    for (int64_t i = 0; i < N; i++) {
        for (int64_t d = 0; d < Dv; d++)
            r->o[((b * N + i) * s->H + h) * Dv + d] = (float)w[4][i * Dv + d];
        r->lse[(b * s->H + h) * N + i] = (float)w[5][i];
    }
    memset(w[7], 0, sizeof(double) * (size_t)(M * Dk));
    memset(w[8], 0, sizeof(double) * (size_t)(M * Dv));
    const int64_t A = prm->num.additive ? prm->num.additive->A : 0;
    double *dw = r->dw;
    const ra_ref_grads gr = {w[0], w[1], w[2], w[3], D, Dk, Dv, Dv,
                             w[6], w[7], w[8], D, Dk, Dv,
                             dw, dw ? dw + A * D : NULL,
                             dw ? dw + A * (D + Dk) : NULL};
    ra_reference_backward(&sc, N, M, D, Dv, &m, &gr, w[9]);
    rope_rows(prm, w[6], N, D, M - N, -1);
    rope_rows(prm, w[7], M, Dk, 0, -1);
    head_scatter_add(w[6], b, N, s->H, h, D, r->dq);
    head_scatter_add(w[7], b, M, s->G, g, Dk, r->dk);
    head_scatter_add(w[8], b, M, s->G, g, Dv, r->dv);
}

void bwd_ref_make(bwd_ref *r, const problem *p, const ra_params *params,
                  const test_masks *masks, const float *dout)
{
    const ra_shape *s = &p->s;
    const test_masks none = {0};
    const int64_t N = s->N, M = s->M, D = s->D, Dv = s->Dv;
    const int64_t Dk = ra_shape_dk(s);
    const int additive = params->num.score == RA_SCORE_ADDITIVE;
    const int64_t A = additive ? params->num.additive->A : 0;
    r->o = malloc(sizeof(float) * (size_t)(s->B * N * s->H * Dv + 1));
    r->lse = malloc(sizeof(float) * (size_t)(s->B * s->H * N + 1));
    r->dq = calloc((size_t)(s->B * N * s->H * D + 1), sizeof(double));
    r->dk = calloc((size_t)(s->B * M * s->G * Dk + 1), sizeof(double));
    r->dv = calloc((size_t)(s->B * M * s->G * Dv + 1), sizeof(double));
    r->dw = additive ? calloc((size_t)(A * (D + Dk + 1)), sizeof(double))
                     : NULL;
    r->dsinks = params->num.sinks ? calloc((size_t)s->H, sizeof(double)) : NULL;
    const int64_t len[10] = {N * D, M * Dk, M * Dv, N * Dv, N * Dv,
                             N,     N * D,  M * Dk, M * Dv, M};
    double *w[10];
    for (int i = 0; i < 10; i++)
        w[i] = malloc(sizeof(double) * (size_t)(len[i] + 1));
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->H; h++)
            ref_head(r, p, params, masks ? masks : &none, dout, b, h, w);
    for (int i = 0; i < 10; i++)
        free(w[i]);
}

void bwd_ref_free(bwd_ref *r)
{
    free(r->o);
    free(r->lse);
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->dw);
    free(r->dsinks);
}

void bwd_tally_add(bwd_tally *t, int which, const float *got,
                   const double *ref, int64_t B, int64_t len, int64_t row,
                   const ra_slice *sl)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < sl->count; i++) {
            const int64_t pos = ra_slice_pos(sl, i);
            const float *gr = got + (b * sl->count + i) * row;
            const double *rr = ref + (b * len + pos) * row;
            for (int64_t d = 0; d < row; d++) {
                if (!isfinite(gr[d]))
                    t->nonfinite += 1;
                const double e = gr[d] - rr[d];
                t->err2[which] += e * e;
                t->ref2[which] += rr[d] * rr[d];
            }
        }
}

double bwd_tally_rel(const bwd_tally *t, int which)
{
    if (t->ref2[which] == 0.0)
        return t->err2[which] == 0.0 ? 0.0 : INFINITY;
    return sqrt(t->err2[which] / t->ref2[which]);
}

void case_masks_make(case_masks *cm, const ra_shape *s, int lens, int segs,
                     int64_t avg, uint64_t seed, const local_part *lp)
{
    const int64_t B = s->B;
    const ra_slice qs = {1, {{0, s->N, 1}}, s->N};
    const ra_slice ks = {1, {{0, s->M, 1}}, s->M};
    cm->lens = malloc(sizeof(int64_t) * (size_t)(2 * B));
    cm->seg = malloc(sizeof(int64_t) * (size_t)(B * (s->N + s->M)));
    cm->qseg_loc = malloc(sizeof(int64_t) * (size_t)(B * lp->qs.count + 1));
    cm->kseg_loc = malloc(sizeof(int64_t) * (size_t)(B * lp->ks.count + 1));
    ra_random_lens(seed, RA_STREAM_Q_LENS, B, s->N, cm->lens);
    ra_random_lens(seed, RA_STREAM_KV_LENS, B, s->M, cm->lens + B);
    ra_random_segments(seed, RA_STREAM_Q_SEGMENTS, B, s->N, avg, &qs,
                       cm->seg);
    ra_random_segments(seed, RA_STREAM_Q_SEGMENTS, B, s->M, avg, &ks,
                       cm->seg + B * s->N);
    slice_gather(cm->seg, B, s->N, 1, sizeof(int64_t), &lp->qs, cm->qseg_loc);
    slice_gather(cm->seg + B * s->N, B, s->M, 1, sizeof(int64_t), &lp->ks,
                 cm->kseg_loc);
    cm->global = (test_masks){lens ? cm->lens : NULL,
                              lens ? cm->lens + B : NULL,
                              segs ? cm->seg : NULL,
                              segs ? cm->seg + B * s->N : NULL};
    cm->local = (ra_masks){lens ? cm->lens : NULL, lens ? cm->lens + B : NULL,
                           segs ? cm->qseg_loc : NULL,
                           segs ? cm->kseg_loc : NULL};
}

void case_masks_free(case_masks *cm)
{
    free(cm->lens);
    free(cm->seg);
    free(cm->qseg_loc);
    free(cm->kseg_loc);
}
