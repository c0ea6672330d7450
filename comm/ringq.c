/* ringq.c: the pass-Q ring (context-parallel decoding over a long cache).
 *
 * K/V stay on their rank. Each rank's query block travels the ring with its
 * running (o, lse): at step t rank r holds the block of rank (r - t) mod P,
 * folds its own K/V into the block's accumulators with the kernel, and
 * hands the block on; after P steps every block is home with its final
 * (o, lse). The queries of the next step are read-only, so their transfer
 * is posted before the compute and polled between tiles, as the ring does
 * with K/V; the accumulators can only leave once the compute has updated
 * them, so their hop (Dv + 1 floats per row and head) is exposed.
 * Sends per rank and step: B n_j H (D + Dv + 1) floats, against the pass-KV
 * ring's B m_j G (D + Dv): the cheaper one when N H << M G. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "ckpt.h"
#include "internal.h"
#include "strategy.h"

enum { TAG_Q = 7311, TAG_SEG = 7312, TAG_O = 7313, TAG_LSE = 7314,
       TAG_FETCH = 7315 /* and 7316 */ };

/* One travelling block: q (B, n_j, H, D), o (B, n_j, H, Dv), lse
 * (B, H, n_j), ids (B, n_j); sized for the largest block. */
typedef struct {
    float *q, *o, *lse;
    int64_t *seg;
} qblock;

typedef struct {
    qblock buf[2];        /* held and arriving, alternating */
    int64_t *qpos;        /* the held block's queries */
    int64_t nmax;
    void *mem;            /* the block the arrays above are carved from */
    MPI_Datatype qrow, orow; /* H D and H Dv floats */
    ra_workspace *ws;
    strat_call *c;
} ringq_state;

static int64_t block_count(const strat_call *c, int j)
{
    return ra_params_slice(c->params, c->lay, c->shape->N, j, c->P).count;
}

/* The two query blocks (ids only with segments, each sized for the
 * largest block) and the positions, carved out of g->mem (ringq_alloc). */
static void ringq_carve(void *state, const strat_call *c, ra_carver *cv)
{
    ringq_state *g = state;
    const ra_shape *s = c->shape;
    const int64_t rows = s->B * g->nmax;
    for (int i = 0; i < 2; i++) {
        qblock *b = &g->buf[i];
        b->q = ra_carve(cv, rows * s->H * s->D, sizeof(float));
        b->o = ra_carve(cv, rows * s->H * s->Dv, sizeof(float));
        b->lse = ra_carve(cv, rows * s->H, sizeof(float));
        if (c->segs)
            b->seg = ra_carve(cv, rows, sizeof(int64_t));
    }
    g->qpos = ra_carve(cv, g->nmax, sizeof(int64_t));
}

static ra_status ringq_alloc(ringq_state *g, const strat_call *c)
{
    const ra_shape *s = c->shape;
    g->nmax = strat_slice_most(c, s->N);
    if (s->B * s->H * g->nmax > INT_MAX)
        return ra_error_set(RA_ERR_ARG, "ring-q: a query block of %lld rows "
                            "and heads cannot be described to MPI (counts "
                            "are int); use more ranks",
                            (long long)(s->B * s->H * g->nmax));
    ra_status st = strat_alloc(c, ringq_carve, g, "the query blocks",
                               &g->mem, &g->ws);
    if (st != RA_OK)
        return st;
    if (MPI_Type_contiguous((int)(s->H * s->D), MPI_FLOAT, &g->qrow) !=
            MPI_SUCCESS || MPI_Type_commit(&g->qrow) != MPI_SUCCESS ||
        MPI_Type_contiguous((int)(s->H * s->Dv), MPI_FLOAT, &g->orow) !=
            MPI_SUCCESS || MPI_Type_commit(&g->orow) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring-q: cannot make the row "
                                        "datatypes");
    return RA_OK;
}

static void ringq_free(ringq_state *g, const strat_call *c)
{
    MPI_Datatype types[] = {g->qrow, g->orow};
    strat_free(c, g->mem, types, 2, g->ws);
}

/* Step t's hop of the held block's queries (and ids) to the right and
 * the receive of the next block's from the left; none at the last step. */
static ra_status post_queries(void *ctx, int t, ring_reqs *rq)
{
    const ringq_state *g = ctx;
    const strat_call *c = g->c;
    const int P = c->P, h = t & 1, j = (c->r - t + P) % P;
    const int right = (c->r + 1) % P, left = (c->r + P - 1) % P;
    const int64_t B = c->shape->B, n_send = block_count(c, j);
    const int64_t n_recv = block_count(c, (j + P - 1) % P);
    const qblock *held = &g->buf[h], *next = &g->buf[1 - h];
    MPI_Request *recv = rq->req, *send = rq->req + RING_PAIRS;
    if (t == P - 1)
        return RA_OK;
    int rc = MPI_Irecv(next->q, (int)(B * n_recv), g->qrow, left, TAG_Q,
                       c->comm, &recv[0]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Isend(held->q, (int)(B * n_send), g->qrow, right, TAG_Q,
                       c->comm, &send[0]);
    if (rc == MPI_SUCCESS && c->segs)
        rc = MPI_Irecv(next->seg, (int)(B * n_recv), MPI_INT64_T, left,
                       TAG_SEG, c->comm, &recv[1]);
    if (rc == MPI_SUCCESS && c->segs)
        rc = MPI_Isend(held->seg, (int)(B * n_send), MPI_INT64_T, right,
                       TAG_SEG, c->comm, &send[1]);
    strat_count(c, right, B * n_send *
                              ((int64_t)sizeof(float) * c->shape->H *
                                   c->shape->D +
                               (c->segs ? (int64_t)sizeof(int64_t) : 0)));
    return rc == MPI_SUCCESS ? RA_OK
                             : ra_error_set(RA_ERR_MPI, "ring-q: posting the "
                                            "queries' transfer failed");
}

/* Once step t's compute is done, the accumulators' hop: the held block's
 * (o, lse) to the right, the next block's (or, at the last step, this
 * rank's final ones) from the left. */
static ra_status post_accumulators(void *ctx, int t, ring_reqs *rq)
{
    const ringq_state *g = ctx;
    const strat_call *c = g->c;
    const int P = c->P, h = t & 1, j = (c->r - t + P) % P, last = t == P - 1;
    const int right = (c->r + 1) % P, left = (c->r + P - 1) % P;
    const int64_t B = c->shape->B, H = c->shape->H;
    const int64_t n_send = block_count(c, j);
    const int64_t n_recv = block_count(c, (j + P - 1) % P);
    const qblock *held = &g->buf[h];
    float *o_in = last ? c->o : g->buf[1 - h].o;
    float *lse_in = last ? c->lse : g->buf[1 - h].lse;
    MPI_Request *recv = rq->req, *send = rq->req + RING_PAIRS;
    if (P == 1)
        return RA_OK;
    int rc = MPI_Irecv(o_in, (int)(B * n_recv), g->orow, left, TAG_O,
                       c->comm, &recv[0]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Isend(held->o, (int)(B * n_send), g->orow, right, TAG_O,
                       c->comm, &send[0]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Irecv(lse_in, (int)(B * H * n_recv), MPI_FLOAT, left,
                       TAG_LSE, c->comm, &recv[1]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Isend(held->lse, (int)(B * H * n_send), MPI_FLOAT, right,
                       TAG_LSE, c->comm, &send[1]);
    strat_count(c, right, (int64_t)sizeof(float) * B * n_send * H *
                              (c->shape->Dv + 1));
    return rc == MPI_SUCCESS ? RA_OK
                             : ra_error_set(RA_ERR_MPI, "ring-q: posting the "
                                            "accumulators' transfer failed");
}

/* Folds the own K/V into the block held at step t. */
static void ringq_visit(void *ctx, int t, ring_reqs *rq)
{
    ringq_state *g = ctx;
    const strat_call *c = g->c;
    const int j = (c->r - t + c->P) % c->P;
    const int64_t nj = block_count(c, j);
    qblock *held = &g->buf[t & 1];
    ra_block blk;
    strat_slice_pos(c, c->shape->N, j, g->qpos);
    strat_block_init(c, nj, g->qpos, c->segs ? held->seg : NULL, &blk);
    blk.m = c->m_own;
    blk.mask.kpos = c->kpos;
    blk.mask.k_seg = c->segs ? c->masks->kv_segments : NULL;
    if (nj > 0 && c->m_own > 0)
        ra_kernel_forward_block(
            &blk,
            &(ra_fwd_ops){held->q, c->k, c->v, held->o, held->lse,
                          c->may_poll ? ring_poll : NULL, rq},
            g->ws);
}

/* The state at the boundary before step t: the held block's running o
 * and lse (its queries are fetched again from their rank on a resume),
 * sized for the largest block so that every step names the same counts. */
static void ringq_state_at(void *ctx, int t, ra_state *st)
{
    const ringq_state *g = ctx;
    const strat_call *c = g->c;
    const ra_shape *s = c->shape;
    const qblock *held = &g->buf[t & 1];
    const int64_t nj = block_count(c, (c->r - t + c->P) % c->P);
    const int64_t o_row = s->H * s->Dv, tail = s->B * (g->nmax - nj);
    /* zeros past the block's rows: a state's bytes depend on nothing else */
    memset(held->o + s->B * nj * o_row, 0,
           sizeof(float) * (size_t)(tail * o_row));
    memset(held->lse + s->B * s->H * nj, 0,
           sizeof(float) * (size_t)(tail * s->H));
    st->pass = "forward";
    st->nparts = 2;
    st->part[0] = (ra_state_part){"held_o", held->o,
                                  s->B * g->nmax * s->H * s->Dv};
    st->part[1] = (ra_state_part){"held_lse", held->lse,
                                  s->B * s->H * g->nmax};
}

/* With a checkpoint to load, at step t: the held block's (o, lse) loaded
 * (into buf[1], where ringq_state_at(1) names them, then where step t
 * holds them), its queries and ids sent again by their rank j = r - t,
 * which sends its own to r + t; the loop starts at t. Collective. */
static ra_status ringq_resume(ringq_state *g, ring_loop *lp)
{
    strat_call *c = g->c;
    const ra_shape *s = c->shape;
    ra_state ld = {.steps = c->P};
    ringq_state_at(g, 1, &ld);
    ra_status st = strat_ckpt_load(c, &ld);
    if (st != RA_OK || ld.step == 0)
        return st;
    const int t = ld.step, j = (c->r - t + c->P) % c->P;
    qblock *held = &g->buf[t & 1];
    if (held != &g->buf[1]) {
        memcpy(held->o, g->buf[1].o, sizeof(float) * (size_t)ld.part[0].count);
        memcpy(held->lse, g->buf[1].lse,
               sizeof(float) * (size_t)ld.part[1].count);
    }
    lp->start = lp->done = t;
    const int n_own = (int)(s->B * c->n);
    const int n_held = (int)(s->B * block_count(c, j));
    const strat_fetch f = {
        j, (c->r + t) % c->P, TAG_FETCH, t,
        {{c->q, held->q, n_own, n_held, g->qrow},
         {c->segs ? c->masks->q_segments : NULL, held->seg, n_own, n_held,
          MPI_INT64_T}}};
    return strat_ckpt_fetch(c, &f, c->segs ? 2 : 1);
}

ra_status ringq_forward(strat_call *c)
{
    const ra_shape *s = c->shape;
    ringq_state g = {.qrow = MPI_DATATYPE_NULL, .orow = MPI_DATATYPE_NULL,
                     .c = c};
    ring_loop lp = {.steps = c->P, .left = (c->r + c->P - 1) % c->P,
                    .right = (c->r + 1) % c->P, .post = post_queries,
                    .visit = ringq_visit, .settle = post_accumulators,
                    .ctx = &g, .total = c->P, .state = ringq_state_at};
    ra_status st = ra_agree(c->comm, ringq_alloc(&g, c));
    if (st == RA_OK) {
        const size_t rows = (size_t)(s->B * c->n);
        memcpy(g.buf[0].q, c->q, sizeof(float) * rows * (size_t)(s->H * s->D));
        if (c->segs)
            memcpy(g.buf[0].seg, c->masks->q_segments, sizeof(int64_t) * rows);
        ra_state_reset(s->B, c->n, s->H, s->Dv, g.buf[0].o, g.buf[0].lse);
    }
    if (st == RA_OK && c->params->exec.checkpoint)
        st = ra_agree(c->comm, ringq_resume(&g, &lp));
    if (st == RA_OK)
        st = ring_loop_run(c, &lp);
    if (st == RA_OK && c->P == 1) {
        memcpy(c->o, g.buf[0].o, sizeof(float) * (size_t)(s->B * c->n * s->H *
                                                          s->Dv));
        memcpy(c->lse, g.buf[0].lse, sizeof(float) * (size_t)(s->B * s->H *
                                                              c->n));
    }
    ringq_free(&g, c);
    return st;
}
