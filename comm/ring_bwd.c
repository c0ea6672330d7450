/* ring_bwd.c: the ring row's backward, the gradients through the ring
 * (ra_backward_ex opens and closes the call, call.c).
 *
 * The K/V blocks travel exactly as in the forward (ring_pass, plan and hop
 * skipping included). Beside them travel the blocks' dk|dv accumulators,
 * one step behind: at step t rank r computes block src = r - t into a
 * zeroed scratch while it receives src's partial accumulator from r - 1
 * (which finished it at step t - 1) and sends its own finished one to
 * r + 1; after the kernel it adds the scratch into the received partial.
 * After the last step each finished accumulator goes straight home. The
 * owner's own part (step 0) stays home, in the caller's dk and dv, so an
 * accumulator spans only the rows of its block that step 1 holds (those
 * every later step holds are among them): with a window, the few keys
 * the next ranks see, not the block. It starts at step 1, from zero, and
 * is added to the owner's part when it comes home. All sums are fp32.
 *
 * The kernel sees what the forward's kernel saw: the additive score's
 * projections W_q q, W_k k (the accumulators then hold the gradients of
 * W_k k) or RoPE's rotated q and k. After the ring, bwd_chain takes the
 * gradients back through those maps on each rank's own rows; the additive
 * weights' gradients are sums over every rank's rows, added up in fp64 by
 * one MPI_Allreduce. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "backward.h"
#include "internal.h"
#include "ring.h"

enum { TAG_ACC = 7311, TAG_HOME = 7312 };

/* The backward pass's own state beside the ring's. */
typedef struct {
    const ra_grads *g; /* the call's o, lse, dout and gradients */
    const float *q;       /* as the kernel sees it: q, W_q q or rotated */
    float *drow;          /* (B, H, n): rowsum(dout * o) */
    float *dq;            /* (B, n, H, D), the caller's; additive: the
                             gradient of W_q q (B, n, H, A) */
    float *dkp;           /* additive: gradient of the own W_k k
                             (B, m, G, A) */
    double *dw;           /* additive: dw_q (A, D), dw_k (A, Dk), dw_v (A) */
    float *acc[2];        /* travelling accumulators: dk (B, cnt, row_k)
                             then dv (B, cnt, row_v) */
    float *loc;           /* one step's contribution, the same layout for
                             the rows the step holds */
    void *mem;            /* the one block behind drow, acc, loc and the
                             additive dq, dkp, dw (bwd_alloc) */
    ra_bwd_workspace *ws;
    MPI_Datatype row;     /* row_k + row_v floats */
} bwd_state;

/* The rows of block src that its accumulator spans: those step 1 holds
 * (none when the ring stops at step 0). */
static ring_span acc_span(const ring_state *rs, int src)
{
    const ring_span none = {0, 0};
    return rs->last >= 1 ? ring_plan_held(&rs->plan, src, 1, rs->last)
                         : none;
}

/* The caller's dk (or the additive score's gradient of W_k k) and dv. */
static float *own_dk(const bwd_state *bs)
{
    return bs->dkp ? bs->dkp : bs->g->dk;
}

/* Posts step t's accumulator transfers beside the K/V block's: the
 * partial of this step's block from the left into acc[t & 1], the
 * finished one of the last step's block to the right from
 * acc[(t - 1) & 1]. Nothing at steps 0 and 1: an accumulator starts at
 * step 1. */
static ra_status acc_post(ring_state *rs, int t, ring_reqs *rq, void *arg)
{
    const strat_call *c = rs->c;
    const bwd_state *bs = arg;
    if (t <= 1 || c->P == 1)
        return RA_OK;
    const int P = c->P, src = (c->r - t + P) % P, prev = (src + 1) % P;
    const int left = (c->r - 1 + P) % P, right = (c->r + 1) % P;
    const ring_span in = acc_span(rs, src), out = acc_span(rs, prev);
    const int64_t B = c->shape->B;
    MPI_Request *recv = rq->req + RING_PASS_EXTRA;
    MPI_Request *send = rq->req + RING_PAIRS + RING_PASS_EXTRA;
    if (MPI_Irecv(bs->acc[t & 1], (int)(B * (in.b - in.a)), bs->row, left,
                  TAG_ACC, c->comm, recv) != MPI_SUCCESS ||
        MPI_Isend(bs->acc[(t - 1) & 1], (int)(B * (out.b - out.a)), bs->row,
                  right, TAG_ACC, c->comm, send) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring backward: step %d: posting "
                                        "the accumulators failed", t);
    strat_count(c, right, B * (out.b - out.a) * (rs->row_k + rs->row_v) *
                              (int64_t)sizeof(float));
    return RA_OK;
}

/* Once step t's transfers are in: adds the step's scratch (rows
 * [held.a, held.b) of block src) into the block's accumulator acc
 * (zeroed first at step 1: nothing came in), or at step 0 puts it in
 * the caller's dk and dv (B, m_own rows), zero elsewhere. */
static ra_status acc_add(ring_state *rs, int t, void *arg)
{
    const strat_call *c = rs->c;
    const bwd_state *bs = arg;
    const int src = (c->r - t + c->P) % c->P;
    const ring_span held = ring_plan_held(&rs->plan, src, t, rs->last);
    const ring_span sp = t == 0 ? (ring_span){0, c->m_own}
                                : acc_span(rs, src);
    const int64_t B = c->shape->B, cnt = sp.b - sp.a, m = held.b - held.a;
    const int64_t off = held.a - sp.a, rk = rs->row_k, rv = rs->row_v;
    float *acc = t == 0 ? own_dk(bs) : bs->acc[t & 1];
    float *acc_v = t == 0 ? bs->g->dv : acc + B * cnt * rk;
    if (t <= 1) {
        memset(acc, 0, sizeof(float) * (size_t)(B * cnt * rk));
        memset(acc_v, 0, sizeof(float) * (size_t)(B * cnt * rv));
    }
    for (int64_t b = 0; b < B; b++) {
        float *ak = acc + (b * cnt + off) * rk;
        float *av = acc_v + (b * cnt + off) * rv;
        const float *lk = bs->loc + b * m * rk;
        const float *lv = bs->loc + B * m * rk + b * m * rv;
        for (int64_t i = 0; i < m * rk; i++)
            ak[i] += lk[i];
        for (int64_t i = 0; i < m * rv; i++)
            av[i] += lv[i];
    }
    return RA_OK;
}

/* Step t's block: its gradients into the zeroed scratch loc (acc_add
 * adds them to the block's accumulator once it has arrived). */
static void visit_backward(ring_state *rs, const float *kb, const float *vb,
                           ring_reqs *rq, void *arg)
{
    const strat_call *c = rs->c;
    bwd_state *bs = arg;
    const int64_t B = c->shape->B, m = rs->blk.m;
    memset(bs->loc, 0,
           sizeof(float) * (size_t)(B * m * (rs->row_k + rs->row_v)));
    const ra_bwd_operands ops = {bs->q, kb, vb, bs->g->dout, bs->g->lse,
                                 bs->drow, bs->dq, bs->loc,
                                 bs->loc + B * m * rs->row_k};
    ra_kernel_backward_block(&rs->blk, &ops, bs->ws,
                             c->may_poll ? ring_poll : NULL, rq);
}

/* The backward's state at the boundary before step t: dq, the own dk and
 * dv (step 0's part) and the accumulator finished at step t - 1, which
 * step t sends on (acc[(t - 1) & 1], counted at the largest block's
 * size, so that the parts do not depend on t). */
static void state_backward(ring_state *rs, int t, ra_state *st, void *arg)
{
    bwd_state *bs = arg;
    const strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    st->pass = "backward";
    st->nparts = 4;
    st->part[0] = (ra_state_part){"dq", bs->dq,
                                  s->B * c->n * s->H * rs->blk.D};
    st->part[1] = (ra_state_part){"dk", own_dk(bs),
                                  s->B * c->m_own * rs->row_k};
    st->part[2] = (ra_state_part){"dv", bs->g->dv,
                                  s->B * c->m_own * rs->row_v};
    st->part[3] = (ra_state_part){"acc", bs->acc[(t - 1) & 1],
                                  s->B * rs->mmax * (rs->row_k + rs->row_v)};
}

/* After a resume at step start: the loaded accumulator (in acc[0], where
 * state_backward(rs, 1) names it) where step start looks for it. */
static void acc_resumed(const ring_state *rs, bwd_state *bs)
{
    const int64_t block = rs->c->shape->B * rs->mmax *
                          (rs->row_k + rs->row_v);
    if (rs->start > 0 && ((rs->start - 1) & 1))
        memcpy(bs->acc[1], bs->acc[0], sizeof(float) * (size_t)block);
}

/* After the last step: each finished accumulator goes to the rank its
 * block came from; *own: this rank's own accumulator (NULL when the ring
 * stopped at step 0). */
static ra_status acc_home(ring_state *rs, bwd_state *bs, const float **own)
{
    strat_call *c = rs->c;
    const int P = c->P, last = rs->last;
    *own = last == 0 ? NULL : bs->acc[(last + 1) & 1];
    if (last == 0)
        return RA_OK;
    const int home = (c->r - last + P) % P, from = (c->r + last) % P;
    const ring_span in = acc_span(rs, c->r), out = acc_span(rs, home);
    const int64_t B = c->shape->B;
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (MPI_Irecv(bs->acc[(last + 1) & 1], (int)(B * (in.b - in.a)), bs->row,
                  from, TAG_HOME, c->comm, &req[0]) != MPI_SUCCESS ||
        MPI_Isend(bs->acc[last & 1], (int)(B * (out.b - out.a)), bs->row,
                  home, TAG_HOME, c->comm, &req[1]) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring backward: sending the "
                                        "accumulators home failed");
    strat_count(c, home, B * (out.b - out.a) * (rs->row_k + rs->row_v) *
                             (int64_t)sizeof(float));
    const double t0 = MPI_Wtime();
    const int peer[2] = {from, home};
    const strat_watch w = {"the accumulators' way home", peer, 1};
    const ra_status st = strat_wait(c, 2, req, &w);
    c->tm->comm_wait += MPI_Wtime() - t0;
    return st;
}

/* The own keys' accumulator, home from the ring, added into dk (B, m, G,
 * D) and dv (B, m, G, Dv), which hold step 0's part. */
static void acc_fold(const ring_state *rs, const float *acc, float *dk,
                     float *dv)
{
    strat_call *c = rs->c;
    const ring_span sp = acc_span(rs, c->r);
    const int64_t B = c->shape->B, m = c->m_own, cnt = sp.b - sp.a;
    const int64_t rk = rs->row_k, rv = rs->row_v;
    for (int64_t b = 0; b < B; b++) {
        float *ak = dk + (b * m + sp.a) * rk, *av = dv + (b * m + sp.a) * rv;
        const float *fk = acc + b * cnt * rk;
        const float *fv = acc + B * cnt * rk + b * cnt * rv;
        for (int64_t i = 0; i < cnt * rk; i++)
            ak[i] += fk[i];
        for (int64_t i = 0; i < cnt * rv; i++)
            av[i] += fv[i];
    }
}

typedef struct {
    const ring_state *rs;
    bwd_state *bs;
} bwd_carve_arg;

/* Doubles of the additive weights' gradients: dw_q (A, D), dw_k (A, Dk),
 * dw_v (A). */
static int64_t dw_len(const ra_shape *s, int64_t A)
{
    return A * (s->D + ra_shape_dk(s) + 1);
}

/* The backward pass's arrays, carved out of one block (bwd_alloc): the
 * row sums, the two travelling accumulators and one step's contribution
 * (each sized for the largest block), and with the additive score the
 * projections' gradients and the weights' sums. */
static void bwd_carve(void *arg, ra_carver *cv)
{
    const ring_state *rs = ((bwd_carve_arg *)arg)->rs;
    bwd_state *bs = ((bwd_carve_arg *)arg)->bs;
    const strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    const int64_t block = s->B * rs->mmax * (rs->row_k + rs->row_v);
    const int64_t A = rs->blk.score == RA_SCORE_ADDITIVE ? rs->blk.D : 0;
    bs->drow = ra_carve(cv, s->B * s->H * c->n, sizeof(float));
    bs->acc[0] = ra_carve(cv, block, sizeof(float));
    bs->acc[1] = ra_carve(cv, block, sizeof(float));
    bs->loc = ra_carve(cv, block, sizeof(float));
    if (A) {
        bs->dq = ra_carve(cv, s->B * c->n * s->H * A, sizeof(float));
        bs->dkp = ra_carve(cv, s->B * c->m_own * s->G * A, sizeof(float));
        bs->dw = ra_carve(cv, dw_len(s, A), sizeof(double));
    }
}

static ra_status bwd_alloc(ring_state *rs, bwd_state *bs)
{
    strat_call *c = rs->c;
    const int64_t A = rs->blk.score == RA_SCORE_ADDITIVE ? rs->blk.D : 0;
    bwd_carve_arg arg = {rs, bs};
    bs->mem = ra_carve_alloc(bwd_carve, &arg);
    bs->ws = ra_bwd_workspace_create(c->threads, rs->blk.block_q,
                                     rs->blk.block_kv, A);
    if (!bs->mem || !bs->ws)
        return ra_error_set(RA_ERR_NOMEM, "ring backward: cannot allocate "
                                          "the accumulators");
    if (A) /* the weights' gradients are sums */
        memset(bs->dw, 0, sizeof(double) * (size_t)dw_len(c->shape, A));
    if (MPI_Type_contiguous((int)(rs->row_k + rs->row_v), MPI_FLOAT,
                            &bs->row) != MPI_SUCCESS ||
        MPI_Type_commit(&bs->row) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring backward: cannot describe an "
                                        "accumulator row to MPI");
    return RA_OK;
}

/* Frees what bwd_alloc made; after a stall the buffers stay with the
 * transfers in flight (the job must end, ringattn.h). */
static void bwd_free(const ring_state *rs, bwd_state *bs)
{
    if (rs->c->stalled)
        return;
    ra_carve_free(bs->mem);
    ra_bwd_workspace_free(bs->ws);
    if (bs->row != MPI_DATATYPE_NULL)
        MPI_Type_free(&bs->row);
}

/* x (rows, cols) = y (rows, A) w (A, cols), rows > 0 or nothing. */
static void times_w(const float *y, int64_t rows, int64_t A, const float *w,
                    int64_t cols, float *x)
{
    if (rows > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows,
                    (int)cols, (int)A, 1.0f, y, (int)A, w, (int)cols, 0.0f, x,
                    (int)cols);
}

/* dw (A, cols) += y^T (A, rows) x (rows, cols), in fp64 from fp32 products
 * made row block by row block. */
static void weight_grad(const float *y, int64_t rows, int64_t A,
                        const float *x, int64_t cols, double *dw)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < A; i++) {
            const double yi = y[r * A + i];
            if (yi == 0.0)
                continue;
            for (int64_t c = 0; c < cols; c++)
                dw[i * cols + c] += yi * x[r * cols + c];
        }
}

/* The additive score's chain rule on this rank's rows: dq = dqp W_q,
 * dk = dkp W_k, and with dw the weights' gradients summed over the ranks
 * (dw_q = dqp^T q, dw_k = dkp^T k, dw_v from the kernel). */
static ra_status bwd_chain_additive(ring_state *rs, bwd_state *bs)
{
    const strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    const ra_additive *ad = c->params->num.additive;
    const ra_additive_grads *dw = bs->g->dw;
    const int64_t A = ad->A, D = s->D, Dk = ra_shape_dk(s);
    const int64_t nq = s->B * c->n * s->H, nk = s->B * c->m_own * s->G;
    times_w(bs->dq, nq, A, ad->w_q, D, bs->g->dq);
    times_w(bs->dkp, nk, A, ad->w_k, Dk, bs->g->dk);
    if (!dw)
        return RA_OK;
    double *dwq = bs->dw, *dwk = dwq + A * D, *dwv = dwk + A * Dk;
    const int64_t len = dw_len(s, A);
    weight_grad(bs->dq, nq, A, c->q, D, dwq);
    weight_grad(bs->dkp, nk, A, c->k, Dk, dwk);
    ra_bwd_workspace_take_dw_v(bs->ws, dwv);
    if (MPI_Allreduce(MPI_IN_PLACE, bs->dw, (int)len, MPI_DOUBLE, MPI_SUM,
                      c->comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring backward: summing the additive "
                                        "weights' gradients failed");
    for (int64_t i = 0; i < A * D; i++)
        dw->dw_q[i] = (float)dwq[i];
    for (int64_t i = 0; i < A * Dk; i++)
        dw->dw_k[i] = (float)dwk[i];
    for (int64_t i = 0; i < A; i++)
        dw->dw_v[i] = (float)dwv[i];
    return RA_OK;
}

/* The gradients back through what the kernel saw: the additive
 * projections, or RoPE's rotation (its transpose, at the call's global
 * positions). */
static ra_status bwd_chain(ring_state *rs, bwd_state *bs)
{
    const strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    if (p->num.score == RA_SCORE_ADDITIVE)
        return bwd_chain_additive(rs, bs);
    if (p->num.rope == RA_ROPE_NONE)
        return RA_OK;
    call_rope_queries(c, bs->dq, -1.0);
    const ra_rope_rows keys = {p->num.rope, p->num.rope_base,
                               s->B,        c->m_own,
                               s->G,        s->D,
                               c->kpos,     0};
    ra_rope_turn(&keys, bs->g->dk, -1.0);
    return RA_OK;
}

/* The pass of one call once the ring is set up: the row sums, the ring
 * (the kernel sees the additive projections, RoPE's rotated copies or q
 * and k themselves), the accumulators home, the chain rule. */
static ra_status bwd_run(ring_state *rs, bwd_state *bs)
{
    strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    const ra_grads *g = bs->g;
    const int64_t qrow = s->H * rs->blk.D; /* D, or A when additive */
    ra_backward_drow(s->B, c->n, s->H, s->Dv, g->dout, g->o, bs->drow);
    memset(bs->dq, 0, sizeof(float) * (size_t)(s->B * c->n * qrow));
    bs->q = rs->qp ? rs->qp : c->q;
    ring_pack_own(rs);
    const ring_pass_ops ops = {visit_backward, acc_post, acc_add, bs,
                               state_backward};
    const float *own = NULL;
    ra_status st = ra_agree(c->comm, ring_resume(rs, &ops));
    if (st == RA_OK) {
        acc_resumed(rs, bs);
        st = ring_pass(rs, &ops);
    }
    if (st == RA_OK)
        st = acc_home(rs, bs, &own);
    if (st == RA_OK) {
        if (own)
            acc_fold(rs, own, own_dk(bs), g->dv);
        st = bwd_chain(rs, bs);
    }
    c->tm->steps = rs->last + 1;
    return st;
}

ra_status ring_backward(strat_call *c)
{
    ring_state rs = {0};
    bwd_state bs = {.g = c->grads, .dq = c->grads->dq,
                    .row = MPI_DATATYPE_NULL};
    ra_status st = ring_setup(&rs, c);
    if (st == RA_OK)
        st = bwd_alloc(&rs, &bs);
    st = ra_agree(c->comm, st);
    if (st == RA_OK)
        st = bwd_run(&rs, &bs);
    bwd_free(&rs, &bs);
    ring_free(&rs);
    return st;
}
