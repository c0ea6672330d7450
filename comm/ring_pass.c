/* ring_pass.c: the steps of one ring pass (see ring.h).
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
 * fails the call instead of hanging it. */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "ring.h"

enum { TAG_KV = 7301, TAG_SEG = 7302, TAG_END = 7303 };

void ring_poll(void *ctx)
{
    ring_step *st = ctx;
    if (st->pending && !st->failed) {
        int done = 0;
        if (MPI_Testall(4, st->req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            st->failed = 1;
        st->pending = !done;
    }
}

void ring_pack_own(ring_state *rs, const float *k, const float *v,
                   const int64_t *seg)
{
    const ra_shape *s = rs->shape;
    const ring_span sp = ring_plan_held(&rs->plan, rs->r, 0, rs->last);
    const int64_t cnt = sp.b - sp.a, rk = rs->row_k, rv = rs->row_v;
    const int64_t m = rs->m_own;
    const ring_buf dst = rs->buf[0];
    for (int64_t b = 0; b < s->B; b++) {
        ra_copy_threads(dst.kv + b * cnt * rk, k + (b * m + sp.a) * rk,
                        sizeof(float) * (size_t)(cnt * rk), rs->threads);
        ra_copy_threads(dst.kv + s->B * cnt * rk + b * cnt * rv,
                        v + (b * m + sp.a) * rv,
                        sizeof(float) * (size_t)(cnt * rv), rs->threads);
        if (seg)
            memcpy(dst.seg + b * cnt, seg + b * m + sp.a,
                   sizeof(int64_t) * (size_t)cnt);
    }
}

/* Datatype selecting rows [off, off + cnt) of a held block of `held` rows,
 * laid out as the receiver's block of cnt rows: B pieces of K rows (row_k
 * elements each), then B pieces of V rows (row_v; 0: none), or B pieces of
 * ids (row_k = 1, base MPI_INT64_T). Counts are in rows and displacements
 * in bytes, so a message may exceed 2^31 elements. Returns 0 or -1. */
static int rows_type(int64_t B, int64_t held, int64_t off, int64_t cnt,
                     int64_t row_k, int64_t row_v, MPI_Datatype base,
                     MPI_Datatype *type)
{
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
        disp[b] = (MPI_Aint)((b * held + off) * row_k) * size;
        if (row_v) {
            len[B + b] = (int)cnt;
            types[B + b] = rv;
            disp[B + b] = (MPI_Aint)(B * held * row_k + (b * held + off) * row_v) *
                          size;
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

/* Posts step t's transfers: the part `out` of the held block `held` (of
 * block src) to the right, the part `in` of the next block from the left. */
static ra_status step_post(ring_state *rs, int t, ring_span held,
                           ring_span out, ring_span in, ring_step *step)
{
    const int64_t B = rs->shape->B, cnt = held.b - held.a;
    const int64_t in_cnt = in.b - in.a, out_cnt = out.b - out.a;
    const int left = (rs->r - 1 + rs->P) % rs->P, right = (rs->r + 1) % rs->P;
    const ring_buf cur = rs->buf[t & 1], nxt = rs->buf[(t + 1) & 1];
    MPI_Datatype *ty = step->types;
    if (rows_type(B, cnt, out.a - held.a, out_cnt, rs->row_k, rs->row_v,
                  MPI_FLOAT, &ty[1]) != 0 ||
        rows_type(B, in_cnt, 0, in_cnt, rs->row_k, rs->row_v, MPI_FLOAT,
                  &ty[0]) != 0 ||
        (rs->segs &&
         (rows_type(B, cnt, out.a - held.a, out_cnt, 1, 0, MPI_INT64_T,
                    &ty[3]) != 0 ||
          rows_type(B, in_cnt, 0, in_cnt, 1, 0, MPI_INT64_T, &ty[2]) != 0)))
        return ra_error_set(RA_ERR_MPI, "ring: step %d: cannot describe the "
                                        "block to MPI", t);
    if (MPI_Irecv(nxt.kv, 1, ty[0], left, TAG_KV, rs->comm, &step->req[0]) !=
            MPI_SUCCESS ||
        MPI_Isend(cur.kv, 1, ty[1], right, TAG_KV, rs->comm, &step->req[1]) !=
            MPI_SUCCESS ||
        (rs->segs &&
         (MPI_Irecv(nxt.seg, 1, ty[2], left, TAG_SEG, rs->comm,
                    &step->req[2]) != MPI_SUCCESS ||
          MPI_Isend(cur.seg, 1, ty[3], right, TAG_SEG, rs->comm,
                    &step->req[3]) != MPI_SUCCESS)))
        return ra_error_set(RA_ERR_MPI, "ring: step %d: posting the transfers "
                                        "failed", t);
    step->pending = 1;
    rs->tm->bytes_sent += B * out_cnt *
                          ((rs->row_k + rs->row_v) * (int64_t)sizeof(float) +
                           (rs->segs ? (int64_t)sizeof(int64_t) : 0));
    return RA_OK;
}

int ring_requests_test(MPI_Request *req, int n, int *progressed)
{
    int active = 0;
    for (int i = 0; i < n; i++) {
        if (req[i] == MPI_REQUEST_NULL)
            continue;
        int done = 0;
        if (MPI_Test(&req[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return -1;
        *progressed |= done;
        active += !done;
    }
    return active;
}

int ring_requests_wait(MPI_Request *req, int n, double timeout)
{
    if (!(timeout > 0))
        return MPI_Waitall(n, req, MPI_STATUSES_IGNORE) == MPI_SUCCESS ? 0
                                                                       : -1;
    double since = MPI_Wtime();
    for (;;) {
        int progressed = 0;
        const int active = ring_requests_test(req, n, &progressed);
        if (active <= 0)
            return active;
        const double now = MPI_Wtime();
        if (progressed)
            since = now;
        if (now - since > timeout)
            return 1;
        sched_yield();
    }
}

/* Waits for step t's transfers. With a stall timeout, gives up when none
 * of them has completed for that long, naming the rank waited for: the
 * left neighbour while a receive is open, else the right one. */
static ra_status step_wait(ring_state *rs, int t, ring_step *step)
{
    if (!step->pending)
        return RA_OK;
    if (step->failed)
        return ra_error_set(RA_ERR_MPI, "ring: step %d: testing the "
                                        "transfers failed", t);
    const int rc = ring_requests_wait(step->req, 4, rs->stall_timeout);
    if (rc < 0)
        return ra_error_set(RA_ERR_MPI, "ring: step %d: a transfer failed",
                            t);
    if (rc == 0)
        return RA_OK;
    const int recv_open = step->req[0] != MPI_REQUEST_NULL ||
                          step->req[2] != MPI_REQUEST_NULL;
    const int peer = recv_open ? (rs->r - 1 + rs->P) % rs->P
                               : (rs->r + 1) % rs->P;
    rs->stalled = 1;
    if (t > rs->last)
        return ra_error_set(RA_ERR_MPI, "ring: rank %d stalled at the end of "
                            "the ring (after step %d of %d): rank %d has not "
                            "finished its steps for %.3g s (stopped, frozen "
                            "or lost?)", rs->r, rs->last, rs->last + 1, peer,
                            rs->stall_timeout);
    return ra_error_set(RA_ERR_MPI, "ring: rank %d stalled at step %d of %d: "
                        "no transfer from rank %d progressed for %.3g s "
                        "(stopped, frozen or lost?)", rs->r, t, rs->last + 1,
                        peer, rs->stall_timeout);
}

/* Frees the datatypes of a step whose transfers are over. */
static ra_status step_free(int t, ring_step *step)
{
    ra_status st = RA_OK;
    for (int i = 0; i < 4; i++)
        if (step->types[i] != MPI_DATATYPE_NULL &&
            MPI_Type_free(&step->types[i]) != MPI_SUCCESS)
            st = ra_error_set(RA_ERR_MPI, "ring: step %d: freeing a datatype "
                                          "failed", t);
    return st;
}

/* Points the kernel at block src held at step t: its count and the global
 * positions and ids of its keys. */
static void step_block(ring_state *rs, int src, ring_span held, ring_buf cur)
{
    const ra_slice keys = ra_layout_slice(rs->lay, rs->shape->M, src, rs->P);
    rs->blk.m = held.b - held.a;
    for (int64_t j = 0; j < rs->blk.m; j++)
        rs->kpos[j] = ra_slice_pos(&keys, held.a + j);
    rs->blk.mask.k_seg = rs->segs ? cur.seg : NULL;
}

/* One step: post, visit, wait, free. */
static ra_status ring_step_run(ring_state *rs, int t, ring_visit visit,
                               void *arg)
{
    const int P = rs->P, src = (rs->r - t + P) % P;
    const int next = (rs->r - t - 1 + P) % P;
    const ring_span held = ring_plan_held(&rs->plan, src, t, rs->last);
    const ring_buf cur = rs->buf[t & 1];
    ring_step step = {{MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                       MPI_REQUEST_NULL},
                      {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL, MPI_DATATYPE_NULL,
                       MPI_DATATYPE_NULL}, 0, 0};
    ra_status st = RA_OK;
    if (t < rs->last)
        st = step_post(rs, t, held,
                       ring_plan_held(&rs->plan, src, t + 1, rs->last),
                       ring_plan_held(&rs->plan, next, t + 1, rs->last), &step);
    if (st == RA_OK) {
        step_block(rs, src, held, cur);
        const double t0 = MPI_Wtime();
        visit(rs, cur.kv, cur.kv + rs->shape->B * rs->blk.m * rs->row_k,
              &step, arg);
        const double t1 = MPI_Wtime();
        st = step_wait(rs, t, &step);
        rs->tm->compute += t1 - t0;
        rs->tm->comm_wait += MPI_Wtime() - t1;
    }
    if (rs->stalled)
        return st; /* the datatypes stay with the transfers in flight */
    const ra_status fst = step_free(t, &step);
    return st != RA_OK ? st : fst;
}

ra_status ring_pass(ring_state *rs, ring_visit visit, void *arg)
{
    ra_status st = RA_OK;
    for (int t = 0; t <= rs->last && st == RA_OK; t++) {
        st = ring_step_run(rs, t, visit, arg);
        if (st == RA_OK)
            ra_step_report(rs->params, ++rs->steps_done, rs->steps_total);
    }
    return st;
}

ra_status ring_finish(ring_state *rs)
{
    if (rs->P == 1 || !(rs->stall_timeout > 0))
        return RA_OK;
    const int left = (rs->r - 1 + rs->P) % rs->P, right = (rs->r + 1) % rs->P;
    ring_step step = {{MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                       MPI_REQUEST_NULL},
                      {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL, MPI_DATATYPE_NULL,
                       MPI_DATATYPE_NULL}, 1, 0};
    if (MPI_Irecv(NULL, 0, MPI_BYTE, left, TAG_END, rs->comm, &step.req[0]) !=
            MPI_SUCCESS ||
        MPI_Isend(NULL, 0, MPI_BYTE, right, TAG_END, rs->comm, &step.req[1]) !=
            MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring: posting the end of the ring "
                                        "failed");
    /* not counted as comm_wait: no data moves, a rank only learns that
     * its neighbour is done (the time is in the call's total) */
    return step_wait(rs, rs->last + 1, &step);
}
