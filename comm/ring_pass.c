/* ring_pass.c: the K/V blocks of one ring pass on the ring loop (see
 * ring.h).
 *
 * Rank r holds its query slice for the whole call and, during step t, the
 * part of the K/V block that originated at rank (r - t) mod P that it or a
 * rank after it still needs (plan.h). Before computing on that block it
 * posts the receive of the next block from r - 1 and the send of the part
 * of the current one that r + 1 needs (K and V in one message, described by
 * an MPI datatype, so nothing is copied), two buffers alternating; both
 * requests are polled between tiles so that the transfer moves while the
 * kernel runs: Open MPI has no progress thread. The wait after the compute
 * is watched: a neighbour that stops sending for stall_timeout seconds
 * fails the call instead of hanging it. With a bf16 wire (ring.h:
 * wire16) the blocks travel as bf16, half the bytes, and the held one is
 * widened to fp32 for the kernel. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "ring.h"

enum { TAG_KV = 7301, TAG_SEG = 7302, TAG_FETCH = 7303 };

/* n floats of x into block row `at` of the held block: as they are, or
 * as bf16 with wire16 (exact: the call rounded k and v already). */
static void own_rows(const ring_state *rs, int64_t at, const float *x,
                     int64_t n)
{
    if (rs->wire16)
        ra_bf16_pack(x, n, rs->w16[0] + at);
    else
        ra_copy_threads(rs->buf[0].kv + at, x, sizeof(float) * (size_t)n,
                        rs->c->threads);
}

void ring_pack_own(ring_state *rs)
{
    const strat_call *c = rs->c;
    const ra_shape *s = c->shape;
    const float *k = rs->kp ? rs->kp : c->k, *v = c->v;
    const int64_t *seg = c->segs ? c->masks->kv_segments : NULL;
    const ring_span sp = ring_plan_held(&rs->plan, c->r, 0, rs->last);
    const int64_t cnt = sp.b - sp.a, rk = rs->row_k, rv = rs->row_v;
    const int64_t m = c->m_own;
    const int direct = !rs->wire16 && sp.a == 0 && cnt == m;
    rs->own_k = direct ? k : NULL;
    rs->own_v = direct ? v : NULL;
    for (int64_t b = 0; b < s->B; b++) {
        if (!direct) {
            own_rows(rs, b * cnt * rk, k + (b * m + sp.a) * rk, cnt * rk);
            own_rows(rs, s->B * cnt * rk + b * cnt * rv,
                     v + (b * m + sp.a) * rv, cnt * rv);
        }
        if (seg)
            memcpy(rs->buf[0].seg + b * cnt, seg + b * m + sp.a,
                   sizeof(int64_t) * (size_t)cnt);
    }
}

/* A held block of `held` rows: where its K rows and V rows start, in
 * bytes from the address a transfer names: one buffer (K then V) or, for
 * the block read in place, two arrays at absolute addresses (from
 * MPI_BOTTOM). */
typedef struct {
    MPI_Aint k, v;
    int64_t held;
} rows_at;

/* Datatype selecting rows [off, off + cnt) of the held block at,
 * laid out as the receiver's block of cnt rows: B pieces of K rows (row_k
 * elements each, from at.k), then B pieces of V rows (row_v, from at.v;
 * 0: none), or B pieces of ids (row_k = 1, base MPI_INT64_T). Counts are
 * in rows and displacements in bytes, so a message may exceed 2^31
 * elements. Returns 0 or -1. */
static int rows_type(int64_t B, rows_at at, int64_t off, int64_t cnt,
                     int64_t row_k, int64_t row_v, MPI_Datatype base,
                     MPI_Datatype *type)
{
    const int64_t held = at.held;
    const int parts = (int)(row_v ? 2 * B : B);
    int *len = malloc(sizeof(int) * (size_t)parts);
    MPI_Aint *disp = malloc(sizeof(MPI_Aint) * (size_t)parts);
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (size_t)parts);
    MPI_Datatype rk = MPI_DATATYPE_NULL, rv = MPI_DATATYPE_NULL;
    int size, rc = -1;
    if (!len || !disp || !types || cnt > INT_MAX ||
        MPI_Type_size(base, &size) != MPI_SUCCESS ||
        MPI_Type_contiguous((int)row_k, base, &rk) != MPI_SUCCESS ||
        (row_v && MPI_Type_contiguous((int)row_v, base, &rv) != MPI_SUCCESS))
        goto cleanup;
    for (int64_t b = 0; b < B; b++) {
        len[b] = (int)cnt;
        types[b] = rk;
        disp[b] = at.k + (MPI_Aint)((b * held + off) * row_k) * size;
        if (row_v) {
            len[B + b] = (int)cnt;
            types[B + b] = rv;
            disp[B + b] = at.v + (MPI_Aint)((b * held + off) * row_v) * size;
        }
    }
    if (MPI_Type_create_struct(parts, len, disp, types, type) == MPI_SUCCESS &&
        MPI_Type_commit(type) == MPI_SUCCESS)
        rc = 0;
cleanup:
    if (rk != MPI_DATATYPE_NULL && MPI_Type_free(&rk) != MPI_SUCCESS)
        rc = -1;
    if (rv != MPI_DATATYPE_NULL && MPI_Type_free(&rv) != MPI_SUCCESS)
        rc = -1;
    free(len);
    free(disp);
    free(types);
    return rc;
}

/* Where the block of cnt rows held at step t lies for a send, and the
 * address to name (*at_buf): buf's or w16's of step t, or the arrays read
 * in place at step 0 (absolute addresses, from MPI_BOTTOM). A receive
 * buffer is the first case. */
static rows_at held_at(const ring_state *rs, int t, int64_t cnt, void **at_buf)
{
    const int64_t elt_bytes = rs->wire16 ? 2 : (int64_t)sizeof(float);
    if (t == 0 && rs->own_k) {
        MPI_Aint k, v;
        MPI_Get_address(rs->own_k, &k);
        MPI_Get_address(rs->own_v, &v);
        *at_buf = MPI_BOTTOM;
        return (rows_at){k, v, cnt};
    }
    *at_buf = rs->wire16 ? (void *)rs->w16[t & 1] : (void *)rs->buf[t & 1].kv;
    return (rows_at){
        0, (MPI_Aint)(rs->c->shape->B * cnt * rs->row_k * elt_bytes), cnt};
}

/* Posts step t's transfers: the part of the held block (of block src)
 * that rank r + 1 still needs to the right, the part of the next block
 * this rank needs from the left. */
static ra_status step_post(ring_state *rs, int t, ring_reqs *rq)
{
    const strat_call *c = rs->c;
    const int P = c->P, src = (c->r - t + P) % P, next = (src - 1 + P) % P;
    const ring_span held = ring_plan_held(&rs->plan, src, t, rs->last);
    const ring_span out = ring_plan_held(&rs->plan, src, t + 1, rs->last);
    const ring_span in = ring_plan_held(&rs->plan, next, t + 1, rs->last);
    const int64_t B = c->shape->B, cnt = held.b - held.a;
    const int64_t in_cnt = in.b - in.a, out_cnt = out.b - out.a;
    const int left = (c->r - 1 + P) % P, right = (c->r + 1) % P;
    const ring_buf cur = rs->buf[t & 1], nxt = rs->buf[(t + 1) & 1];
    /* K/V as fp32, or bf16 with wire16: half the bytes */
    const MPI_Datatype elt = rs->wire16 ? MPI_UINT16_T : MPI_FLOAT;
    void *kv_out, *kv_in;
    const rows_at at_out = held_at(rs, t, cnt, &kv_out),
                  at_in = held_at(rs, t + 1, in_cnt, &kv_in);
    const rows_at ids = {0, 0, cnt}, ids_in = {0, 0, in_cnt};
    const int64_t elt_bytes = rs->wire16 ? 2 : (int64_t)sizeof(float);
    MPI_Datatype *ty = rq->types;
    MPI_Request *recv = rq->req, *send = rq->req + RING_PAIRS;
    if (rows_type(B, at_out, out.a - held.a, out_cnt, rs->row_k, rs->row_v,
                  elt, &ty[RING_PAIRS]) != 0 ||
        rows_type(B, at_in, 0, in_cnt, rs->row_k, rs->row_v, elt,
                  &ty[0]) != 0 ||
        (c->segs &&
         (rows_type(B, ids, out.a - held.a, out_cnt, 1, 0, MPI_INT64_T,
                    &ty[RING_PAIRS + 1]) != 0 ||
          rows_type(B, ids_in, 0, in_cnt, 1, 0, MPI_INT64_T, &ty[1]) != 0)))
        return ra_error_set(RA_ERR_MPI, "ring: step %d: cannot describe the "
                                        "block to MPI", t);
    if (MPI_Irecv(kv_in, 1, ty[0], left, TAG_KV, c->comm, &recv[0]) !=
            MPI_SUCCESS ||
        MPI_Isend(kv_out, 1, ty[RING_PAIRS], right, TAG_KV, c->comm,
                  &send[0]) != MPI_SUCCESS ||
        (c->segs &&
         (MPI_Irecv(nxt.seg, 1, ty[1], left, TAG_SEG, c->comm, &recv[1]) !=
              MPI_SUCCESS ||
          MPI_Isend(cur.seg, 1, ty[RING_PAIRS + 1], right, TAG_SEG, c->comm,
                    &send[1]) != MPI_SUCCESS)))
        return ra_error_set(RA_ERR_MPI, "ring: step %d: posting the transfers "
                                        "failed", t);
    strat_count(c, right, B * out_cnt *
                              ((rs->row_k + rs->row_v) * elt_bytes +
                               (c->segs ? (int64_t)sizeof(int64_t) : 0)));
    return RA_OK;
}

/* A pass's ring and what it does at each step. */
typedef struct {
    ring_state *rs;
    const ring_pass_ops *ops;
} pass_ctx;

static ra_status pass_post(void *ctx, int t, ring_reqs *rq)
{
    const pass_ctx *pc = ctx;
    ra_status st = t < pc->rs->last ? step_post(pc->rs, t, rq) : RA_OK;
    if (st == RA_OK && pc->ops->post)
        st = pc->ops->post(pc->rs, t, rq, pc->ops->arg);
    return st;
}

/* Points the kernel at the block held at step t (its count, the global
 * positions and ids of its keys; with wire16 its K/V widened to fp32 into
 * buf[0]) and visits it. */
static void pass_visit(void *ctx, int t, ring_reqs *rq)
{
    const pass_ctx *pc = ctx;
    ring_state *rs = pc->rs;
    const strat_call *c = rs->c;
    const int src = (c->r - t + c->P) % c->P;
    const ring_span held = ring_plan_held(&rs->plan, src, t, rs->last);
    const ra_slice keys = ra_params_slice(c->params, c->lay, c->shape->M, src, c->P);
    const ring_buf cur = rs->buf[t & 1];
    rs->blk.m = held.b - held.a;
    for (int64_t j = 0; j < rs->blk.m; j++)
        rs->kpos[j] = ra_slice_pos(&keys, held.a + j);
    rs->blk.mask.k_seg = c->segs ? cur.seg : NULL;
    const int64_t rows = c->shape->B * rs->blk.m;
    float *kv = cur.kv;
    if (t == 0 && rs->own_k) {
        pc->ops->visit(rs, rs->own_k, rs->own_v, rq, pc->ops->arg);
        return;
    }
    if (rs->wire16) {
        kv = rs->buf[0].kv;
        ra_bf16_unpack(rs->w16[t & 1], rows * (rs->row_k + rs->row_v), kv);
    }
    pc->ops->visit(rs, kv, kv + rows * rs->row_k, rq, pc->ops->arg);
}

static ra_status pass_settle(void *ctx, int t, ring_reqs *rq)
{
    const pass_ctx *pc = ctx;
    (void)rq;
    return pc->ops->settle(pc->rs, t, pc->ops->arg);
}

static void pass_state(void *ctx, int t, ra_state *st)
{
    const pass_ctx *pc = ctx;
    pc->ops->state(pc->rs, t, st, pc->ops->arg);
}

/* The datatypes of a fetch (ring_fetch): this rank's part of its own
 * block for step s to send (K/V rows, then ids), the block of step s to
 * receive (fp32 K/V into buf, ids into seg). Returns 0 or -1. */
static int fetch_types(const ring_state *rs, int s, MPI_Datatype ty[4])
{
    const strat_call *c = rs->c;
    const int from = (c->r - s + c->P) % c->P;
    const ring_span mine = ring_plan_held(&rs->plan, c->r, s, rs->last);
    const ring_span in = ring_plan_held(&rs->plan, from, s, rs->last);
    const int64_t B = c->shape->B, cnt = in.b - in.a;
    MPI_Aint k, v, seg = 0;
    MPI_Get_address(rs->kp ? rs->kp : c->k, &k);
    MPI_Get_address(c->v, &v);
    const rows_at own = {k, v, c->m_own},
                  at_in = {0, (MPI_Aint)(B * cnt * rs->row_k *
                                             (int64_t)sizeof(float)), cnt};
    if (rows_type(B, own, mine.a, mine.b - mine.a, rs->row_k, rs->row_v,
                  MPI_FLOAT, &ty[0]) != 0 ||
        rows_type(B, at_in, 0, cnt, rs->row_k, rs->row_v, MPI_FLOAT,
                  &ty[1]) != 0)
        return -1;
    if (!c->segs)
        return 0;
    MPI_Get_address(c->masks->kv_segments, &seg);
    const rows_at ids = {seg, 0, c->m_own}, ids_in = {0, 0, cnt};
    return rows_type(B, ids, mine.a, mine.b - mine.a, 1, 0, MPI_INT64_T,
                     &ty[2]) != 0 ||
                   rows_type(B, ids_in, 0, cnt, 1, 0, MPI_INT64_T, &ty[3]) != 0
               ? -1 : 0;
}

/* The block of step s from rank r - s, which sends it from its own
 * slices (rank r to r + s): into buf[s & 1], or with wire16 through
 * buf[0] into w16[s & 1] (exact: k and v are bf16 values already). */
static ra_status ring_fetch(ring_state *rs, int s)
{
    strat_call *c = rs->c;
    const int P = c->P, to = (c->r + s) % P, from = (c->r - s + P) % P;
    const ring_span in = ring_plan_held(&rs->plan, from, s, rs->last);
    const int64_t rows = c->shape->B * (in.b - in.a);
    MPI_Datatype ty[4] = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL,
                          MPI_DATATYPE_NULL, MPI_DATATYPE_NULL};
    MPI_Request req[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                          MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    float *kv = rs->wire16 ? rs->buf[0].kv : rs->buf[s & 1].kv;
    ra_status st = RA_OK;
    if (fetch_types(rs, s, ty) != 0 ||
        MPI_Irecv(kv, 1, ty[1], from, TAG_FETCH, c->comm, &req[0]) !=
            MPI_SUCCESS ||
        MPI_Isend(MPI_BOTTOM, 1, ty[0], to, TAG_FETCH, c->comm, &req[2]) !=
            MPI_SUCCESS ||
        (c->segs &&
         (MPI_Irecv(rs->buf[s & 1].seg, 1, ty[3], from, TAG_FETCH + 1,
                    c->comm, &req[1]) != MPI_SUCCESS ||
          MPI_Isend(MPI_BOTTOM, 1, ty[2], to, TAG_FETCH + 1, c->comm,
                    &req[3]) != MPI_SUCCESS)))
        st = ra_error_set(RA_ERR_MPI, "ring: resuming at step %d: posting "
                          "the block's transfers failed", s);
    const int peer[4] = {from, from, to, to};
    const strat_watch w = {"the resumed step's block", peer, 2, NULL, NULL};
    if (st == RA_OK)
        st = strat_wait(c, 4, req, &w);
    if (st == RA_OK && rs->wire16)
        ra_bf16_pack(kv, rows * (rs->row_k + rs->row_v), rs->w16[s & 1]);
    for (int i = 0; i < 4 && !c->stalled; i++)
        if (ty[i] != MPI_DATATYPE_NULL)
            MPI_Type_free(&ty[i]);
    return st;
}

ra_status ring_resume(ring_state *rs, const ring_pass_ops *ops)
{
    strat_call *c = rs->c;
    ra_state s = {.steps = rs->last + 1};
    rs->start = 0;
    if (!ops->state || !c->params->exec.checkpoint)
        return RA_OK;
    ops->state(rs, 1, &s, ops->arg);
    ra_status st = strat_ckpt_load(c, &s);
    if (st != RA_OK || s.step == 0)
        return st;
    rs->start = s.step;
    rs->steps_done = s.step;
    rs->own_k = rs->own_v = NULL; /* step 0's block is not read again */
    return ring_fetch(rs, s.step);
}

ra_status ring_pass(ring_state *rs, const ring_pass_ops *ops)
{
    strat_call *c = rs->c;
    pass_ctx pc = {rs, ops};
    ring_loop lp = {.steps = rs->last + 1, .left = (c->r - 1 + c->P) % c->P,
                    .right = (c->r + 1) % c->P, .post = pass_post,
                    .visit = pass_visit,
                    .settle = ops->settle ? pass_settle : NULL, .ctx = &pc,
                    .done = rs->steps_done, .total = rs->steps_total,
                    .start = rs->start,
                    .state = ops->state ? pass_state : NULL};
    const ra_status st = ring_loop_run(c, &lp);
    rs->steps_done = lp.done;
    rs->start = 0; /* a later pass starts at step 0 */
    return st;
}
