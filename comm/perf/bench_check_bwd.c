/* bench_check_bwd.c: the exact check of a backward pass (bench_check.h;
 * ringattn-sim's exact mode). Every rank's rows of dq, dk and dv are
 * gathered on rank 0, which regenerates the seed's inputs whole (as bench
 * makes them, bench_inputs_make) and compares them with the fp64 reference
 * gradients (ra_reference_backward, engine/reference_bwd.c) by the one
 * tally (compare.h): relative Frobenius errors under RA_TOLERANCE, the
 * test suite's rule (tests/test_backward_mpi.c). For fp32 products and
 * wire; collective. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backward.h"
#include "bench_run.h"
#include "kernel.h"

enum { BWD_DQ = 0, BWD_DK = 1, BWD_DV = 2, BWD_N = 3 };

/* One gradient (B, len, heads, dim): this rank's rows and, on rank 0, the
 * whole tensor they are gathered into at their global rows. */
typedef struct {
    const float *mine;
    int64_t len, heads, dim;
    float *whole;
} grad_view;

static int gather_grad(const bench_bwd_check *r, grad_view *g)
{
    const int P = r->P, root = r->rank == 0;
    const int64_t B = r->s->B, row = g->heads * g->dim;
    int *cnt = calloc((size_t)(2 * P), sizeof(int));
    float *all =
        root ? malloc(sizeof(float) * (size_t)(B * g->len * row)) : NULL;
    int rc = cnt && (!root || all) ? 0 : -1;
    for (int p = 0; rc == 0 && p < P; p++) {
        const ra_slice sl = ra_params_slice(r->p, r->layout, g->len, p, P);
        cnt[p] = (int)(B * sl.count * row);
        cnt[P + p] = p ? cnt[P + p - 1] + cnt[p - 1] : 0;
    }
    if (rc == 0)
        rc = MPI_Gatherv(g->mine, cnt[r->rank], MPI_FLOAT, all, cnt, cnt + P,
                         MPI_FLOAT, 0, r->comm) == MPI_SUCCESS
                 ? 0
                 : -1;
    for (int p = 0; rc == 0 && root && p < P; p++) {
        const ra_slice sl = ra_params_slice(r->p, r->layout, g->len, p, P);
        const float *src = all + cnt[P + p];
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < sl.count; i++)
                memcpy(g->whole + (b * g->len + ra_slice_pos(&sl, i)) * row,
                       src + (b * sl.count + i) * row,
                       sizeof(float) * (size_t)row);
    }
    free(cnt);
    free(all);
    return rc;
}

/* Column block [c0, c0 + w) of rows of a (rows, ld) float tensor, as
 * fp64 (rows, w). */
static void take(const float *x, int64_t rows, int64_t ld, int64_t c0,
                 int64_t w, double *out)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t d = 0; d < w; d++)
            out[i * w + d] = x[i * ld + c0 + d];
}

/* The whole inputs, fp64 per head, and the reference's outputs. */
typedef struct {
    float *q, *k, *v, *dout;
    double *qd, *kd, *vd, *dod, *dq, *dk, *dv, *scores;
} ref_work;

/* Column block [c0, c0 + w) of rows of got (rows, ld) against ref
 * (rows, w), into t. */
static void tally(const float *got, int64_t rows, int64_t ld, int64_t c0,
                  int64_t w, const double *ref, ra_tally *t)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t d = 0; d < w; d++)
            ra_tally_o(t, got[i * ld + c0 + d], ref[i * w + d]);
}

/* Batch b, kv head g: the reference gradients of its query heads into
 * w->dq (per head, tallied at once) and w->dk, w->dv (summed over the
 * group), tallied against the gathered whole gradients. */
static void ref_group(const bench_bwd_check *r, ref_work *w, int64_t b, int64_t g,
                      const grad_view gv[BWD_N], ra_tally err[BWD_N])
{
    const ra_shape *s = r->s;
    const ra_params *p = r->p;
    const int64_t N = s->N, M = s->M, D = s->D, Dv = s->Dv, rep = s->H / s->G;
    const ra_ref_score sc = {.score = RA_SCORE_DOT,
                             .scale = ra_params_scale(p, s),
                             .Dk = D};
    const ra_mask mk = {.causal = p->num.causal,
                        .diag = M - N,
                        .window = p->num.window,
                        .left = p->num.window_left,
                        .right = p->num.window_right};
    take(w->k + b * M * s->G * D, M, s->G * D, g * D, D, w->kd);
    take(w->v + b * M * s->G * Dv, M, s->G * Dv, g * Dv, Dv, w->vd);
    memset(w->dk, 0, sizeof(double) * (size_t)(M * D));
    memset(w->dv, 0, sizeof(double) * (size_t)(M * Dv));
    for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
        take(w->q + b * N * s->H * D, N, s->H * D, h * D, D, w->qd);
        take(w->dout + b * N * s->H * Dv, N, s->H * Dv, h * Dv, Dv, w->dod);
        const ra_ref_grads rg = {w->qd, w->kd, w->vd, w->dod, D, D, Dv,
                                 Dv,    w->dq, w->dk, w->dv,  D, D, Dv};
        ra_reference_backward(&sc, N, M, D, Dv, &mk, &rg, w->scores);
        tally(gv[BWD_DQ].whole + b * N * s->H * D, N, s->H * D, h * D, D, w->dq,
              &err[BWD_DQ]);
    }
    tally(gv[BWD_DK].whole + b * M * s->G * D, M, s->G * D, g * D, D, w->dk,
          &err[BWD_DK]);
    tally(gv[BWD_DV].whole + b * M * s->G * Dv, M, s->G * Dv, g * Dv, Dv, w->dv,
          &err[BWD_DV]);
}

/* Rank 0: the seed's whole inputs and the reference of every batch and
 * head; the largest relative error, or INFINITY when memory ran out. */
static double ref_all(const bench_bwd_check *r, const grad_view gv[BWD_N])
{
    const ra_shape *s = r->s;
    const int64_t N = s->N, M = s->M, D = s->D, Dv = s->Dv, B = s->B;
    const ra_slice qs = {1, {{0, N, 1}}, N}, ks = {1, {{0, M, 1}}, M};
    const int64_t L = N > M ? N : M, W = D > Dv ? D : Dv;
    ref_work w = {malloc(sizeof(float) * (size_t)(B * N * s->H * D)),
                  malloc(sizeof(float) * (size_t)(B * M * s->G * D)),
                  malloc(sizeof(float) * (size_t)(B * M * s->G * Dv)),
                  malloc(sizeof(float) * (size_t)(B * N * s->H * Dv))};
    double *block = malloc(sizeof(double) * (size_t)(7 * L * W + M));
    ra_tally err[BWD_N] = {{0}};
    double worst = INFINITY;
    if (w.q && w.k && w.v && w.dout && block) {
        double **at[] = {&w.qd, &w.kd, &w.vd, &w.dod, &w.dq, &w.dk, &w.dv};
        for (int i = 0; i < 7; i++)
            *at[i] = block + i * L * W;
        w.scores = block + 7 * L * W;
        const bench_operands whole = {.qs = qs, .ks = ks, .q = w.q, .k = w.k,
                                      .v = w.v, .dout = w.dout};
        bench_inputs_make(r->seed, s, 1, &whole);
        for (int64_t b = 0; b < B; b++)
            for (int64_t g = 0; g < s->G; g++)
                ref_group(r, &w, b, g, gv, err);
        worst = 0;
        for (int i = 0; i < BWD_N; i++) {
            ra_tally t = {0};
            ra_tally_merge(&t, &err[i]); /* its rel_o */
            const double e = t.rel_o;
            worst = isfinite(e) && e > worst ? e
                    : isfinite(e)            ? worst
                                             : INFINITY;
        }
    }
    free(w.q);
    free(w.k);
    free(w.v);
    free(w.dout);
    free(block);
    return worst;
}

int bench_check_backward(const bench_bwd_check *r, double *err)
{
    const ra_shape *s = r->s;
    grad_view gv[BWD_N] = {{r->dq, s->N, s->H, s->D, NULL},
                           {r->dk, s->M, s->G, s->D, NULL},
                           {r->dv, s->M, s->G, s->Dv, NULL}};
    int rc = 0;
    for (int i = 0; i < BWD_N; i++) {
        if (r->rank == 0 &&
            !(gv[i].whole =
                  malloc(sizeof(float) *
                         (size_t)(s->B * gv[i].len * gv[i].heads * gv[i].dim))))
            rc = -1;
        int any = rc;
        MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MIN, r->comm);
        if (any == 0)
            rc = gather_grad(r, &gv[i]);
        else
            rc = -1;
    }
    *err = r->rank == 0 ? (rc == 0 ? ref_all(r, gv) : INFINITY) : 0;
    MPI_Bcast(err, 1, MPI_DOUBLE, 0, r->comm);
    for (int i = 0; i < BWD_N; i++)
        free(gv[i].whole);
    return *err < RA_TOLERANCE;
}
