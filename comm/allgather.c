/* allgather.c: the all-gather strategy (Llama 3's context parallelism).
 *
 * Every rank ends up holding every rank's K/V block; its own query slice
 * (the same load-balanced layout as the ring) folds each block in as it
 * arrives. The gather is point-to-point: each rank receives every other
 * block (all receives posted at once) and sends its own to the others one
 * after the other, first to the rank that folds it first (rank r - 1 at
 * its step 1, r - 2 at step 2, ...), so that the block needed soonest has
 * the link to itself, as in a ring. The rank computes on its own block,
 * then on each next block in ring order, testing the transfers and posting
 * its next send between tiles and while it waits (Open MPI has no progress
 * thread). Broadcasts (one MPI_Ibcast per block) moved little while the
 * ranks computed over TCP, even polled between tiles.
 * Memory is O(M) per rank; the whole of it is checked against
 * params->mem_limit before anything is allocated. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agree.h"
#include "internal.h"
#include "strategy.h"

enum { REQS_PER_BLOCK = 3 }; /* K, V, segment ids */
enum { TAG_K = 71, TAG_V, TAG_SEG };

/* The gathered blocks: block j's K (B, m_j, G, D), V (B, m_j, G, Dv) and
 * ids (B, m_j) start at row off[j] of kv and seg. */
typedef struct {
    int64_t *cnt, *off;   /* P each: keys per block, first row */
    float *kv;            /* K rows of all blocks, then V rows */
    int64_t *seg;         /* (B M) ids, or NULL */
    int64_t *kpos;        /* the largest block */
    MPI_Request *req;     /* REQS_PER_BLOCK per block received, then
                             REQS_PER_BLOCK per rank sent to */
    int nreq;
    int *peer;            /* REQS_PER_BLOCK per rank: that rank */
    int next_send;        /* the own block's next send: to rank r - d */
    int failed;           /* posting a send failed between tiles */
    strat_call *call;
    int64_t mmax;         /* the largest block */
    void *mem;            /* the block the arrays above are carved from */
    MPI_Datatype krow, vrow;
    int may_poll;
    ra_workspace *ws;
} gather_state;

/* The default memory limit: this node's physical memory shared evenly by
 * the ranks on it. Collective. */
static ra_status node_share(MPI_Comm comm, int64_t *limit)
{
    int on_node = 1;
    ra_status st = strat_node_ranks(comm, "allgather", &on_node);
    if (st != RA_OK)
        return st;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    *limit = pages > 0 && page > 0
                 ? (int64_t)((double)pages * (double)page / on_node)
                 : INT64_MAX;
    return RA_OK;
}

int64_t allgather_bytes(const ra_shape *s, int segs)
{
    const int64_t width = ra_add_checked(ra_mul_checked(s->G, s->D),
                                         ra_mul_checked(s->G, s->Dv));
    const int64_t f[] = {s->B, s->M, width, (int64_t)sizeof(float)};
    const int64_t kv = ra_count_checked(4, f);
    const int64_t ids = segs ? ra_mul_checked(ra_mul_checked(s->B, s->M),
                                                 8)
                                : 0;
    return ra_add_checked(kv, ids);
}

ra_status allgather_fits(MPI_Comm comm, const ra_shape *s,
                         const ra_params *p, int segs)
{
    int64_t limit = p->exec.mem_limit;
    ra_status st = limit > 0 ? RA_OK : node_share(comm, &limit);
    const int64_t need = allgather_bytes(s, segs);
    if (st == RA_OK && (need < 0 || need > limit))
        st = ra_error_set(RA_ERR_ARG, "allgather: the gathered K/V needs "
                          "%lld bytes per rank, above the memory limit of "
                          "%lld bytes; strategy ring needs O(M/P) per rank",
                          (long long)need, (long long)limit);
    return st;
}

/* The arrays above (ids only with segments), carved out of g->mem
 * (gather_alloc); kv and seg take the allgather_bytes() that
 * allgather_fits checked. */
static void gather_carve(void *state, const strat_call *c, ra_carver *cv)
{
    gather_state *g = state;
    const ra_shape *s = c->shape;
    g->cnt = ra_carve(cv, c->P, sizeof(int64_t));
    g->off = ra_carve(cv, c->P, sizeof(int64_t));
    g->req = ra_carve(cv, g->nreq, sizeof(MPI_Request));
    g->peer = ra_carve(cv, REQS_PER_BLOCK * c->P, sizeof(int));
    g->kv = ra_carve(cv, s->B * s->M * s->G * (s->D + s->Dv), sizeof(float));
    if (c->segs)
        g->seg = ra_carve(cv, s->B * s->M, sizeof(int64_t));
    g->kpos = ra_carve(cv, g->mmax, sizeof(int64_t));
}

static ra_status gather_alloc(gather_state *g, const strat_call *c)
{
    const ra_shape *s = c->shape;
    g->nreq = 2 * REQS_PER_BLOCK * c->P;
    g->mmax = strat_slice_most(c, s->M);
    if (s->B * g->mmax > INT_MAX)
        return ra_error_set(RA_ERR_ARG, "allgather: a block of %lld rows "
                            "cannot be described to MPI (counts are int); "
                            "use more ranks", (long long)(s->B * g->mmax));
    ra_status st = strat_alloc(c, gather_carve, g, "the gathered K/V",
                               &g->mem, &g->ws);
    if (st != RA_OK)
        return st;
    strat_rows(c, s->M, g->cnt, g->off);
    for (int i = 0; i < REQS_PER_BLOCK * c->P; i++)
        g->peer[i] = i / REQS_PER_BLOCK;
    for (int i = 0; i < g->nreq; i++)
        g->req[i] = MPI_REQUEST_NULL;
    return RA_OK;
}

static void gather_free(gather_state *g, const strat_call *c)
{
    MPI_Datatype types[] = {g->krow, g->vrow};
    strat_free(c, g->mem, types, 2, g->ws);
}

/* Block j's three transfers with rank peer: K rows, V rows, segment ids
 * (the last only with packed segments). send: the own block to peer (and
 * its bytes counted), else block j from peer. 0, or -1 when MPI refused. */
static int gather_xfer(gather_state *g, const strat_call *c, int j, int peer,
                       int send)
{
    const ra_shape *s = c->shape;
    const int64_t rk = s->G * s->D, rv = s->G * s->Dv;
    float *k = g->kv + g->off[j] * rk;
    float *v = g->kv + s->B * s->M * rk + g->off[j] * rv;
    const int rows = (int)(s->B * g->cnt[j]);
    MPI_Request *rq = g->req + REQS_PER_BLOCK * (send ? c->P + peer : j);
    if (send) {
        strat_count(c, peer, (int64_t)rows *
                                 ((int64_t)sizeof(float) * (rk + rv) +
                                  (c->segs ? (int64_t)sizeof(int64_t) : 0)));
        return MPI_Isend(k, rows, g->krow, peer, TAG_K, c->comm, &rq[0]) ||
               MPI_Isend(v, rows, g->vrow, peer, TAG_V, c->comm, &rq[1]) ||
               (c->segs && MPI_Isend(g->seg + g->off[j], rows, MPI_INT64_T,
                                     peer, TAG_SEG, c->comm, &rq[2]))
                   ? -1 : 0;
    }
    return MPI_Irecv(k, rows, g->krow, peer, TAG_K, c->comm, &rq[0]) ||
           MPI_Irecv(v, rows, g->vrow, peer, TAG_V, c->comm, &rq[1]) ||
           (c->segs && MPI_Irecv(g->seg + g->off[j], rows, MPI_INT64_T, peer,
                                 TAG_SEG, c->comm, &rq[2]))
               ? -1 : 0;
}

/* Copies the own block in place, makes the row datatypes and posts the
 * receive of every other block. */
static ra_status gather_post(gather_state *g, strat_call *c)
{
    const ra_shape *s = c->shape;
    const int64_t rk = s->G * s->D, rv = s->G * s->Dv;
    float *vbase = g->kv + s->B * s->M * rk;
    const size_t own = (size_t)(s->B * c->m_own);
    memcpy(g->kv + g->off[c->r] * rk, c->k, sizeof(float) * own * rk);
    memcpy(vbase + g->off[c->r] * rv, c->v, sizeof(float) * own * rv);
    if (c->segs)
        memcpy(g->seg + g->off[c->r], c->masks->kv_segments,
               sizeof(int64_t) * own);
    if (MPI_Type_contiguous((int)rk, MPI_FLOAT, &g->krow) != MPI_SUCCESS ||
        MPI_Type_commit(&g->krow) != MPI_SUCCESS ||
        MPI_Type_contiguous((int)rv, MPI_FLOAT, &g->vrow) != MPI_SUCCESS ||
        MPI_Type_commit(&g->vrow) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "allgather: cannot make the row "
                                        "datatypes");
    for (int d = 1; d < c->P; d++) {
        const int from = (c->r + d) % c->P;
        if (gather_xfer(g, c, from, from, 0) != 0)
            return ra_error_set(RA_ERR_MPI, "allgather: posting the receive "
                                "of rank %d's block failed", from);
    }
    return RA_OK;
}

/* Posts the own block's next send once the one before it has completed;
 * 0, or -1 when posting failed. Between tiles and in every wait. */
static int gather_advance(void *ctx)
{
    gather_state *g = ctx;
    const strat_call *c = g->call;
    while (g->next_send < c->P && !g->failed) {
        if (g->next_send > 1) {
            const int before = (c->r - g->next_send + 1 + c->P) % c->P;
            int done = 0;
            MPI_Testall(REQS_PER_BLOCK,
                        g->req + REQS_PER_BLOCK * (c->P + before), &done,
                        MPI_STATUSES_IGNORE);
            if (!done)
                return 0;
        }
        const int to = (c->r - g->next_send + c->P) % c->P;
        g->failed = gather_xfer(g, c, c->r, to, 1) != 0;
        g->next_send++;
    }
    return g->failed ? -1 : 0;
}

/* The kernel's progress callback: tests every outstanding transfer and
 * posts the next send when its turn has come. */
static void gather_poll(void *ctx)
{
    gather_state *g = ctx;
    int done = 0;
    MPI_Testall(g->nreq, g->req, &done, MPI_STATUSES_IGNORE);
    gather_advance(g);
}

/* The own block's remaining sends, each posted after the one before it
 * has completed; the wait is exposed communication. */
static ra_status gather_finish(gather_state *g, strat_call *c)
{
    const strat_watch w = {"the sends of the own block", g->peer, 0,
                           gather_advance, g};
    MPI_Request *sends = g->req + REQS_PER_BLOCK * c->P;
    const double t0 = MPI_Wtime();
    ra_status st;
    do {
        st = gather_advance(g) == 0
                 ? strat_wait(c, REQS_PER_BLOCK * c->P, sends, &w)
                 : ra_error_set(RA_ERR_MPI, "allgather: posting a send of "
                                            "the own block failed");
    } while (st == RA_OK && g->next_send < c->P);
    c->tm->comm_wait += MPI_Wtime() - t0;
    return st;
}

/* Folds the blocks in ring order from the own one, waiting for each just
 * before its turn; the wait is the exposed communication. */
static ra_status gather_run(gather_state *g, strat_call *c)
{
    const ra_shape *s = c->shape;
    const int64_t rk = s->G * s->D, rv = s->G * s->Dv;
    const float *vbase = g->kv + s->B * s->M * rk;
    ra_block blk;
    strat_block_init(c, c->n, c->qpos, c->segs ? c->masks->q_segments : NULL,
                     &blk);
    ra_state_reset(s->B, c->n, s->H, s->Dv, c->o, c->lse);
    if (gather_advance(g) != 0) /* the first send */
        return ra_error_set(RA_ERR_MPI, "allgather: posting a send of the "
                                        "own block failed");
    for (int t = 0; t < c->P; t++) {
        const int j = (c->r + t) % c->P;
        const double t0 = MPI_Wtime();
        char phase[64];
        snprintf(phase, sizeof phase, "rank %d's block", j);
        const strat_watch w = {phase, g->peer + REQS_PER_BLOCK * j,
                               REQS_PER_BLOCK, gather_advance, g};
        const ra_status st = strat_wait(c, REQS_PER_BLOCK,
                                        g->req + REQS_PER_BLOCK * j, &w);
        if (st != RA_OK)
            return st;
        const double t1 = MPI_Wtime();
        blk.m = strat_slice_pos(c, s->M, j, g->kpos);
        blk.mask.kpos = g->kpos;
        blk.mask.k_seg = c->segs ? g->seg + g->off[j] : NULL;
        if (blk.m > 0 && c->n > 0)
            ra_kernel_forward_block(
                &blk,
                &(ra_fwd_ops){c->q, g->kv + g->off[j] * rk,
                              vbase + g->off[j] * rv, c->o, c->lse,
                              g->may_poll ? gather_poll : NULL, g},
                g->ws);
        c->tm->comm_wait += t1 - t0;
        c->tm->compute += MPI_Wtime() - t1;
        strat_step(c, t + 1, c->P);
    }
    return gather_finish(g, c);
}

ra_status allgather_forward(strat_call *c)
{
    gather_state g = {.krow = MPI_DATATYPE_NULL, .vrow = MPI_DATATYPE_NULL,
                      .may_poll = c->may_poll, .next_send = 1,
                      .call = c};
    ra_status st = ra_agree(c->comm, allgather_fits(c->comm, c->shape,
                                                    c->params, c->segs));
    if (st == RA_OK)
        st = ra_agree(c->comm, gather_alloc(&g, c));
    if (st == RA_OK)
        st = gather_post(&g, c);
    if (st == RA_OK)
        st = gather_run(&g, c);
    gather_free(&g, c);
    return st;
}
