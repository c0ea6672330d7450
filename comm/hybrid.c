/* hybrid.c: head-parallel inside groups, a ring between them (USP,
 * LoongTrain).
 *
 * The ranks form P/u groups of u consecutive ranks (by default the ranks of
 * one node: the communicator of the command line is ordered node by node).
 * Inside a group an all-to-all gives rank i of the group the group's
 * tokens of its query heads (heads_of(i, u)) and of the kv heads those
 * read, in position order. Between groups the ranks with the same index
 * hold the same heads; they pass their K/V blocks around a ring of P/u
 * steps as the ring strategy does (the next block in flight while the
 * current one computes), folding each into the group's queries with the
 * kernel, one call per kv head. A second all-to-all inside the group returns
 * o and lse. Only the ring crosses groups: about 1/u of the ring's bytes
 * leave a node. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "ckpt.h"
#include "internal.h"
#include "strategy.h"

enum { TAG_RING = 7321, TAG_FETCH = 7322 };

typedef struct {
    int u, ng, grp, gi;     /* group size, groups, my group, my index */
    int left, right;        /* my index in the groups before and after */
    head_group hg;          /* my heads (the same in every group) */
    int64_t Ng, Mmax;       /* my group's queries, the largest key block */
    int64_t *qoff, *koff;   /* u + 1: each member's first entry in qidx,
                               kidx */
    int64_t *qidx, *kidx;   /* member token -> index in my group's order */
    int64_t *gq;            /* my group's query positions, increasing */
    int64_t *gk, *kgoff;    /* every group's key positions; ng + 1 offsets */
    head_xchg x;            /* the all-to-alls inside my group */
    float *q, *o, *lse;     /* runs per kv head: (B, Ng, width, D) ... */
    float *kv[2];           /* K runs (B, Mg, D) per kv head, then V runs */
    int64_t *qseg, *kseg;   /* natural ids (B, N), (B, M) */
    int64_t *qsegg, *ksegb; /* my group's query ids (B, Ng), the block's
                               key ids (B, Mmax) */
    void *mem;              /* the block the arrays above are carved from */
    ra_workspace *ws;
    strat_call *c;
} hyb_state;

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The count of group g's tokens of a length-len axis. */
static int64_t group_count(const hyb_state *h, const strat_call *c,
                           int64_t len, int g)
{
    int64_t n = 0;
    for (int j = 0; j < h->u; j++)
        n += ra_params_slice(c->params, c->lay, len, g * h->u + j, c->P).count;
    return n;
}

/* The positions of group g's tokens of a length-len axis, increasing,
 * into pos; with idx, each member's token i at idx[off[member] + i]
 * gets its index in pos. Returns the count. */
static int64_t group_order(const hyb_state *h, const strat_call *c,
                           int64_t len, int g, int64_t *pos, int64_t *idx,
                           int64_t *off)
{
    int64_t n = 0;
    for (int j = 0; j < h->u; j++) {
        const ra_slice sl = ra_params_slice(c->params, c->lay, len, g * h->u + j, c->P);
        if (off)
            off[j] = n;
        for (int64_t i = 0; i < sl.count; i++)
            pos[n + i] = ra_slice_pos(&sl, i);
        n += sl.count;
    }
    if (off)
        off[h->u] = n;
    if (idx)
        memcpy(idx, pos, sizeof(int64_t) * (size_t)n);
    qsort(pos, (size_t)n, sizeof(int64_t), cmp_i64);
    for (int64_t i = 0; idx && i < n; i++) {
        const int64_t *at = bsearch(&idx[i], pos, (size_t)n, sizeof(int64_t),
                                    cmp_i64);
        idx[i] = at - pos;
    }
    return n;
}

ra_status hybrid_group_check(const ra_shape *s, int P, int u)
{
    if (u < 1 || P % u != 0)
        return ra_error_set(RA_ERR_ARG, "hybrid: groups of %d ranks "
                            "(ulysses_size) do not divide %d ranks", u, P);
    if (s->H < u)
        return ra_error_set(RA_ERR_ARG, "hybrid: %lld query heads cannot be "
                            "split over groups of %d ranks (ulysses_size); "
                            "groups of 1 to %lld ranks work", (long long)s->H,
                            u, (long long)s->H);
    return RA_OK;
}

ra_status hybrid_group_size(MPI_Comm comm, const ra_shape *s,
                            const ra_params *p, int *u_out)
{
    int P = 1, u = (int)p->exec.ulysses_size, lo = 0, hi = 0;
    if (MPI_Comm_size(comm, &P) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "hybrid: cannot query the "
                                        "communicator");
    if (u == 0) { /* the ranks of one node, the same on every node */
        ra_status st = strat_node_ranks(comm, "hybrid", &u);
        if (st != RA_OK)
            return st;
        MPI_Allreduce(&u, &lo, 1, MPI_INT, MPI_MIN, comm);
        MPI_Allreduce(&u, &hi, 1, MPI_INT, MPI_MAX, comm);
        if (lo != hi)
            return ra_error_set(RA_ERR_ARG, "hybrid: nodes hold %d to %d "
                                "ranks; give the group size explicitly",
                                lo, hi);
    }
    ra_status st = hybrid_group_check(s, P, u);
    if (st == RA_OK)
        *u_out = u;
    return st;
}

/* The exchange's arrays, the orders and the head groups' (the second
 * K/V block only with a ring, ids only with segments), carved out of
 * h->mem (hyb_alloc). */
static void hyb_carve(void *state, const strat_call *c, ra_carver *cv)
{
    hyb_state *h = state;
    const ra_shape *s = c->shape;
    const int64_t B = s->B, hr = h->hg.h1 - h->hg.h0, gr = h->hg.g1 - h->hg.g0;
    heads_xchg_carve(&h->x, cv);
    h->qoff = ra_carve(cv, h->u + 1, sizeof(int64_t));
    h->koff = ra_carve(cv, h->u + 1, sizeof(int64_t));
    h->qidx = ra_carve(cv, s->N, sizeof(int64_t));
    h->kidx = ra_carve(cv, s->M, sizeof(int64_t));
    h->gq = ra_carve(cv, s->N, sizeof(int64_t));
    h->gk = ra_carve(cv, s->M, sizeof(int64_t));
    h->kgoff = ra_carve(cv, h->ng + 1, sizeof(int64_t));
    h->q = ra_carve(cv, B * h->Ng * hr * s->D, sizeof(float));
    h->o = ra_carve(cv, B * h->Ng * hr * s->Dv, sizeof(float));
    h->lse = ra_carve(cv, B * h->Ng * hr, sizeof(float));
    for (int i = 0; i < (h->ng > 1 ? 2 : 1); i++) /* one without a ring */
        h->kv[i] = ra_carve(cv, B * h->Mmax * gr * (s->D + s->Dv),
                            sizeof(float));
    if (c->segs) {
        h->qseg = ra_carve(cv, B * s->N, sizeof(int64_t));
        h->kseg = ra_carve(cv, B * s->M, sizeof(int64_t));
        h->qsegg = ra_carve(cv, B * h->Ng, sizeof(int64_t));
        h->ksegb = ra_carve(cv, B * h->Mmax, sizeof(int64_t));
    }
}

/* Every group's key positions and my group's orders of queries and
 * keys, into the carved arrays. */
static void hyb_orders(hyb_state *h, const strat_call *c)
{
    h->kgoff[0] = 0;
    for (int g = 0; g < h->ng; g++)
        h->kgoff[g + 1] =
            h->kgoff[g] + group_order(h, c, c->shape->M, g,
                                      h->gk + h->kgoff[g],
                                      g == h->grp ? h->kidx : NULL,
                                      g == h->grp ? h->koff : NULL);
    group_order(h, c, c->shape->N, h->grp, h->gq, h->qidx, h->qoff);
}

static ra_status hyb_alloc(hyb_state *h, const strat_call *c)
{
    const ra_shape *s = c->shape;
    const int64_t gr = h->hg.g1 - h->hg.g0;
    for (int g = 0; g < h->ng; g++) {
        const int64_t m = group_count(h, c, s->M, g);
        h->Mmax = m > h->Mmax ? m : h->Mmax;
    }
    h->Ng = group_count(h, c, s->N, h->grp);
    if (s->B * h->Mmax * gr * (s->D + s->Dv) > INT_MAX)
        return ra_error_set(RA_ERR_ARG, "hybrid: a transfer of more than "
                            "2^31 floats; use more ranks or strategy ring");
    /* with ids, the gathers of strat_ids_natural use the all-to-all's recv */
    ra_status st = heads_xchg_init(c, &h->x, h->grp * h->u, h->u,
                                   c->segs ? 2 * s->B * (s->N > s->M ? s->N
                                                                     : s->M)
                                           : 0);
    if (st == RA_OK)
        st = strat_alloc(c, hyb_carve, h, "the head groups", &h->mem,
                         &h->ws);
    if (st == RA_OK)
        hyb_orders(h, c);
    return st;
}

static void hyb_free(hyb_state *h, const strat_call *c)
{
    strat_free(c, h->mem, NULL, 0, h->ws);
}

/* Inside the group: sequence slices to this rank's heads over the group's
 * tokens: q runs, and the own K/V block (kv[0]). */
static ra_status hyb_scatter(hyb_state *h, strat_call *c)
{
    const int64_t Mg = h->kgoff[h->grp + 1] - h->kgoff[h->grp];
    const head_order qo = {h->Ng, h->qidx, h->qoff};
    const head_order ko = {Mg, h->kidx, h->koff};
    return heads_scatter(c, &h->x, &qo, &ko, h->q, h->kv[0]);
}

/* Folds the K/V block held at step t (of group og = grp - t, in
 * kv[t & 1]) into the group's queries, one kernel call per kv head. */
static void hyb_visit(void *ctx, int t, ring_reqs *rq)
{
    hyb_state *h = ctx;
    const strat_call *c = h->c;
    const ra_shape *s = c->shape;
    const int og = (h->grp - t + h->ng) % h->ng, which = t & 1;
    const int64_t B = s->B, Ng = h->Ng, gr = h->hg.g1 - h->hg.g0;
    const int64_t Mg = h->kgoff[og + 1] - h->kgoff[og];
    const int64_t per = s->H / s->G, *kpos = h->gk + h->kgoff[og];
    const float *kb = h->kv[which], *vb = kb + B * Mg * gr * s->D;
    ra_block blk;
    for (int64_t b = 0; c->segs && b < B; b++)
        for (int64_t j = 0; j < Mg; j++)
            h->ksegb[b * Mg + j] = h->kseg[b * s->M + kpos[j]];
    for (int64_t g = h->hg.g0; g < h->hg.g1 && Mg > 0 && Ng > 0; g++) {
        const int64_t a = g * per > h->hg.h0 ? g * per : h->hg.h0;
        const int64_t z = (g + 1) * per < h->hg.h1 ? (g + 1) * per : h->hg.h1;
        const int64_t st = a - h->hg.h0, gl = g - h->hg.g0;
        strat_block_init(c, Ng, h->gq, c->segs ? h->qsegg : NULL, &blk);
        blk.H = z - a;
        blk.G = 1;
        blk.m = Mg;
        blk.alibi = c->slopes ? c->slopes + a : NULL;
        blk.mask.kpos = kpos;
        blk.mask.k_seg = c->segs ? h->ksegb : NULL;
        const ra_fwd_ops ops = {h->q + B * Ng * s->D * st,
                                kb + B * Mg * s->D * gl,
                                vb + B * Mg * s->Dv * gl,
                                h->o + B * Ng * s->Dv * st,
                                h->lse + B * Ng * st,
                                c->may_poll ? ring_poll : NULL, rq};
        ra_kernel_forward_block(&blk, &ops, h->ws);
    }
}

/* Between groups, step t: the receive of the next block (of group
 * grp - t - 1) from the group before, the send of the held one to the
 * group after; none at the last step. */
static ra_status hyb_post(void *ctx, int t, ring_reqs *rq)
{
    const hyb_state *h = ctx;
    const strat_call *c = h->c;
    const ra_shape *s = c->shape;
    const int64_t gr = h->hg.g1 - h->hg.g0, row = gr * (s->D + s->Dv);
    const int ng = h->ng, og = (h->grp - t + ng) % ng, on = (og + ng - 1) % ng;
    const int64_t mg = h->kgoff[og + 1] - h->kgoff[og];
    const int64_t mn = h->kgoff[on + 1] - h->kgoff[on];
    if (t == ng - 1)
        return RA_OK;
    if (MPI_Irecv(h->kv[(t + 1) & 1], (int)(s->B * mn * row), MPI_FLOAT,
                  h->left, TAG_RING, c->comm, &rq->req[0]) != MPI_SUCCESS ||
        MPI_Isend(h->kv[t & 1], (int)(s->B * mg * row), MPI_FLOAT, h->right,
                  TAG_RING, c->comm, &rq->req[RING_PAIRS]) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "hybrid: posting step %d failed", t);
    strat_count(c, h->right, (int64_t)sizeof(float) * s->B * mg * row);
    return RA_OK;
}

/* The state at the boundary before step t: the running o and lse of my
 * group's queries and my heads (the K/V block held is fetched again from
 * its group on a resume). */
static void hyb_state_at(void *ctx, int t, ra_state *st)
{
    const hyb_state *h = ctx;
    const ra_shape *s = h->c->shape;
    const int64_t rows = s->B * h->Ng * (h->hg.h1 - h->hg.h0);
    (void)t;
    st->pass = "forward";
    st->nparts = 2;
    st->part[0] = (ra_state_part){"o", h->o, rows * s->Dv};
    st->part[1] = (ra_state_part){"lse", h->lse, rows};
}

/* With a checkpoint to load, at step t: (o, lse) loaded, and the K/V
 * block of step t (group grp - t's, after its scatter) sent again by the
 * rank of my index there, as each rank sends its own (kv[0]) to the rank
 * of its index in group grp + t; the loop starts at t. Collective. */
static ra_status hyb_resume(hyb_state *h, ring_loop *lp)
{
    strat_call *c = h->c;
    ra_state ld = {.steps = h->ng};
    hyb_state_at(h, 1, &ld);
    ra_status st = strat_ckpt_load(c, &ld);
    if (st != RA_OK || ld.step == 0)
        return st;
    const int t = ld.step, ng = h->ng, og = (h->grp - t + ng) % ng;
    const int64_t row = (h->hg.g1 - h->hg.g0) * (c->shape->D + c->shape->Dv);
    const int64_t own = h->kgoff[h->grp + 1] - h->kgoff[h->grp];
    const int64_t held = h->kgoff[og + 1] - h->kgoff[og];
    const strat_fetch f = {
        og * h->u + h->gi, (h->grp + t) % ng * h->u + h->gi, TAG_FETCH, t,
        {{h->kv[0], h->kv[1], (int)(c->shape->B * own * row),
          (int)(c->shape->B * held * row), MPI_FLOAT}}};
    lp->start = lp->done = t;
    st = strat_ckpt_fetch(c, &f, 1);
    if (st == RA_OK && !(t & 1)) { /* step t holds kv[t & 1] */
        float *x = h->kv[0];
        h->kv[0] = h->kv[1];
        h->kv[1] = x;
    }
    return st;
}

/* Between groups: P/u steps on the ring loop; at step t this rank holds
 * the block of group (grp - t) mod ng and has the next one in flight;
 * from a loaded checkpoint's step on a resume. */
static ra_status hyb_ring(hyb_state *h, strat_call *c)
{
    ring_loop lp = {.steps = h->ng, .left = h->left, .right = h->right,
                    .post = hyb_post, .visit = hyb_visit, .ctx = h,
                    .total = h->ng, .state = hyb_state_at};
    ra_status st = c->params->exec.checkpoint
                       ? ra_agree(c->comm, hyb_resume(h, &lp)) : RA_OK;
    c->tm->steps = h->ng;
    return st == RA_OK ? ring_loop_run(c, &lp) : st;
}

/* The groups and this rank's place; collective. */
static ra_status hyb_groups(hyb_state *h, strat_call *c)
{
    ra_status st = hybrid_group_size(c->comm, c->shape, c->params, &h->u);
    if (st != RA_OK)
        return st;
    h->ng = c->P / h->u;
    h->grp = c->r / h->u;
    h->gi = c->r % h->u;
    h->hg = heads_of(c->shape, h->gi, h->u);
    /* the ring joins the ranks with the same index in every group */
    h->left = (h->grp + h->ng - 1) % h->ng * h->u + h->gi;
    h->right = (h->grp + 1) % h->ng * h->u + h->gi;
    return RA_OK;
}

ra_status hybrid_forward(strat_call *c)
{
    const ra_shape *s = c->shape;
    hyb_state h = {.c = c};
    ra_status st = ra_agree(c->comm, hyb_groups(&h, c));
    if (st == RA_OK)
        st = ra_agree(c->comm, hyb_alloc(&h, c));
    if (st == RA_OK && c->segs) {
        int64_t *all = (int64_t *)h.x.recv; /* sized for them */
        st = strat_ids_natural(c, s->N, c->masks->q_segments, all, h.qseg);
        if (st == RA_OK)
            st = strat_ids_natural(c, s->M, c->masks->kv_segments, all,
                                   h.kseg);
        for (int64_t b = 0; st == RA_OK && b < s->B; b++)
            for (int64_t i = 0; i < h.Ng; i++)
                h.qsegg[b * h.Ng + i] = h.qseg[b * s->N + h.gq[i]];
    }
    const double t0 = MPI_Wtime();
    if (st == RA_OK)
        st = hyb_scatter(&h, c);
    c->tm->comm_wait += MPI_Wtime() - t0;
    if (st == RA_OK) {
        ra_state_reset(s->B, h.Ng, h.hg.h1 - h.hg.h0, s->Dv, h.o, h.lse);
        st = hyb_ring(&h, c);
    }
    const double t1 = MPI_Wtime();
    const head_order qo = {h.Ng, h.qidx, h.qoff};
    if (st == RA_OK)
        st = heads_gather(c, &h.x, &qo, h.o, h.lse);
    c->tm->comm_wait += MPI_Wtime() - t1;
    hyb_free(&h, c);
    return st;
}
