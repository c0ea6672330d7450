/* strategy.c: the set-up every strategy beside the ring shares: checks,
 * agreement, sizes, the kernel's view of a block, the float32 range check,
 * and the dispatch to one strategy's file.
 *
 * Discipline as in ring.c: validate locally, agree, then collectives. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "internal.h"
#include "nodes.h"
#include "range.h"
#include "ring.h"
#include "strategy.h"

enum { TAG_A2A = 7331, TAG_END = 7332 };

/* What a strategy other than ring refuses before any work. */
static ra_status strat_check(const ra_shape *s, const ra_params *p,
                             const ra_masks *mk)
{
    ra_status st = ring_check_params(s, p, mk);
    if (st != RA_OK)
        return st;
    if (p->score == RA_SCORE_ADDITIVE)
        return ra_error_set(RA_ERR_ARG, "strategy %s: the additive score "
                            "runs on strategy ring only",
                            ra_strategy_name(p->strategy));
    if (p->align == RA_ALIGN_SEQUENCE)
        return ra_error_set(RA_ERR_ARG, "strategy %s does not support "
                            "--align-per-sequence (per-sequence alignment "
                            "runs on strategy ring only)",
                            ra_strategy_name(p->strategy));
    return RA_OK;
}

void strat_block_init(const strat_call *c, int64_t n, const int64_t *qpos,
                      const int64_t *q_seg, ra_block *blk)
{
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    const ra_masks *mk = c->masks;
    const int gauss = p->score == RA_SCORE_GAUSSIAN;
    int64_t bq, bkv;
    ra_params_tiles(p, s, &bq, &bkv);
    memset(blk, 0, sizeof *blk);
    blk->B = s->B;
    blk->n = n;
    blk->H = s->H;
    blk->G = s->G;
    blk->D = s->D;
    blk->Dv = s->Dv;
    blk->alpha = (float)(gauss ? M_LOG2E / (p->sigma * p->sigma)
                               : ra_params_scale(p, s) * M_LOG2E);
    blk->block_q = bq;
    blk->block_kv = bkv;
    blk->score = p->score;
    blk->nan_check = p->nonfinite;
    blk->gemm = p->gemm;
    blk->half_inv_sigma2 = gauss ? 0.5 / (p->sigma * p->sigma) : 0.0;
    blk->mask = (ra_mask){.causal = p->causal, .diag = s->M - s->N,
                          .window = p->window, .left = p->window_left,
                          .right = p->window_right, .qpos = qpos,
                          .q_lens = mk ? mk->q_lens : NULL,
                          .kv_lens = mk ? mk->kv_lens : NULL,
                          .q_seg = q_seg};
    blk->alibi = c->slopes;
}

typedef struct {
    strat_call *c;
    float *qr, *kr;
    double *slopes;
    int64_t *pos;
} posenc_arrays;

static void posenc_carve(void *arg, ra_carver *cv)
{
    posenc_arrays *a = arg;
    const ra_shape *s = a->c->shape;
    const ra_params *p = a->c->params;
    if (p->rope != RA_ROPE_NONE) {
        a->qr = ra_carve(cv, s->B * a->c->n * s->H * s->D, sizeof(float));
        a->kr = ra_carve(cv, s->B * a->c->m_own * s->G * s->D, sizeof(float));
        a->pos = ra_carve(cv, a->c->n > a->c->m_own ? a->c->n : a->c->m_own,
                          sizeof(int64_t));
    }
    if (p->alibi)
        a->slopes = ra_carve(cv, s->H, sizeof(double));
}

ra_status strat_posenc(strat_call *c)
{
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    posenc_arrays a = {c, NULL, NULL, NULL, NULL};
    if (p->rope == RA_ROPE_NONE && !p->alibi)
        return RA_OK;
    c->posenc_mem = ra_carve_alloc(posenc_carve, &a);
    if (!c->posenc_mem)
        return ra_error_set(RA_ERR_NOMEM, "%s: cannot allocate the rotated "
                            "q and k", ra_strategy_name(p->strategy));
    if (p->rope != RA_ROPE_NONE) {
        memcpy(a.qr, c->q, sizeof(float) * (size_t)(s->B * c->n * s->H * s->D));
        memcpy(a.kr, c->k,
               sizeof(float) * (size_t)(s->B * c->m_own * s->G * s->D));
        strat_slice_pos(c, s->N, c->r, a.pos);
        ra_rope_apply(p->rope, p->rope_base, a.qr, s->B, c->n, s->H, s->D,
                      a.pos, s->M - s->N);
        strat_slice_pos(c, s->M, c->r, a.pos);
        ra_rope_apply(p->rope, p->rope_base, a.kr, s->B, c->m_own, s->G, s->D,
                      a.pos, 0);
        c->q = a.qr;
        c->k = a.kr;
    }
    if (p->alibi) {
        if (p->alibi_slopes)
            memcpy(a.slopes, p->alibi_slopes, sizeof(double) * (size_t)s->H);
        else
            ra_alibi_slopes(s->H, a.slopes);
        c->slopes = a.slopes;
    }
    return RA_OK;
}

int64_t strat_slice_pos(const strat_call *c, int64_t len, int j,
                        int64_t *pos)
{
    const ra_slice sl = ra_layout_slice(c->lay, len, j, c->P);
    for (int64_t i = 0; i < sl.count; i++)
        pos[i] = ra_slice_pos(&sl, i);
    return sl.count;
}

ra_status strat_check_range(strat_call *c)
{
    int64_t block_keys = 0;
    if (c->params->nonfinite)
        return RA_OK;
    for (int j = 0; j < c->P; j++) {
        const int64_t m = ra_layout_slice(c->lay, c->shape->M, j, c->P).count;
        block_keys = m > block_keys ? m : block_keys;
    }
    const ra_input_bounds mine = ra_input_bounds_of(c->shape, c->n, c->m_own,
                                                    c->q, c->k, c->v,
                                                    ra_params_threads(c->params));
    double in[3] = {mine.q_norm, mine.k_norm, mine.v_abs}, all[3];
    MPI_Request req;
    if (MPI_Iallreduce(in, all, 3, MPI_DOUBLE, MPI_MAX, c->comm, &req) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Iallreduce of the input "
                            "bounds failed",
                            ra_strategy_name(c->params->strategy));
    const strat_watch w = {"the check of the inputs' range", NULL, 0};
    ra_status st = strat_wait(c, 1, &req, &w);
    if (st != RA_OK)
        return st;
    const ra_input_bounds bounds = {all[0], all[1], all[2]};
    return ra_input_bounds_check(c->shape, c->params, &bounds, block_keys);
}

/* The message of a wait that gave up on req[0 .. n). */
static ra_status strat_stalled(strat_call *c, int n, const MPI_Request *req,
                               const strat_watch *w)
{
    const char *name = ra_strategy_name(c->params->strategy);
    const double secs = c->params->stall_timeout;
    int open = 0;
    while (open < n - 1 && req[open] == MPI_REQUEST_NULL)
        open++;
    c->stalled = 1;
    if (!w->peer)
        return ra_error_set(RA_ERR_MPI, "%s: rank %d stalled at %s: the "
                            "collective over %d ranks has not completed for "
                            "%.3g s (a rank stopped, frozen or lost?)", name,
                            c->r, w->phase, c->P, secs);
    return ra_error_set(RA_ERR_MPI, "%s: rank %d stalled at %s: no transfer "
                        "%s rank %d progressed for %.3g s (stopped, frozen "
                        "or lost?)", name, c->r, w->phase,
                        open < w->nrecv ? "from" : "to", w->peer[open], secs);
}

ra_status strat_wait(strat_call *c, int n, MPI_Request *req,
                     const strat_watch *w)
{
    const double timeout = c->params->stall_timeout;
    if (!(timeout > 0) && !w->tick) {
        if (MPI_Waitall(n, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return ra_error_set(RA_ERR_MPI, "%s: %s: a transfer failed",
                                ra_strategy_name(c->params->strategy),
                                w->phase);
        return RA_OK;
    }
    double since = MPI_Wtime();
    for (;;) {
        int progressed = 0;
        const int active = ring_requests_test(req, n, &progressed);
        if (active < 0)
            return ra_error_set(RA_ERR_MPI, "%s: %s: a transfer failed",
                                ra_strategy_name(c->params->strategy),
                                w->phase);
        if (active == 0)
            return RA_OK;
        const double now = MPI_Wtime();
        if (progressed)
            since = now;
        if (timeout > 0 && now - since > timeout)
            return strat_stalled(c, n, req, w);
        if (w->tick && w->tick(w->ctx) != 0)
            return ra_error_set(RA_ERR_MPI, "%s: %s: posting a transfer "
                                "failed",
                                ra_strategy_name(c->params->strategy),
                                w->phase);
        sched_yield();
    }
}

typedef struct {
    strat_fill fill;
    void *state;
    const strat_call *c;
} strat_carve_arg;

static void strat_carve(void *arg, ra_carver *cv)
{
    const strat_carve_arg *a = arg;
    a->fill(a->state, a->c, cv);
}

ra_status strat_alloc(const strat_call *c, strat_fill fill, void *state,
                      const char *what, void **mem, ra_workspace **ws)
{
    strat_carve_arg arg = {fill, state, c};
    *mem = ra_carve_alloc(strat_carve, &arg);
    *ws = strat_workspace(c);
    if (!*mem || !*ws)
        return ra_error_set(RA_ERR_NOMEM, "%s: cannot allocate %s",
                            ra_strategy_name(c->params->strategy), what);
    return RA_OK;
}

void strat_free(const strat_call *c, void *mem, MPI_Datatype *types,
                int ntypes, ra_workspace *ws)
{
    if (c->stalled)
        return;
    free(mem);
    for (int i = 0; i < ntypes; i++)
        if (types[i] != MPI_DATATYPE_NULL)
            MPI_Type_free(&types[i]);
    ra_workspace_free(ws);
}

void strat_count(const strat_call *c, int dst, int64_t bytes)
{
    c->tm->bytes_sent += bytes;
    if (c->node_of[dst] != c->node_of[c->r])
        c->tm->bytes_cross_node += bytes;
}

void strat_count_all(const strat_call *c, int64_t bytes)
{
    for (int j = 0; j < c->P; j++)
        if (j != c->r)
            strat_count(c, j, bytes);
}

int strat_may_poll(const strat_call *c)
{
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    return !c->params->no_poll && (ra_params_threads(c->params) == 1 ||
                                   level >= MPI_THREAD_FUNNELED);
}

ra_workspace *strat_workspace(const strat_call *c)
{
    int64_t bq, bkv;
    ra_params_tiles(c->params, c->shape, &bq, &bkv);
    ra_workspace *ws = ra_workspace_create(ra_params_threads(c->params), bq,
                                           bkv, c->shape->Dv);
    if (ws)
        ra_workspace_set_tick(ws, c->params->on_tick, c->params->on_step_ctx);
    return ws;
}

ra_status strat_node_ranks(MPI_Comm comm, const char *what, int *count)
{
    MPI_Comm node;
    *count = 1;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                            &node) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: cannot find the ranks of this "
                                        "node", what);
    MPI_Comm_size(node, count);
    MPI_Comm_free(&node);
    return RA_OK;
}

int64_t strat_slice_most(const strat_call *c, int64_t len)
{
    int64_t most = 0;
    for (int j = 0; j < c->P; j++) {
        const int64_t n = ra_layout_slice(c->lay, len, j, c->P).count;
        most = n > most ? n : most;
    }
    return most;
}

void strat_rows(const strat_call *c, int64_t len, int64_t *cnt,
                int64_t *off)
{
    for (int j = 0; j < c->P; j++) {
        cnt[j] = ra_layout_slice(c->lay, len, j, c->P).count;
        off[j] = j ? off[j - 1] + c->shape->B * cnt[j - 1] : 0;
    }
}

ra_status strat_ids_natural(strat_call *c, int64_t len, const int64_t *mine,
                            int64_t *all, int64_t *out)
{
    const int64_t B = c->shape->B;
    int *cnt = malloc(sizeof(int) * (size_t)c->P * 2);
    int64_t *n = malloc(sizeof(int64_t) * (size_t)c->P * 2);
    MPI_Request req = MPI_REQUEST_NULL;
    ra_status st = cnt && n ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "%s: out of memory",
                                           ra_strategy_name(
                                               c->params->strategy));
    if (st != RA_OK)
        goto done;
    strat_rows(c, len, n, n + c->P);
    for (int p = 0; p < c->P; p++) {
        cnt[p] = (int)(B * n[p]);
        cnt[c->P + p] = (int)n[c->P + p];
    }
    if (MPI_Iallgatherv(mine, cnt[c->r], MPI_INT64_T, all, cnt, cnt + c->P,
                        MPI_INT64_T, c->comm, &req) != MPI_SUCCESS) {
        st = ra_error_set(RA_ERR_MPI, "%s: gathering the segment ids failed",
                          ra_strategy_name(c->params->strategy));
        goto done;
    }
    strat_count_all(c, (int64_t)sizeof(int64_t) * cnt[c->r]);
    const strat_watch w = {"the gathering of the segment ids", NULL, 0};
    st = strat_wait(c, 1, &req, &w);
    for (int p = 0; st == RA_OK && p < c->P; p++) {
        const ra_slice sl = ra_layout_slice(c->lay, len, p, c->P);
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < sl.count; i++)
                out[b * len + ra_slice_pos(&sl, i)] =
                    all[cnt[c->P + p] + b * sl.count + i];
    }
done:
    free(cnt);
    free(n);
    return st;
}

ra_status strat_alltoall(strat_call *c, const strat_a2a *x, const float *send,
                         float *recv)
{
    const int size = x->size, me = c->r - x->first;
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)(2 * size + 1));
    int *peer = malloc(sizeof(int) * (size_t)(2 * size + 1));
    ra_status st = req && peer ? RA_OK
                               : ra_error_set(RA_ERR_NOMEM, "%s: out of "
                                              "memory",
                                              ra_strategy_name(
                                                  c->params->strategy));
    int rc = MPI_SUCCESS, n = 0;
    for (int p = 0; st == RA_OK && p < size; p++) /* receives first */
        if (p != me) {
            peer[n] = x->first + p;
            rc |= MPI_Irecv(recv + x->dsp_r[p], x->cnt_r[p], MPI_FLOAT,
                            peer[n], TAG_A2A, c->comm, &req[n]);
            n++;
        }
    for (int p = 0; st == RA_OK && p < size; p++)
        if (p != me) {
            peer[n] = x->first + p;
            rc |= MPI_Isend(send + x->dsp_s[p], x->cnt_s[p], MPI_FLOAT,
                            peer[n], TAG_A2A, c->comm, &req[n]);
            strat_count(c, peer[n], (int64_t)sizeof(float) * x->cnt_s[p]);
            n++;
        }
    if (st == RA_OK && rc != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "%s: posting %s failed",
                          ra_strategy_name(c->params->strategy), x->phase);
    if (st == RA_OK) {
        memcpy(recv + x->dsp_r[me], send + x->dsp_s[me],
               sizeof(float) * (size_t)x->cnt_s[me]);
        const strat_watch w = {x->phase, peer, n / 2};
        st = strat_wait(c, n, req, &w);
    }
    free(req);
    free(peer);
    return st;
}

/* The end of a call under the stall watchdog: each rank waits until its
 * left neighbour has finished too, so that a rank stopped after its last
 * transfer (single-copy shared memory needs no help from the sender) is
 * found and named here, not in the caller's next collective. Nothing to
 * do at P = 1 or without a timeout. */
static ra_status strat_finish(strat_call *c)
{
    if (c->P == 1 || !(c->params->stall_timeout > 0))
        return RA_OK;
    const int peer[2] = {(c->r + c->P - 1) % c->P, (c->r + 1) % c->P};
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (MPI_Irecv(NULL, 0, MPI_BYTE, peer[0], TAG_END, c->comm, &req[0]) !=
            MPI_SUCCESS ||
        MPI_Isend(NULL, 0, MPI_BYTE, peer[1], TAG_END, c->comm, &req[1]) !=
            MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: posting the end of the call "
                            "failed", ra_strategy_name(c->params->strategy));
    const strat_watch w = {"the end of the call", peer, 1};
    return strat_wait(c, 2, req, &w);
}

/* This rank's sizes under the resolved layout. */
static ra_status strat_size(strat_call *c)
{
    if (MPI_Comm_size(c->comm, &c->P) != MPI_SUCCESS ||
        MPI_Comm_rank(c->comm, &c->r) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: cannot query the communicator",
                            ra_strategy_name(c->params->strategy));
    c->segs = c->masks && c->masks->q_segments;
    c->lay = ra_params_layout(c->params, c->segs);
    c->n = ra_layout_slice(c->lay, c->shape->N, c->r, c->P).count;
    c->m_own = ra_layout_slice(c->lay, c->shape->M, c->r, c->P).count;
    return RA_OK;
}

/* What each strategy can run, past the shared checks: collective over
 * comm, the same verdict on every rank once agreed. */
static ra_status fits_ulysses(MPI_Comm comm, const ra_shape *s,
                              const ra_params *p, int segs)
{
    int P = 1;
    (void)p;
    (void)segs;
    if (MPI_Comm_size(comm, &P) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ulysses: cannot query the "
                                        "communicator");
    return ulysses_fits(s, P);
}

static ra_status fits_hybrid(MPI_Comm comm, const ra_shape *s,
                             const ra_params *p, int segs)
{
    int u;
    (void)segs;
    return hybrid_group_size(comm, s, p, &u);
}

/* The strategies beside the ring, one row each: what it refuses before
 * any work beyond the shared checks (NULL: nothing more) and its
 * forward. Adding a strategy is its file and a row here (and one in the
 * model, comm/model.c). */
typedef struct {
    ra_strategy id;
    ra_status (*fits)(MPI_Comm comm, const ra_shape *s, const ra_params *p,
                      int segs);
    ra_status (*forward)(strat_call *c);
} strat_row;

static const strat_row strat_table[] = {
    {RA_STRATEGY_ALLGATHER, allgather_fits, allgather_forward},
    {RA_STRATEGY_TREE, NULL, tree_forward},
    {RA_STRATEGY_RING_Q, NULL, ringq_forward},
    {RA_STRATEGY_ULYSSES, fits_ulysses, ulysses_forward},
    {RA_STRATEGY_HYBRID, fits_hybrid, hybrid_forward},
};

/* The row of strategy id, or NULL (the ring, or an unknown value). */
static const strat_row *strat_row_of(ra_strategy id)
{
    for (size_t i = 0; i < sizeof strat_table / sizeof *strat_table; i++)
        if (strat_table[i].id == id)
            return &strat_table[i];
    return NULL;
}

static ra_status strategy_run(strat_call *c)
{
    const strat_row *row = strat_row_of(c->params->strategy);
    if (!row)
        return ra_error_set(RA_ERR_ARG, "strategy %d is not one of ring, "
                            "allgather, tree, ring-q, ulysses, hybrid",
                            (int)c->params->strategy);
    return row->forward(c);
}

ra_status ra_strategy_check(MPI_Comm comm, const ra_shape *shape,
                            const ra_params *params, int segments)
{
    ra_error_clear();
    if (params->strategy == RA_STRATEGY_RING)
        return RA_OK;
    const strat_row *row = strat_row_of(params->strategy);
    ra_status st = ra_agree(comm, strat_check(shape, params, NULL));
    if (st == RA_OK && row && row->fits)
        st = ra_agree(comm, row->fits(comm, shape, params, segments));
    return st;
}

void strat_step(strat_call *c, int done, int total)
{
    c->stepped = 1;
    ra_step_report(c->params, done, total);
}

ra_status strategy_forward(MPI_Comm comm, const ra_shape *shape,
                           const ra_params *params, const ra_masks *masks,
                           const float *q, const float *k, const float *v,
                           float *o, float *lse, ra_timing *timing)
{
    const double t_start = MPI_Wtime();
    ra_timing tm = {0};
    strat_call c = {.comm = MPI_COMM_NULL, .shape = shape, .params = params,
                    .masks = masks, .q = q, .k = k, .v = v, .o = o,
                    .lse = lse, .tm = &tm};
    ra_status st = strat_check(shape, params, masks);
    if (MPI_Comm_dup(comm, &c.comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_dup failed",
                            ra_strategy_name(params->strategy));
    MPI_Comm_set_errhandler(c.comm, MPI_ERRORS_RETURN); /* ringattn.h */
    st = ra_agree(c.comm, st);
    if (st == RA_OK)
        st = ra_agree(c.comm, strat_size(&c));
    if (st == RA_OK)
        st = ra_agree(c.comm, strat_posenc(&c));
    if (st == RA_OK)
        st = ra_nodes_of(c.comm, ra_strategy_name(params->strategy),
                         &c.node_of);
    if (st == RA_OK) {
        const int blas = ra_blas_enter(1);
        st = strategy_run(&c);
        if (st == RA_OK)
            st = strat_finish(&c);
        ra_blas_leave(blas);
        if (st == RA_OK && !c.stepped) /* a strategy without steps */
            ra_step_report(params, 1, 1);
    }
    free(c.node_of);
    if (c.stalled) /* the communicator and the buffers stay with the
                      transfers in flight */
        return st;
    free(c.posenc_mem);
    if (MPI_Comm_free(&c.comm) != MPI_SUCCESS && st == RA_OK)
        st = ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_free failed",
                          ra_strategy_name(params->strategy));
    tm.total = MPI_Wtime() - t_start;
    tm.steps = st == RA_OK ? c.P : 0;
    if (timing)
        *timing = tm;
    return st;
}
