/* ring.c: the ring row of the strategy table (strategy.h): its set-up
 * and tear-down once the call is open, the additive score's projections,
 * and the forward with its attention-map pass (the steps themselves are
 * in ring_pass.c, the backward in ring_bwd.c). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "agree.h"
#include "internal.h"
#include "ring.h"

/* The local rows whose global positions lie in [map->i0, map->i1): one
 * range of local indices, since positions increase along a slice. */
static ra_range map_rows(const ra_slice *qs, const ra_attn_map *map)
{
    int64_t a = 0, z;
    while (a < qs->count && ra_slice_pos(qs, a) < map->i0)
        a++;
    z = a;
    while (z < qs->count && ra_slice_pos(qs, z) < map->i1)
        z++;
    return (ra_range){a, z - a};
}

ra_range ra_attn_map_rows(ra_layout layout, const ra_numerics *num, int64_t N,
                          int rank, int nranks, const ra_attn_map *map)
{
    if (!map)
        return (ra_range){0, 0};
    const ra_slice qs = ra_layout_slice(layout, num, N, rank, nranks);
    return map_rows(&qs, map);
}

/* Sizes and plan of the ring on this rank (no allocation). */
static ra_status ring_size(ring_state *rs)
{
    const strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    rs->mmax = strat_slice_most(c, s->M);
    /* the additive score sends the keys' projections W_k k (A per head)
     * around the ring instead of the keys, and works on W_q q */
    const int64_t A =
        p->num.score == RA_SCORE_ADDITIVE ? p->num.additive->A : 0;
    rs->row_k = s->G * (A ? A : s->D);
    rs->row_v = s->G * s->Dv;
    rs->wire16 = ra_params_wire_bf16(p);
    rs->plan = ring_plan_make(s, p, c->masks, c->P);
    rs->last = ring_plan_last_step(&rs->plan);
    rs->steps_total = (rs->last + 1) * (c->map ? 2 : 1);
    if (s->B * rs->mmax > INT_MAX || rs->row_k + rs->row_v > INT_MAX)
        return ra_error_set(RA_ERR_ARG, "ring: a K/V block of %lld rows of "
                            "%lld floats cannot be described to MPI (counts "
                            "are int); use more ranks",
                            (long long)(s->B * rs->mmax),
                            (long long)(rs->row_k + rs->row_v));
    return RA_OK;
}

/* The ring's arrays, carved out of one block (ring_setup): the two K/V
 * blocks (with wire16 in bf16, and one fp32 block they are widened into)
 * and their ids, the held keys' positions, the additive
 * projections; those a call does not use are not carved. */
static void ring_carve(void *state, const strat_call *c, ra_carver *cv)
{
    ring_state *rs = state;
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    const int64_t rows = s->B * rs->mmax;
    for (int i = 0; i < 2; i++) {
        if (i == 0 || !rs->wire16)
            rs->buf[i].kv = ra_carve(cv, rows * (rs->row_k + rs->row_v),
                                     sizeof(float));
        if (rs->wire16)
            rs->w16[i] = ra_carve(cv, rows * (rs->row_k + rs->row_v),
                                  sizeof(uint16_t));
        if (c->segs)
            rs->buf[i].seg = ra_carve(cv, rows, sizeof(int64_t));
    }
    rs->kpos = ra_carve(cv, rs->mmax, sizeof(int64_t));
    if (p->num.score == RA_SCORE_ADDITIVE) {
        const int64_t qp[4] = {s->B, c->n, s->H, p->num.additive->A};
        rs->qp = ra_carve(cv, ra_count_checked(4, qp), sizeof(float));
        rs->kp = ra_carve(cv, s->B * c->m_own * rs->row_k, sizeof(float));
    }
}

/* The additive score's projections: rows of q (B n H, D) and k (B m G, Dk)
 * times W_q^T and W_k^T, once per call. */
static void ring_project(ring_state *rs)
{
    const strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    const ra_additive *ad = c->params->num.additive;
    const int64_t Dk = ra_shape_dk(s);
    if (c->n > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
                    (int)(s->B * c->n * s->H), (int)ad->A, (int)s->D, 1.0f,
                    c->q, (int)s->D, ad->w_q, (int)s->D, 0.0f, rs->qp,
                    (int)ad->A);
    if (c->m_own > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
                    (int)(s->B * c->m_own * s->G), (int)ad->A, (int)Dk, 1.0f,
                    c->k, (int)Dk, ad->w_k, (int)Dk, 0.0f, rs->kp, (int)ad->A);
}

ra_status ring_setup(ring_state *rs, strat_call *c)
{
    rs->c = c;
    ra_status st = ring_size(rs);
    if (st == RA_OK)
        st = strat_alloc(c, ring_carve, rs, "the ring buffers", &rs->mem,
                         &rs->ws);
    if (st != RA_OK)
        return st;
    strat_block_init(c, c->n, c->qpos, c->segs ? c->masks->q_segments : NULL,
                     &rs->blk);
    rs->blk.mask.kpos = rs->kpos;
    if (c->params->num.score == RA_SCORE_ADDITIVE) {
        rs->blk.D = c->params->num.additive->A;
        rs->blk.w_v = c->params->num.additive->w_v;
        ring_project(rs);
    }
    return RA_OK;
}

void ring_free(ring_state *rs)
{
    strat_free(rs->c, rs->mem, NULL, 0, rs->ws);
}

/* The forward pass: fold each block into (o, lse). */
typedef struct {
    const float *q; /* or its additive projection */
    float *o, *lse;
} forward_arg;

static void visit_forward(ring_state *rs, const float *kb, const float *vb,
                          ring_reqs *rq, void *arg)
{
    forward_arg *fa = arg;
    const ra_fwd_ops ops = {fa->q, kb, vb, fa->o, fa->lse,
                            rs->c->may_poll ? ring_poll : NULL, rq};
    ra_kernel_forward_block(&rs->blk, &ops, rs->ws);
}

/* The forward's state between steps: the running o (B, n, H, Dv) and lse
 * (B, H, n), held in the caller's outputs (a row's o is read only once
 * its lse is finite). */
static void state_forward(ring_state *rs, int t, ra_state *st, void *arg)
{
    const forward_arg *fa = arg;
    const strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    (void)t;
    st->pass = "forward";
    st->nparts = 2;
    st->part[0] = (ra_state_part){"o", fa->o, s->B * c->n * s->H * s->Dv};
    st->part[1] = (ra_state_part){"lse", fa->lse, s->B * s->H * c->n};
}

/* The attention-map pass: write each block's columns of the weights. */
typedef struct {
    const float *q;
    const float *lse;
    ra_range rows;
    const ra_attn_map *map;
} map_arg;

static void visit_map(ring_state *rs, const float *kb, const float *vb,
                      ring_reqs *rq, void *arg)
{
    (void)vb;
    map_arg *ma = arg;
    const ra_map_ops ops = {ma->rows.start, ma->rows.count, ma->map->heads,
                            ma->map->nheads, ma->q, kb, ma->lse,
                            ma->map->out, rs->c->shape->M,
                            rs->c->may_poll ? ring_poll : NULL, rq};
    ra_kernel_probs(&rs->blk, &ops, rs->ws);
}

/* The passes: the forward, then with a map a second pass that writes the
 * exact weights of the chosen rows from the final LSE. */
static ra_status ring_run(ring_state *rs)
{
    strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    ra_state_open(s->B, c->n, s->H, c->lse, c->threads);
    ring_pack_own(rs);
    forward_arg fa = {rs->qp ? rs->qp : c->q, c->o, c->lse};
    const ring_pass_ops fwd = {visit_forward, NULL, NULL, &fa,
                               state_forward};
    ra_status st = ra_agree(c->comm, ring_resume(rs, &fwd));
    if (st == RA_OK)
        st = ring_pass(rs, &fwd);
    ra_state_close(s->B, c->n, s->H, s->Dv, c->o, c->lse, c->threads);
    ra_workspace_busy(rs->ws, &c->tm->thread_busy_min,
                      &c->tm->thread_busy_max);
    if (st == RA_OK && c->map) {
        const ra_slice qs = ra_params_slice(c->params, c->lay, s->N, c->r, c->P);
        map_arg ma = {fa.q, c->lse, map_rows(&qs, c->map), c->map};
        const ring_pass_ops probs = {visit_map, NULL, NULL, &ma};
        ring_pack_own(rs); /* the own block to the front */
        memset(c->map->out, 0, sizeof(float) *
                                   (size_t)(s->B * c->map->nheads *
                                            ma.rows.count * s->M));
        st = ring_pass(rs, &probs);
    }
    c->tm->steps = rs->last + 1;
    return st;
}

ra_status ring_forward(strat_call *c)
{
    ring_state rs = {0};
    ra_status st = ra_agree(c->comm, ring_setup(&rs, c));
    if (st == RA_OK)
        st = ring_run(&rs);
    ring_free(&rs);
    return st;
}
