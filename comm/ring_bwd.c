/* ring_bwd.c: ra_backward, the gradients through the ring (ringattn.h).
 *
 * The K/V blocks travel exactly as in the forward (ring_pass, plan and hop
 * skipping included). Beside them travel the blocks' dk|dv accumulators,
 * one step behind: at step t rank r computes block src = r - t into a
 * zeroed scratch while it receives src's partial accumulator from r - 1
 * (which finished it at step t - 1) and sends its own finished one to
 * r + 1; after the kernel it adds the scratch into the received partial.
 * After the last step each finished accumulator goes straight home. An
 * accumulator spans the rows of its block that step 0 holds (those every
 * later step holds are among them). All sums are fp32.
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
    const float *q;       /* as the kernel sees it: q, W_q q or rotated */
    const float *dout, *lse;
    float *drow;          /* (B, H, n): rowsum(dout * o) */
    float *dq;            /* (B, n, H, D), the caller's; additive: the
                             gradient of W_q q (B, n, H, A) */
    float *dq_user;       /* the caller's dq */
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
    MPI_Request req[2];   /* receive, send of the accumulators */
    ring_step *step;      /* the ring's requests, polled with ours */
    int t, failed;
    ra_status st;
} bwd_state;

/* The rows of block src that its accumulator spans. */
static ring_span acc_span(const ring_state *rs, int src)
{
    return ring_plan_held(&rs->plan, src, 0, rs->last);
}

/* The kernel's progress callback: both the ring's and our transfers. */
static void bwd_poll(void *ctx)
{
    bwd_state *bs = ctx;
    ring_poll(bs->step);
    int done;
    if (!bs->failed &&
        MPI_Testall(2, bs->req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        bs->failed = 1;
}

/* Waits for our requests under the stall watchdog, as ring_pass does for
 * the K/V transfers; `peer` names the rank waited for in the message. */
static ra_status acc_wait(ring_state *rs, bwd_state *bs, int peer,
                          const char *what)
{
    if (bs->failed)
        return ra_error_set(RA_ERR_MPI, "ring backward: testing the %s "
                                        "transfers failed", what);
    const int rc = ring_requests_wait(bs->req, 2, rs->stall_timeout);
    if (rc < 0)
        return ra_error_set(RA_ERR_MPI, "ring backward: a %s transfer "
                                        "failed", what);
    if (rc == 0)
        return RA_OK;
    rs->stalled = 1;
    return ra_error_set(RA_ERR_MPI, "ring backward: rank %d stalled on the "
                        "%s transfer with rank %d: nothing arrived for %.3g s "
                        "(stopped, frozen or lost?)", rs->r, what, peer,
                        rs->stall_timeout);
}

/* Posts step t's accumulator transfers: the partial of this step's block
 * from the left into acc[t & 1], the finished one of the last step's
 * block to the right from acc[(t - 1) & 1]. Nothing at step 0. */
static ra_status acc_post(ring_state *rs, bwd_state *bs, int t)
{
    if (t == 0 || rs->P == 1)
        return RA_OK;
    const int P = rs->P, src = (rs->r - t + P) % P, prev = (src + 1) % P;
    const int left = (rs->r - 1 + P) % P, right = (rs->r + 1) % P;
    const ring_span in = acc_span(rs, src), out = acc_span(rs, prev);
    const int64_t B = rs->shape->B;
    if (MPI_Irecv(bs->acc[t & 1], (int)(B * (in.b - in.a)), bs->row, left,
                  TAG_ACC, rs->comm, &bs->req[0]) != MPI_SUCCESS ||
        MPI_Isend(bs->acc[(t - 1) & 1], (int)(B * (out.b - out.a)), bs->row,
                  right, TAG_ACC, rs->comm, &bs->req[1]) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring backward: step %d: posting "
                                        "the accumulators failed", t);
    rs->tm->bytes_sent += B * (out.b - out.a) * (rs->row_k + rs->row_v) *
                          (int64_t)sizeof(float);
    return RA_OK;
}

/* Adds the step's scratch (rows [held.a, held.b) of block src) into the
 * block's accumulator acc (zeroed first at step 0: nothing came in). */
static void acc_add(const ring_state *rs, const bwd_state *bs, int t,
                    int src, ring_span held)
{
    const ring_span sp = acc_span(rs, src);
    const int64_t B = rs->shape->B, cnt = sp.b - sp.a, m = held.b - held.a;
    const int64_t off = held.a - sp.a, rk = rs->row_k, rv = rs->row_v;
    float *acc = bs->acc[t & 1];
    if (t == 0)
        memset(acc, 0, sizeof(float) * (size_t)(B * cnt * (rk + rv)));
    for (int64_t b = 0; b < B; b++) {
        float *ak = acc + (b * cnt + off) * rk;
        float *av = acc + B * cnt * rk + (b * cnt + off) * rv;
        const float *lk = bs->loc + b * m * rk;
        const float *lv = bs->loc + B * m * rk + b * m * rv;
        for (int64_t i = 0; i < m * rk; i++)
            ak[i] += lk[i];
        for (int64_t i = 0; i < m * rv; i++)
            av[i] += lv[i];
    }
}

/* One ring step: post our transfers, compute the block's gradients, wait,
 * add. The time waited for accumulators is communication, not compute. */
static void visit_backward(ring_state *rs, const float *kb, const float *vb,
                           ring_step *step, void *arg)
{
    bwd_state *bs = arg;
    const int t = bs->t++, P = rs->P, src = (rs->r - t + P) % P;
    const ring_span held = ring_plan_held(&rs->plan, src, t, rs->last);
    const int64_t B = rs->shape->B, m = rs->blk.m;
    if (bs->st != RA_OK)
        return;
    bs->step = step;
    bs->st = acc_post(rs, bs, t);
    if (bs->st != RA_OK)
        return;
    memset(bs->loc, 0,
           sizeof(float) * (size_t)(B * m * (rs->row_k + rs->row_v)));
    const ra_bwd_operands ops = {bs->q, kb, vb, bs->dout, bs->lse, bs->drow,
                                 bs->dq, bs->loc,
                                 bs->loc + B * m * rs->row_k};
    ra_kernel_backward_block(&rs->blk, &ops, bs->ws,
                             rs->may_poll ? bwd_poll : NULL, bs);
    const double t0 = MPI_Wtime();
    bs->st = acc_wait(rs, bs, (rs->r - 1 + P) % P, "accumulator");
    const double waited = MPI_Wtime() - t0;
    rs->tm->compute -= waited; /* ring_pass counts the visit as compute */
    rs->tm->comm_wait += waited;
    if (bs->st == RA_OK)
        acc_add(rs, bs, t, src, held);
}

/* After the last step: each finished accumulator goes to the rank its
 * block came from. Returns this rank's own accumulator. */
static float *acc_home(ring_state *rs, bwd_state *bs)
{
    const int P = rs->P, last = rs->last;
    if (last == 0)
        return bs->acc[0];
    const int home = (rs->r - last + P) % P, from = (rs->r + last) % P;
    const ring_span in = acc_span(rs, rs->r), out = acc_span(rs, home);
    const int64_t B = rs->shape->B;
    float *own = bs->acc[(last + 1) & 1];
    if (MPI_Irecv(own, (int)(B * (in.b - in.a)), bs->row, from, TAG_HOME,
                  rs->comm, &bs->req[0]) != MPI_SUCCESS ||
        MPI_Isend(bs->acc[last & 1], (int)(B * (out.b - out.a)), bs->row,
                  home, TAG_HOME, rs->comm, &bs->req[1]) != MPI_SUCCESS) {
        bs->st = ra_error_set(RA_ERR_MPI, "ring backward: sending the "
                                          "accumulators home failed");
        return NULL;
    }
    rs->tm->bytes_sent += B * (out.b - out.a) * (rs->row_k + rs->row_v) *
                          (int64_t)sizeof(float);
    const double t0 = MPI_Wtime();
    bs->st = acc_wait(rs, bs, from, "home");
    rs->tm->comm_wait += MPI_Wtime() - t0;
    return bs->st == RA_OK ? own : NULL;
}

/* dk (B, m, G, D) and dv (B, m, G, Dv) of the own keys from their
 * accumulator; rows outside its span were never seen: 0. */
static void acc_unpack(const ring_state *rs, const float *acc, float *dk,
                       float *dv)
{
    const ring_span sp = acc_span(rs, rs->r);
    const int64_t B = rs->shape->B, m = rs->m_own, cnt = sp.b - sp.a;
    const int64_t rk = rs->row_k, rv = rs->row_v;
    memset(dk, 0, sizeof(float) * (size_t)(B * m * rk));
    memset(dv, 0, sizeof(float) * (size_t)(B * m * rv));
    for (int64_t b = 0; b < B; b++) {
        memcpy(dk + (b * m + sp.a) * rk, acc + b * cnt * rk,
               sizeof(float) * (size_t)(cnt * rk));
        memcpy(dv + (b * m + sp.a) * rv, acc + B * cnt * rk + b * cnt * rv,
               sizeof(float) * (size_t)(cnt * rv));
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
static void bwd_carve(void *arg, ra_carver *c)
{
    const ring_state *rs = ((bwd_carve_arg *)arg)->rs;
    bwd_state *bs = ((bwd_carve_arg *)arg)->bs;
    const ra_shape *s = rs->shape;
    const int64_t block = s->B * rs->mmax * (rs->row_k + rs->row_v);
    const int64_t A = rs->blk.score == RA_SCORE_ADDITIVE ? rs->blk.D : 0;
    bs->drow = ra_carve(c, s->B * s->H * rs->n, sizeof(float));
    bs->acc[0] = ra_carve(c, block, sizeof(float));
    bs->acc[1] = ra_carve(c, block, sizeof(float));
    bs->loc = ra_carve(c, block, sizeof(float));
    if (A) {
        bs->dq = ra_carve(c, s->B * rs->n * s->H * A, sizeof(float));
        bs->dkp = ra_carve(c, s->B * rs->m_own * s->G * A, sizeof(float));
        bs->dw = ra_carve(c, dw_len(s, A), sizeof(double));
    }
}

static ra_status bwd_alloc(ring_state *rs, bwd_state *bs)
{
    const int64_t A = rs->blk.score == RA_SCORE_ADDITIVE ? rs->blk.D : 0;
    bwd_carve_arg arg = {rs, bs};
    bs->mem = ra_carve_alloc(bwd_carve, &arg);
    bs->ws = ra_bwd_workspace_create(rs->threads, rs->blk.block_q,
                                     rs->blk.block_kv, A);
    if (!bs->mem || !bs->ws)
        return ra_error_set(RA_ERR_NOMEM, "ring backward: cannot allocate "
                                          "the accumulators");
    if (A) /* the weights' gradients are sums */
        memset(bs->dw, 0, sizeof(double) * (size_t)dw_len(rs->shape, A));
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
    if (rs->stalled)
        return;
    free(bs->mem);
    ra_bwd_workspace_free(bs->ws);
    if (bs->row != MPI_DATATYPE_NULL)
        MPI_Type_free(&bs->row);
}

/* Local refusals of the backward pass, agreed with ring_open's (which
 * checks the score, its weights and the positional encodings). */
static ra_status bwd_check(const float *o, const float *lse,
                           const float *dout, float *dq, float *dk, float *dv)
{
    if (!o || !lse || !dout || !dq || !dk || !dv)
        return ra_error_set(RA_ERR_ARG, "backward: o, lse, dout, dq, dk and "
                                        "dv are required");
    return RA_OK;
}

/* What the kernel reads: the additive score's projections or RoPE's
 * rotated copies (made here), or q and k themselves; the own keys packed
 * for step 0. */
static void bwd_inputs(ring_state *rs, bwd_state *bs, const ring_args *a)
{
    const ra_params *p = a->params;
    const float *k = a->k;
    bs->q = a->q;
    if (p->score == RA_SCORE_ADDITIVE) {
        ring_project(rs, a);
        bs->q = rs->qp;
        k = rs->kp;
    } else if (p->rope != RA_ROPE_NONE) {
        ring_rotate(rs, a);
        bs->q = rs->qr;
        k = rs->kr;
    }
    ring_pack_own(rs, k, a->v, rs->segs ? a->masks->kv_segments : NULL);
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
static ra_status bwd_chain_additive(ring_state *rs, bwd_state *bs,
                                    const ring_args *a, float *dk,
                                    const ra_additive_grads *dw)
{
    const ra_shape *s = a->shape;
    const ra_additive *ad = a->params->additive;
    const int64_t A = ad->A, D = s->D, Dk = ra_shape_dk(s);
    const int64_t nq = s->B * rs->n * s->H, nk = s->B * rs->m_own * s->G;
    times_w(bs->dq, nq, A, ad->w_q, D, bs->dq_user);
    times_w(bs->dkp, nk, A, ad->w_k, Dk, dk);
    if (!dw)
        return RA_OK;
    double *dwq = bs->dw, *dwk = dwq + A * D, *dwv = dwk + A * Dk;
    const int64_t len = dw_len(s, A);
    weight_grad(bs->dq, nq, A, a->q, D, dwq);
    weight_grad(bs->dkp, nk, A, a->k, Dk, dwk);
    ra_bwd_workspace_take_dw_v(bs->ws, dwv);
    if (MPI_Allreduce(MPI_IN_PLACE, bs->dw, (int)len, MPI_DOUBLE, MPI_SUM,
                      rs->comm) != MPI_SUCCESS)
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

/* The gradients back through what the kernel saw (bwd_inputs): the
 * additive projections, or RoPE's rotation (its transpose, at the same
 * global positions). */
static ra_status bwd_chain(ring_state *rs, bwd_state *bs, const ring_args *a,
                           float *dk, const ra_additive_grads *dw)
{
    const ra_shape *s = a->shape;
    const ra_params *p = a->params;
    if (p->score == RA_SCORE_ADDITIVE)
        return bwd_chain_additive(rs, bs, a, dk, dw);
    if (p->rope == RA_ROPE_NONE)
        return RA_OK;
    const ra_slice ks = ra_layout_slice(rs->lay, s->M, rs->r, rs->P);
    for (int64_t j = 0; j < rs->m_own; j++)
        rs->kpos[j] = ra_slice_pos(&ks, j);
    ring_rope_queries(rs, p, bs->dq, 1);
    const ra_rope_rows keys = {p->rope, p->rope_base, s->B, rs->m_own, s->G,
                               s->D, rs->kpos, 0};
    ra_rope_turn(&keys, dk, -1.0);
    return RA_OK;
}

/* The passes of one call, once the ring is open. */
static ra_status bwd_run(ring_state *rs, bwd_state *bs, const ring_args *a,
                         const float *o, float *dk, float *dv,
                         const ra_additive_grads *dw)
{
    const ra_shape *s = a->shape;
    ra_status st = bwd_alloc(rs, bs);
    st = ra_agree(rs->comm, st);
    if (st != RA_OK)
        return st;
    const int blas = ra_blas_enter(1); /* single-threaded BLAS per tile */
    const int64_t qrow = s->H * rs->blk.D; /* D, or A when additive */
    ra_backward_drow(s->B, rs->n, s->H, s->Dv, bs->dout, o, bs->drow);
    memset(bs->dq, 0, sizeof(float) * (size_t)(s->B * rs->n * qrow));
    bwd_inputs(rs, bs, a);
    st = ring_pass(rs, visit_backward, bs);
    if (st == RA_OK)
        st = bs->st;
    const float *own = st == RA_OK ? acc_home(rs, bs) : NULL;
    if (st == RA_OK)
        st = bs->st;
    if (st == RA_OK) {
        acc_unpack(rs, own, bs->dkp ? bs->dkp : dk, dv);
        st = bwd_chain(rs, bs, a, dk, dw);
    }
    if (st == RA_OK)
        st = ring_finish(rs);
    rs->tm->steps = rs->last + 1;
    ra_blas_leave(blas);
    return st;
}

ra_status ra_backward_ex(MPI_Comm comm, const ra_shape *shape,
                         const ra_params *params, const ra_masks *masks,
                         const float *q, const float *k, const float *v,
                         const float *o, const float *lse, const float *dout,
                         float *dq, float *dk, float *dv,
                         const ra_additive_grads *dw, ra_timing *timing)
{
    ra_error_clear();
    const double t_start = MPI_Wtime();
    ra_timing tm = {0};
    ring_state rs = {.comm = MPI_COMM_NULL, .tm = &tm};
    bwd_state bs = {.dout = dout, .lse = lse, .dq = dq, .dq_user = dq,
                    .row = MPI_DATATYPE_NULL,
                    .req = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}};
    const ring_args a = {shape, params, masks, q, k, v, NULL, NULL, NULL, 0};
    ra_status st = bwd_check(o, lse, dout, dq, dk, dv);
    if (st == RA_OK && dw && (!dw->dw_q || !dw->dw_k || !dw->dw_v))
        st = ra_error_set(RA_ERR_ARG, "backward: dw_q, dw_k and dw_v are "
                                      "required when weight gradients are "
                                      "asked for");
    st = ring_open(comm, &a, st, &rs);
    if (st == RA_OK)
        st = bwd_run(&rs, &bs, &a, o, dk, dv,
                     params->score == RA_SCORE_ADDITIVE ? dw : NULL);
    bwd_free(&rs, &bs);
    return ring_close(&rs, st, t_start, timing);
}

ra_status ra_backward(MPI_Comm comm, const ra_shape *shape,
                      const ra_params *params, const ra_masks *masks,
                      const float *q, const float *k, const float *v,
                      const float *o, const float *lse, const float *dout,
                      float *dq, float *dk, float *dv, ra_timing *timing)
{
    return ra_backward_ex(comm, shape, params, masks, q, k, v, o, lse, dout,
                          dq, dk, dv, NULL, timing);
}
