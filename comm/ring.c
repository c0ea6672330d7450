/* ring.c: the ring of ranks around ra_forward.
 *
 * Rank r holds its query slice for the whole call and, during step t, the
 * part of the K/V block that originated at rank (r - t) mod P that it or a
 * rank after it still needs (plan.h). Before computing on that block it
 * posts the receive of the next block from r - 1 and the send of the part
 * of the current one that r + 1 needs (K and V in one message, described by
 * an MPI datatype, so nothing is copied), two buffers alternating; both
 * requests are polled between tiles so that the transfer moves while the
 * kernel runs: Open MPI has no progress thread. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "internal.h"
#include "kernel.h"
#include "plan.h"

/* OpenBLAS's thread control; single-threaded BLAS inside our own threads. */
int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);

enum { TAG_KV = 7301, TAG_SEG = 7302 };

/* Requests of one ring step, polled between tiles. */
typedef struct {
    MPI_Request req[4]; /* receive K/V, send K/V, receive ids, send ids */
    int pending;
} ring_step;

static void ring_poll(void *ctx)
{
    ring_step *st = ctx;
    if (st->pending) {
        int done = 0;
        MPI_Testall(4, st->req, &done, MPI_STATUSES_IGNORE);
        st->pending = !done;
    }
}

/* A held block: cnt rows of K (B, cnt, G, D) then V (B, cnt, G, Dv) in one
 * float buffer, segment ids (B, cnt) in another. */
typedef struct {
    float *kv;
    int64_t *seg;
} ring_buf;

/* Copies rows [a, b) of this rank's k (B, m, rk floats per row), v
 * (B, m, G, Dv) and ids (B, m) into a held block of b - a rows. */
static void pack_own(const ra_shape *s, int64_t m, int64_t rk, ring_span sp,
                     const float *k, const float *v, const int64_t *seg,
                     ring_buf dst)
{
    const int64_t cnt = sp.b - sp.a, rv = s->G * s->Dv;
    for (int64_t b = 0; b < s->B; b++) {
        memcpy(dst.kv + b * cnt * rk, k + (b * m + sp.a) * rk,
               sizeof(float) * (size_t)(cnt * rk));
        memcpy(dst.kv + s->B * cnt * rk + b * cnt * rv,
               v + (b * m + sp.a) * rv, sizeof(float) * (size_t)(cnt * rv));
        if (seg)
            memcpy(dst.seg + b * cnt, seg + b * m + sp.a,
                   sizeof(int64_t) * (size_t)cnt);
    }
}

/* Datatype selecting rows [off, off + cnt) of a held block of `held` rows,
 * laid out as the receiver's block of cnt rows: B pieces of K rows (row_k
 * floats each), then B pieces of V rows (row_v floats; 0: none), or B
 * pieces of ids (row_k = 1, base MPI_INT64_T). Counts are in rows and
 * displacements in bytes, so a message may exceed 2^31 elements. */
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
    if (rk != MPI_DATATYPE_NULL)
        MPI_Type_free(&rk);
    if (rv != MPI_DATATYPE_NULL)
        MPI_Type_free(&rv);
    free(len);
    free(disp);
    free(types);
    return rc;
}

/* Makes every rank agree on st: the worst (largest) status wins, so that a
 * failure on one rank never leaves the others waiting in the ring. */
static ra_status agree(MPI_Comm comm, ra_status st)
{
    int mine = (int)st, all = 0;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return RA_ERR_MPI;
    if (all != RA_OK && st == RA_OK)
        ra_error_set((ra_status)all, "another rank failed: %s",
                     ra_status_str((ra_status)all));
    return (ra_status)all;
}

static ra_status check_params(const ra_shape *s, const ra_params *p,
                              const ra_masks *mk)
{
    ra_status st = ra_shape_check(s);
    if (st != RA_OK)
        return st;
    if (p->score == RA_SCORE_GAUSSIAN && !(p->sigma > 0 && isfinite(p->sigma)))
        return ra_error_set(RA_ERR_ARG, "score gaussian: sigma must be a "
                                        "finite number > 0");
    if (p->score == RA_SCORE_ADDITIVE &&
        (!p->additive || p->additive->A < 1 || !p->additive->w_q ||
         !p->additive->w_k || !p->additive->w_v))
        return ra_error_set(RA_ERR_ARG, "score additive: weights w_q (A, D), "
                                        "w_k (A, Dk), w_v (A) are required");
    if (p->score != RA_SCORE_ADDITIVE && ra_shape_dk(s) != s->D)
        return ra_error_set(RA_ERR_ARG, "shape: keys of dim Dk=%lld differ "
                            "from queries of dim D=%lld, which only the "
                            "additive score allows", (long long)ra_shape_dk(s),
                            (long long)s->D);
    if (p->window && (p->window_left < 0 || p->window_right < 0))
        return ra_error_set(RA_ERR_ARG, "window: left and right must be >= 0");
    if (p->block_q < 0 || p->block_kv < 0)
        return ra_error_set(RA_ERR_ARG, "tiles: block sizes must be >= 0");
    if (mk && (!mk->q_segments) != (!mk->kv_segments))
        return ra_error_set(RA_ERR_ARG, "masks: q_segments and kv_segments "
                                        "go together");
    for (int64_t b = 0; mk && b < s->B; b++) {
        if (mk->q_lens && (mk->q_lens[b] < 0 || mk->q_lens[b] > s->N))
            return ra_error_set(RA_ERR_ARG, "masks: q_lens[%lld] = %lld is "
                                "outside [0, N=%lld]", (long long)b,
                                (long long)mk->q_lens[b], (long long)s->N);
        if (mk->kv_lens && (mk->kv_lens[b] < 0 || mk->kv_lens[b] > s->M))
            return ra_error_set(RA_ERR_ARG, "masks: kv_lens[%lld] = %lld is "
                                "outside [0, M=%lld]", (long long)b,
                                (long long)mk->kv_lens[b], (long long)s->M);
    }
    return RA_OK;
}

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

ra_range ra_attn_map_rows(ra_layout layout, int64_t N, int rank, int nranks,
                          const ra_attn_map *map)
{
    const ra_slice qs = ra_layout_slice(layout, N, rank, nranks);
    return map_rows(&qs, map);
}

static ra_status check_map(const ra_shape *s, const ra_attn_map *map)
{
    if (!map || map->i0 < 0 || map->i1 > s->N || map->i0 >= map->i1)
        return ra_error_set(RA_ERR_ARG, "attention map: rows [%lld, %lld) "
                            "must lie within [0, N=%lld) and be non-empty",
                            map ? (long long)map->i0 : 0LL,
                            map ? (long long)map->i1 : 0LL, (long long)s->N);
    if (map->nheads < 1 || !map->heads || !map->out)
        return ra_error_set(RA_ERR_ARG, "attention map: heads and out are "
                                        "required");
    for (int64_t i = 0; i < map->nheads; i++)
        if (map->heads[i] < 0 || map->heads[i] >= s->H)
            return ra_error_set(RA_ERR_ARG, "attention map: head %lld is "
                                "outside [0, H=%lld)",
                                (long long)map->heads[i], (long long)s->H);
    return RA_OK;
}

/* Everything one ring pass needs; set up once per call. */
typedef struct {
    MPI_Comm comm;
    int P, r, last;
    const ra_shape *shape;
    ra_layout lay;
    ring_plan plan;
    int segs, may_poll;
    int64_t row_k, row_v;
    ring_buf buf[2];
    ra_block blk;
    int64_t *kpos;
    ra_timing *tm;
} ring_state;

/* What a pass does with the block held at one step: kb holds blk.m key
 * rows (B, m, row_k floats), vb their values (B, m, G, Dv). */
typedef void (*block_visit)(ring_state *rs, const float *kb, const float *vb,
                            ring_step *step, void *arg);

/* Runs steps 0 .. last: posts the transfers of the next block, visits the
 * current one, waits. buf[0] must hold this rank's own block. */
static ra_status ring_pass(ring_state *rs, block_visit visit, void *arg)
{
    const ra_shape *S = rs->shape;
    const int P = rs->P, r = rs->r, last = rs->last;
    const int left = (r - 1 + P) % P, right = (r + 1) % P;
    const int64_t row_k = rs->row_k, row_v = rs->row_v;
    ra_status st = RA_OK;
    for (int t = 0; t <= last && st == RA_OK; t++) {
        const int src = (r - t + P) % P, next = (r - t - 1 + P) % P;
        const ring_buf cur = rs->buf[t & 1], nxt = rs->buf[(t + 1) & 1];
        const ring_span held = ring_plan_held(&rs->plan, src, t, last);
        const int64_t cnt = held.b - held.a;
        ring_step step = {{MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                           MPI_REQUEST_NULL}, 0};
        MPI_Datatype kv_type = MPI_DATATYPE_NULL, seg_type = MPI_DATATYPE_NULL;
        MPI_Datatype kv_in = MPI_DATATYPE_NULL, seg_in = MPI_DATATYPE_NULL;
        if (t < last) {
            const ring_span in = ring_plan_held(&rs->plan, next, t + 1, last);
            const ring_span out = ring_plan_held(&rs->plan, src, t + 1, last);
            const int64_t in_cnt = in.b - in.a, out_cnt = out.b - out.a;
            int rc = rows_type(S->B, cnt, out.a - held.a, out_cnt, row_k,
                               row_v, MPI_FLOAT, &kv_type) ||
                     rows_type(S->B, in_cnt, 0, in_cnt, row_k, row_v,
                               MPI_FLOAT, &kv_in);
            if (rc == 0 && rs->segs)
                rc = rows_type(S->B, cnt, out.a - held.a, out_cnt, 1, 0,
                               MPI_INT64_T, &seg_type) ||
                     rows_type(S->B, in_cnt, 0, in_cnt, 1, 0, MPI_INT64_T,
                               &seg_in);
            if (rc == 0)
                rc = MPI_Irecv(nxt.kv, 1, kv_in, left, TAG_KV, rs->comm,
                               &step.req[0]) |
                     MPI_Isend(cur.kv, 1, kv_type, right, TAG_KV, rs->comm,
                               &step.req[1]);
            if (rc == 0 && rs->segs)
                rc = MPI_Irecv(nxt.seg, 1, seg_in, left, TAG_SEG, rs->comm,
                               &step.req[2]) |
                     MPI_Isend(cur.seg, 1, seg_type, right, TAG_SEG, rs->comm,
                               &step.req[3]);
            if (rc != 0) {
                st = ra_error_set(RA_ERR_MPI, "ring: posting step %d failed", t);
                break;
            }
            step.pending = 1;
            rs->tm->bytes_sent += S->B * out_cnt *
                             ((row_k + row_v) * (int64_t)sizeof(float) +
                              (rs->segs ? (int64_t)sizeof(int64_t) : 0));
        }
        const ra_slice src_keys = ra_layout_slice(rs->lay, S->M, src, P);
        rs->blk.m = cnt;
        for (int64_t j = 0; j < cnt; j++)
            rs->kpos[j] = ra_slice_pos(&src_keys, held.a + j);
        rs->blk.mask.k_seg = rs->segs ? cur.seg : NULL;

        double t0 = MPI_Wtime();
        visit(rs, cur.kv, cur.kv + S->B * cnt * row_k, &step, arg);
        double t1 = MPI_Wtime();
        if (step.pending &&
            MPI_Waitall(4, step.req, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            st = ra_error_set(RA_ERR_MPI, "ring: step %d transfer failed", t);
        rs->tm->compute += t1 - t0;
        rs->tm->comm_wait += MPI_Wtime() - t1;
        MPI_Datatype *types[4] = {&kv_type, &kv_in, &seg_type, &seg_in};
        for (int i = 0; i < 4; i++)
            if (*types[i] != MPI_DATATYPE_NULL)
                MPI_Type_free(types[i]);
    }
    return st;
}

/* The forward pass: fold the block into (o, lse). */
typedef struct {
    const float *q; /* or its additive projection */
    float *o, *lse;
    ra_workspace *ws;
} forward_arg;

static void visit_forward(ring_state *rs, const float *kb, const float *vb,
                          ring_step *step, void *arg)
{
    forward_arg *fa = arg;
    ra_kernel_forward_block(&rs->blk, fa->q, kb, vb, fa->o, fa->lse, fa->ws,
                            rs->may_poll ? ring_poll : NULL, step);
}

/* The attention-map pass: write the block's columns of the weights. */
typedef struct {
    const float *q;
    const float *lse;
    int64_t r0, nr;
    const ra_attn_map *map;
    ra_workspace *ws;
} map_arg;

static void visit_map(ring_state *rs, const float *kb, const float *vb,
                      ring_step *step, void *arg)
{
    (void)vb;
    map_arg *ma = arg;
    ra_kernel_probs(&rs->blk, ma->r0, ma->nr, ma->map->heads,
                    ma->map->nheads, ma->q, kb, ma->lse, ma->map->out,
                    rs->shape->M, ma->ws, rs->may_poll ? ring_poll : NULL,
                    step);
}

/* The forward pass and, when map is given, the attention map after it. */
static ra_status ring_forward(MPI_Comm user_comm, const ra_shape *shape,
                              const ra_params *params, const ra_masks *masks,
                              const float *q, const float *k, const float *v,
                              float *o, float *lse, ra_timing *timing,
                              ra_attn_map *map)
{
    double t_start = MPI_Wtime();
    ra_timing tm = {0};
    ra_status st = check_params(shape, params, masks);
    const int segs = masks && masks->q_segments;

    MPI_Comm comm;
    if (MPI_Comm_dup(user_comm, &comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring: MPI_Comm_dup failed");
    /* a rank whose arguments are refused must not leave the others in the
     * ring: every rank returns the worst verdict */
    if ((st = agree(comm, st)) != RA_OK) {
        MPI_Comm_free(&comm);
        return st;
    }
    int P, r;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &r);

    int64_t bq, bkv;
    ra_params_tiles(params, shape, &bq, &bkv);
    const int threads = ra_params_threads(params);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    /* Only the thread that called MPI may poll, and only if MPI allows it
     * while other threads run. */
    const int may_poll = !params->no_poll &&
                         (threads == 1 || level >= MPI_THREAD_FUNNELED);

    const ra_layout lay = ra_params_layout(params, segs);
    const ra_slice qs = ra_layout_slice(lay, shape->N, r, P);
    const ra_slice ks = ra_layout_slice(lay, shape->M, r, P);
    const int64_t n = qs.count, m_own = ks.count;
    int64_t mmax = 0;
    for (int i = 0; i < P; i++) {
        int64_t c = ra_layout_slice(lay, shape->M, i, P).count;
        mmax = c > mmax ? c : mmax;
    }
    /* The additive score sends the keys' projections W_k k (A per head)
     * around the ring instead of the keys, and works on W_q q. */
    const int additive = params->score == RA_SCORE_ADDITIVE;
    const int64_t A = additive ? params->additive->A : 0;
    const int64_t row_k = shape->G * (additive ? A : shape->D);
    const int64_t row_v = shape->G * shape->Dv;
    const int64_t buf_floats = shape->B * mmax * (row_k + row_v);

    const ring_plan plan = ring_plan_make(shape, params, masks, P);
    const int last = ring_plan_last_step(&plan);

    ring_buf buf[2] = {{NULL, NULL}, {NULL, NULL}};
    int64_t *qpos = NULL, *kpos = NULL;
    float *qp = NULL, *kp = NULL; /* additive: (B, n, H, A), (B, m, G, A) */
    ra_workspace *ws = NULL;
    if (shape->B * mmax > INT_MAX || row_k + row_v > INT_MAX) {
        st = ra_error_set(RA_ERR_ARG,
                          "ring: a K/V block of %lld rows of %lld floats "
                          "cannot be described to MPI (counts are int); use "
                          "more ranks", (long long)(shape->B * mmax),
                          (long long)(row_k + row_v));
    } else {
        for (int i = 0; i < 2; i++) {
            buf[i].kv = malloc(sizeof(float) * (size_t)(buf_floats + 1));
            if (segs)
                buf[i].seg = malloc(sizeof(int64_t) *
                                    (size_t)(shape->B * mmax + 1));
        }
        qpos = malloc((size_t)(n + 1) * sizeof *qpos);
        kpos = malloc((size_t)(mmax + 1) * sizeof *kpos);
        ws = ra_workspace_create(threads, bq, bkv, shape->Dv);
        if (additive) {
            qp = malloc(sizeof(float) * (size_t)(shape->B * n * shape->H * A + 1));
            kp = malloc(sizeof(float) * (size_t)(shape->B * m_own * row_k + 1));
        }
        if (!buf[0].kv || !buf[1].kv || (segs && (!buf[0].seg || !buf[1].seg)) ||
            !qpos || !kpos || !ws || (additive && (!qp || !kp)))
            st = ra_error_set(RA_ERR_NOMEM,
                              "ring: cannot allocate the ring buffers");
    }
    st = agree(comm, st);
    if (st != RA_OK)
        goto cleanup;

    const int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);

    for (int64_t i = 0; i < n; i++)
        qpos[i] = ra_slice_pos(&qs, i);
    ra_state_reset(shape->B, n, shape->H, shape->Dv, o, lse);
    if (additive) { /* rows of q (B n H, D) and k (B m G, Dk) projected */
        const ra_additive *ad = params->additive;
        const int64_t Dk = ra_shape_dk(shape);
        if (n > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
                        (int)(shape->B * n * shape->H), (int)A, (int)shape->D,
                        1.0f, q, (int)shape->D, ad->w_q, (int)shape->D, 0.0f,
                        qp, (int)A);
        if (m_own > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
                        (int)(shape->B * m_own * shape->G), (int)A, (int)Dk,
                        1.0f, k, (int)Dk, ad->w_k, (int)Dk, 0.0f, kp, (int)A);
    }
    pack_own(shape, m_own, row_k, ring_plan_held(&plan, r, 0, last),
             additive ? kp : k, v, segs ? masks->kv_segments : NULL, buf[0]);

    double alpha = ra_params_scale(params, shape) * M_LOG2E;
    if (params->score == RA_SCORE_GAUSSIAN)
        alpha = M_LOG2E / (params->sigma * params->sigma);

    ra_block blk = {
        .B = shape->B, .n = n, .H = shape->H, .G = shape->G,
        .D = additive ? A : shape->D, .Dv = shape->Dv, .alpha = (float)alpha,
        .block_q = bq, .block_kv = bkv, .score = params->score,
        .nan_check = params->nonfinite,
        .half_inv_sigma2 = params->score == RA_SCORE_GAUSSIAN
                               ? 0.5 / (params->sigma * params->sigma) : 0.0,
        .w_v = additive ? params->additive->w_v : NULL,
        .mask = {.causal = params->causal, .diag = shape->M - shape->N,
                 .window = params->window, .left = params->window_left,
                 .right = params->window_right, .qpos = qpos, .kpos = kpos,
                 .q_lens = masks ? masks->q_lens : NULL,
                 .kv_lens = masks ? masks->kv_lens : NULL,
                 .q_seg = segs ? masks->q_segments : NULL},
    };
    ring_state rs = {.comm = comm, .P = P, .r = r, .last = last,
                     .shape = shape, .lay = lay, .plan = plan, .segs = segs,
                     .may_poll = may_poll, .row_k = row_k, .row_v = row_v,
                     .buf = {buf[0], buf[1]}, .blk = blk, .kpos = kpos,
                     .tm = &tm};
    forward_arg fa = {additive ? qp : q, o, lse, ws};
    st = ring_pass(&rs, visit_forward, &fa);
    if (st == RA_OK && map) {
        /* the final LSE is known: a second pass writes the exact weights
         * of the chosen rows; the own block goes back to the front */
        const ra_range rows = map_rows(&qs, map);
        pack_own(shape, m_own, row_k, ring_plan_held(&plan, r, 0, last),
                 additive ? kp : k, v, segs ? masks->kv_segments : NULL,
                 buf[0]);
        memset(map->out, 0, sizeof(float) * (size_t)(shape->B * map->nheads *
                                                      rows.count * shape->M));
        map_arg ma = {additive ? qp : q, lse, rows.start, rows.count, map, ws};
        st = ring_pass(&rs, visit_map, &ma);
    }
    tm.steps = last + 1;
    openblas_set_num_threads(blas_threads);

cleanup:
    for (int i = 0; i < 2; i++) {
        free(buf[i].kv);
        free(buf[i].seg);
    }
    free(qpos);
    free(kpos);
    free(qp);
    free(kp);
    ra_workspace_free(ws);
    MPI_Comm_free(&comm);
    tm.total = MPI_Wtime() - t_start;
    if (timing)
        *timing = tm;
    return st;
}

ra_status ra_forward_ex(MPI_Comm comm, const ra_shape *shape,
                        const ra_params *params, const ra_masks *masks,
                        const float *q, const float *k, const float *v,
                        float *o, float *lse, ra_timing *timing)
{
    return ring_forward(comm, shape, params, masks, q, k, v, o, lse, timing,
                        NULL);
}

ra_status ra_forward_map(MPI_Comm comm, const ra_shape *shape,
                         const ra_params *params, const ra_masks *masks,
                         const float *q, const float *k, const float *v,
                         float *o, float *lse, ra_attn_map *map)
{
    ra_status st = check_map(shape, map);
    if (st != RA_OK)
        return st;
    return ring_forward(comm, shape, params, masks, q, k, v, o, lse, NULL,
                        map);
}

ra_status ra_forward(MPI_Comm comm, const ra_shape *shape,
                     const ra_params *params, const float *q, const float *k,
                     const float *v, float *o, float *lse)
{
    return ra_forward_ex(comm, shape, params, NULL, q, k, v, o, lse, NULL);
}
