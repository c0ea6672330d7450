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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "internal.h"
#include "strategy.h"

enum { TAG_Q = 7311, TAG_SEG = 7312, TAG_O = 7313, TAG_LSE = 7314 };

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
    MPI_Request req[4];   /* receive, receive, send, send */
    int may_poll;
    ra_workspace *ws;
} ringq_state;

static int64_t block_count(const strat_call *c, int j)
{
    return ra_layout_slice(c->lay, c->shape->N, j, c->P).count;
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

static void ringq_poll(void *ctx)
{
    ringq_state *g = ctx;
    int done = 0;
    MPI_Testall(4, g->req, &done, MPI_STATUSES_IGNORE);
}

/* Waits for g->req under the stall watchdog; names the step on failure. */
static ra_status ringq_wait(ringq_state *g, strat_call *c, int t)
{
    const int left = (c->r + c->P - 1) % c->P, right = (c->r + 1) % c->P;
    const int peer[4] = {left, left, right, right};
    char phase[32];
    snprintf(phase, sizeof phase, "step %d", t);
    const strat_watch w = {phase, peer, 2};
    return strat_wait(c, 4, g->req, &w);
}

/* Posts the hop of the held block's queries (and ids) to the right and
 * the receive of the next block's from the left. */
static ra_status post_queries(ringq_state *g, const strat_call *c, int h,
                              int64_t n_send, int64_t n_recv)
{
    const int B = (int)c->shape->B;
    const int right = (c->r + 1) % c->P, left = (c->r + c->P - 1) % c->P;
    const qblock *held = &g->buf[h], *next = &g->buf[1 - h];
    int rc = MPI_Irecv(next->q, (int)(B * n_recv), g->qrow, left, TAG_Q,
                       c->comm, &g->req[0]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Isend(held->q, (int)(B * n_send), g->qrow, right, TAG_Q,
                       c->comm, &g->req[2]);
    if (rc == MPI_SUCCESS && c->segs)
        rc = MPI_Irecv(next->seg, (int)(B * n_recv), MPI_INT64_T, left,
                       TAG_SEG, c->comm, &g->req[1]);
    if (rc == MPI_SUCCESS && c->segs)
        rc = MPI_Isend(held->seg, (int)(B * n_send), MPI_INT64_T, right,
                       TAG_SEG, c->comm, &g->req[3]);
    strat_count(c, right, (int64_t)B * n_send *
                              ((int64_t)sizeof(float) * c->shape->H *
                                   c->shape->D +
                               (c->segs ? (int64_t)sizeof(int64_t) : 0)));
    return rc == MPI_SUCCESS ? RA_OK
                             : ra_error_set(RA_ERR_MPI, "ring-q: posting the "
                                            "queries' transfer failed");
}

/* The accumulators' hop: the held block's (o, lse) to the right, the next
 * block's (or, at the last step, this rank's final ones) from the left. */
static ra_status post_accumulators(ringq_state *g, const strat_call *c,
                                   int h, int64_t n_send, int64_t n_recv,
                                   float *o_in, float *lse_in)
{
    const int64_t B = c->shape->B, H = c->shape->H;
    const int right = (c->r + 1) % c->P, left = (c->r + c->P - 1) % c->P;
    const qblock *held = &g->buf[h];
    int rc = MPI_Irecv(o_in, (int)(B * n_recv), g->orow, left, TAG_O,
                       c->comm, &g->req[0]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Isend(held->o, (int)(B * n_send), g->orow, right, TAG_O,
                       c->comm, &g->req[2]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Irecv(lse_in, (int)(B * H * n_recv), MPI_FLOAT, left,
                       TAG_LSE, c->comm, &g->req[1]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Isend(held->lse, (int)(B * H * n_send), MPI_FLOAT, right,
                       TAG_LSE, c->comm, &g->req[3]);
    strat_count(c, right, (int64_t)sizeof(float) * B * n_send * H *
                              (c->shape->Dv + 1));
    return rc == MPI_SUCCESS ? RA_OK
                             : ra_error_set(RA_ERR_MPI, "ring-q: posting the "
                                            "accumulators' transfer failed");
}

/* Folds the own K/V into the held block of origin j (n_j queries). */
static void ringq_visit(ringq_state *g, const strat_call *c, int h, int j,
                        int64_t nj)
{
    ra_block blk;
    qblock *held = &g->buf[h];
    strat_slice_pos(c, c->shape->N, j, g->qpos);
    strat_block_init(c, nj, g->qpos, c->segs ? held->seg : NULL, &blk);
    blk.m = c->m_own;
    blk.mask.kpos = c->kpos;
    blk.mask.k_seg = c->segs ? c->masks->kv_segments : NULL;
    if (nj > 0 && c->m_own > 0)
        ra_kernel_forward_block(&blk, held->q, c->k, c->v, held->o, held->lse,
                                g->ws, g->may_poll ? ringq_poll : NULL, g);
}

/* One step: queries of the next block in flight while this one computes,
 * then the accumulators' hop. */
static ra_status ringq_step(ringq_state *g, strat_call *c, int t)
{
    const int P = c->P, h = t & 1, j = (c->r - t % P + P) % P;
    const int jl = (j + P - 1) % P;
    const int64_t nj = block_count(c, j), nl = block_count(c, jl);
    ra_status st = RA_OK;
    for (int i = 0; i < 4; i++)
        g->req[i] = MPI_REQUEST_NULL;
    if (t < P - 1)
        st = post_queries(g, c, h, nj, nl);
    const double t0 = MPI_Wtime();
    if (st == RA_OK)
        ringq_visit(g, c, h, j, nj);
    const double t1 = MPI_Wtime();
    if (st == RA_OK)
        st = ringq_wait(g, c, t);
    if (st == RA_OK && P > 1) {
        const int last = t == P - 1;
        st = post_accumulators(g, c, h, nj, nl,
                               last ? c->o : g->buf[1 - h].o,
                               last ? c->lse : g->buf[1 - h].lse);
        if (st == RA_OK)
            st = ringq_wait(g, c, t);
    }
    c->tm->compute += t1 - t0;
    c->tm->comm_wait += MPI_Wtime() - t1;
    return st;
}

ra_status ringq_forward(strat_call *c)
{
    const ra_shape *s = c->shape;
    ringq_state g = {.qrow = MPI_DATATYPE_NULL, .orow = MPI_DATATYPE_NULL,
                     .may_poll = c->may_poll};
    ra_status st = ra_agree(c->comm, ringq_alloc(&g, c));
    if (st == RA_OK) {
        const size_t rows = (size_t)(s->B * c->n);
        memcpy(g.buf[0].q, c->q, sizeof(float) * rows * (size_t)(s->H * s->D));
        if (c->segs)
            memcpy(g.buf[0].seg, c->masks->q_segments, sizeof(int64_t) * rows);
        ra_state_reset(s->B, c->n, s->H, s->Dv, g.buf[0].o, g.buf[0].lse);
    }
    for (int t = 0; st == RA_OK && t < c->P; t++) {
        st = ringq_step(&g, c, t);
        if (st == RA_OK)
            strat_step(c, t + 1, c->P);
    }
    if (st == RA_OK && c->P == 1) {
        memcpy(c->o, g.buf[0].o, sizeof(float) * (size_t)(s->B * c->n * s->H *
                                                          s->Dv));
        memcpy(c->lse, g.buf[0].lse, sizeof(float) * (size_t)(s->B * s->H *
                                                              c->n));
    }
    ringq_free(&g, c);
    return st;
}
