/* strategy.c: what the rows of the strategy table share once a call is
 * open (call.c): the kernel's view of a block, watched waits, carving,
 * byte counts, slices and all-to-alls. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_env.h"
#include "internal.h"
#include "strategy.h"

enum { TAG_A2A = 7331 };

void strat_block_init(const strat_call *c, int64_t n, const int64_t *qpos,
                      const int64_t *q_seg, ra_block *blk)
{
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    const ra_masks *mk = c->masks;
    const int gauss = p->num.score == RA_SCORE_GAUSSIAN;
    int64_t bq, bkv;
    ra_params_tiles(p, s, &bq, &bkv);
    memset(blk, 0, sizeof *blk);
    blk->B = s->B;
    blk->n = n;
    blk->H = s->H;
    blk->G = s->G;
    blk->D = s->D;
    blk->Dv = s->Dv;
    blk->alpha = (float)(gauss ? M_LOG2E / (p->num.sigma * p->num.sigma)
                               : ra_params_scale(p, s) * M_LOG2E);
    blk->block_q = bq;
    blk->block_kv = bkv;
    blk->score = p->num.score;
    blk->nan_check = p->num.nonfinite;
    blk->gemm = ra_gemm_pick(p->exec.gemm); /* auto: RINGATTN_GEMM's */
    blk->mm16 = c->mm16;
    blk->half_inv_sigma2 = gauss ? 0.5 / (p->num.sigma * p->num.sigma) : 0.0;
    blk->mask = (ra_mask){.causal = p->num.causal,
                          .diag = s->M - s->N,
                          .window = p->num.window,
                          .left = p->num.window_left,
                          .right = p->num.window_right,
                          .qpos = qpos,
                          .q_lens = mk ? mk->q_lens : NULL,
                          .kv_lens = mk ? mk->kv_lens : NULL,
                          .q_seg = q_seg,
                          .qalign = c->qalign};
    blk->alibi = c->slopes;
    blk->features = ra_features_of(&p->num);
}

int64_t strat_slice_pos(const strat_call *c, int64_t len, int j,
                        int64_t *pos)
{
    const ra_slice sl = ra_params_slice(c->params, c->lay, len, j, c->P);
    for (int64_t i = 0; i < sl.count; i++)
        pos[i] = ra_slice_pos(&sl, i);
    return sl.count;
}

/* Tests every request of req[0..n) once (MPI_REQUEST_NULL entries count
 * as done); *progressed is set when one of them completed. Returns the
 * number still active, or -1 on an MPI error. */
static int requests_test(MPI_Request *req, int n, int *progressed)
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

/* The message of a wait that gave up on req[0 .. n). */
static ra_status strat_stalled(strat_call *c, int n, const MPI_Request *req,
                               const strat_watch *w)
{
    const char *name = c->name;
    const double secs = c->params->exec.stall_timeout;
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
    const double timeout = c->params->exec.stall_timeout;
    if (!(timeout > 0) && !w->tick) {
        if (MPI_Waitall(n, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return ra_error_set(RA_ERR_MPI, "%s: %s: a transfer failed",
                                c->name,
                                w->phase);
        return RA_OK;
    }
    double since = MPI_Wtime();
    for (;;) {
        int progressed = 0;
        const int active = requests_test(req, n, &progressed);
        if (active < 0)
            return ra_error_set(RA_ERR_MPI, "%s: %s: a transfer failed",
                                c->name,
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
                                c->name,
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
                            c->name, what);
    return RA_OK;
}

void strat_free(const strat_call *c, void *mem, MPI_Datatype *types,
                int ntypes, ra_workspace *ws)
{
    if (c->stalled)
        return;
    ra_carve_free(mem);
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

ra_workspace *strat_workspace(const strat_call *c)
{
    int64_t bq, bkv;
    ra_params_tiles(c->params, c->shape, &bq, &bkv);
    ra_workspace *ws = ra_workspace_create(c->threads, bq, bkv,
                                           c->shape->Dv);
    if (ws)
        ra_workspace_set_tick(ws, c->params->exec.on_tick,
                              c->params->exec.on_step_ctx);
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
        const int64_t n = ra_params_slice(c->params, c->lay, len, j, c->P).count;
        most = n > most ? n : most;
    }
    return most;
}

void strat_rows(const strat_call *c, int64_t len, int64_t *cnt,
                int64_t *off)
{
    for (int j = 0; j < c->P; j++) {
        cnt[j] = ra_params_slice(c->params, c->lay, len, j, c->P).count;
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
    ra_status st =
        cnt && n ? RA_OK
                 : ra_error_set(RA_ERR_NOMEM, "%s: out of memory",
                                ra_strategy_name(c->params->exec.strategy));
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
                          c->name);
        goto done;
    }
    strat_count_all(c, (int64_t)sizeof(int64_t) * cnt[c->r]);
    const strat_watch w = {"the gathering of the segment ids", NULL, 0};
    st = strat_wait(c, 1, &req, &w);
    for (int p = 0; st == RA_OK && p < c->P; p++) {
        const ra_slice sl = ra_params_slice(c->params, c->lay, len, p, c->P);
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
    ra_status st =
        req && peer ? RA_OK
                    : ra_error_set(RA_ERR_NOMEM,
                                   "%s: out of "
                                   "memory",
                                   ra_strategy_name(c->params->exec.strategy));
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
                          c->name, x->phase);
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

void strat_step(strat_call *c, int done, int total)
{
    c->stepped = 1;
    ra_step_report(c->params, done, total);
}
