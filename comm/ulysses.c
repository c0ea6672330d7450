/* ulysses.c: the head-parallel strategy (DeepSpeed-Ulysses).
 *
 * An all-to-all turns sequence slices into head groups: rank p receives
 * every token of query heads [h0_p, h1_p) (H/P each, the first H % P ranks
 * one more, so uneven heads are fine) and of the kv heads those read, in
 * natural token order. It attends over the whole sequence with the same
 * tiled kernel, one call per kv head it touches, and a second all-to-all
 * returns o and lse to the ranks that own the tokens. Memory O(N H / P);
 * no N x M matrix. With GQA a kv head goes only to the ranks whose query
 * heads read it: replicated only when a group of H/G query heads is split
 * over ranks. Needs P <= H (every rank gets a head).
 *
 * The exchange (heads_scatter, heads_gather) serves hybrid.c as well, for
 * the all-to-alls inside its groups: a group is any run of consecutive
 * ranks, here all of them. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "internal.h"
#include "strategy.h"

head_group heads_of(const ra_shape *s, int p, int P)
{
    const int64_t base = s->H / P, extra = s->H % P, per = s->H / s->G;
    head_group hg;
    hg.h0 = p * base + (p < extra ? p : extra);
    hg.h1 = hg.h0 + base + (p < extra ? 1 : 0);
    hg.g0 = hg.h0 / per;
    hg.g1 = hg.h1 > hg.h0 ? (hg.h1 - 1) / per + 1 : hg.g0;
    return hg;
}

typedef struct {
    head_group hg;       /* this rank's heads */
    head_xchg x;         /* the all-to-alls over every rank */
    float *q, *k, *v, *o, *lse; /* natural order, one run per kv head:
                           q (B, N, hc, D), k (B, M, D), v (B, M, Dv),
                           o (B, N, hc, Dv), lse (B, hc, N); v follows
                           the K runs in the array of k */
    int64_t *qseg, *kseg, *qpos, *kpos; /* natural order ids, positions */
    void *mem;           /* the block the arrays above are carved from */
    ra_workspace *ws;
} uly_state;

static head_run run_of(const ra_shape *s, const head_group *hg, int64_t hl,
                       int kv)
{
    if (kv)
        return (head_run){hl, 1};
    const int64_t per = s->H / s->G, h = hg->h0 + hl, g = h / per;
    const int64_t a = g * per > hg->h0 ? g * per : hg->h0;
    const int64_t z = (g + 1) * per < hg->h1 ? (g + 1) * per : hg->h1;
    return (head_run){a - hg->h0, z - a};
}

/* The heads of a received block: nh of them, d floats each, kv heads
 * (runs of one) or query heads. */
typedef struct {
    int64_t nh, d;
    int kv;
} head_rows;

/* A received block (B, n_src, nh, d) of rank src's tokens (layout slice
 * of c's communicator) into the runs of dst (B, len, run width, d). */
static void to_natural(const strat_call *c, const head_group *hg, int src,
                       const head_dest *dst_of, head_rows rows,
                       const float *blk, float *dst)
{
    const ra_slice sl = ra_params_slice(c->params, c->lay, dst_of->axis, src, c->P);
    const int64_t B = c->shape->B, len = dst_of->len;
    const int64_t nh = rows.nh, d = rows.d;
    for (int64_t hl = 0; hl < nh; hl++) {
        const head_run hr = run_of(c->shape, hg, hl, rows.kv);
        float *run = dst + B * len * d * hr.start;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < sl.count; i++) {
                const int64_t at = dst_of->idx ? dst_of->idx[i]
                                               : ra_slice_pos(&sl, i);
                memcpy(run + ((b * len + at) * hr.width + hl - hr.start) * d,
                       blk + ((b * sl.count + i) * nh + hl) * d,
                       sizeof(float) * (size_t)d);
            }
    }
}

/* The reverse for the outputs: rank dst's tokens of o (B, n_d, nh, Dv)
 * then lse (B, nh, n_d) into blk, from the gathered runs o, lse. */
static void from_natural(const strat_call *c, const head_group *hg, int dst,
                  const head_dest *src_of, const float *o, const float *lse,
                  float *blk)
{
    const ra_shape *s = c->shape;
    const ra_slice sl = ra_params_slice(c->params, c->lay, s->N, dst, c->P);
    const int64_t B = s->B, N = src_of->len, Dv = s->Dv, nh = hg->h1 - hg->h0;
    float *lblk = blk + B * sl.count * nh * Dv;
    for (int64_t hl = 0; hl < nh; hl++) {
        const head_run hr = run_of(s, hg, hl, 0);
        const float *orun = o + B * N * Dv * hr.start;
        const float *lrun = lse + B * N * hr.start;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < sl.count; i++) {
                const int64_t at = src_of->idx ? src_of->idx[i]
                                               : ra_slice_pos(&sl, i);
                memcpy(blk + ((b * sl.count + i) * nh + hl) * Dv,
                       orun + ((b * N + at) * hr.width + hl - hr.start) * Dv,
                       sizeof(float) * (size_t)Dv);
                lblk[(b * nh + hl) * sl.count + i] =
                    lrun[(b * hr.width + hl - hr.start) * N + at];
            }
    }
}

/* Copies heads [a, z) of x (B, n, heads, d) into out (B, n, z - a, d). */
static float *pack_heads(const float *x, int64_t B, int64_t n,
                         int64_t heads, int64_t d, int64_t a, int64_t z,
                         float *out)
{
    for (int64_t row = 0; row < B * n; row++, out += (z - a) * d)
        memcpy(out, x + (row * heads + a) * d,
               sizeof(float) * (size_t)((z - a) * d));
    return out;
}

/* Floats this rank sends member p of x's group (*to) and receives from
 * it (*from) in the inputs' all-to-all (back: the outputs'). */
static void heads_pair(const strat_call *c, const head_xchg *x, int p,
                       int back, int64_t *to, int64_t *from)
{
    const ra_shape *s = c->shape;
    const head_group me = heads_of(s, c->r - x->first, x->size);
    const head_group hp = heads_of(s, p, x->size);
    const int64_t hr = me.h1 - me.h0, gr = me.g1 - me.g0;
    const int64_t hpn = hp.h1 - hp.h0, gpn = hp.g1 - hp.g0;
    const int gp = x->first + p;
    const int64_t np = ra_params_slice(c->params, c->lay, s->N, gp, c->P).count;
    const int64_t mp = ra_params_slice(c->params, c->lay, s->M, gp, c->P).count;
    *to = back ? s->B * np * hr * (s->Dv + 1)
               : s->B * (c->n * hpn * s->D + c->m_own * gpn * (s->D + s->Dv));
    *from = back ? s->B * c->n * hpn * (s->Dv + 1)
                 : s->B * (np * hr * s->D + mp * gr * (s->D + s->Dv));
}

int64_t heads_counts(const strat_call *c, const head_xchg *x, int back)
{
    int64_t sent = 0, got = 0;
    for (int p = 0; p < x->size; p++) {
        int64_t to, from;
        heads_pair(c, x, p, back, &to, &from);
        if (x->cnt_s) {
            x->cnt_s[p] = (int)to;
            x->dsp_s[p] = (int)sent;
            x->cnt_r[p] = (int)from;
            x->dsp_r[p] = (int)got;
        }
        sent += to;
        got += from;
        if (sent > INT_MAX || got > INT_MAX)
            return -1;
    }
    return sent > got ? sent : got;
}

/* One all-to-all of x with its counts and the bytes it sends. */
static ra_status heads_exchange(strat_call *c, const head_xchg *x,
                                const char *phase)
{
    const strat_a2a a = {x->first, x->size, x->cnt_s, x->dsp_s, x->cnt_r,
                         x->dsp_r, phase};
    return strat_alltoall(c, &a, x->send, x->recv);
}

ra_status heads_scatter(strat_call *c, head_xchg *x, const head_order *qo,
                        const head_order *ko, float *q, float *kv)
{
    const ra_shape *s = c->shape;
    const head_group me = heads_of(s, c->r - x->first, x->size);
    const int64_t hr = me.h1 - me.h0, gr = me.g1 - me.g0;
    float *v = kv + s->B * ko->len * gr * s->D;
    heads_counts(c, x, 0);
    for (int p = 0; p < x->size; p++) {
        const head_group hp = heads_of(s, p, x->size);
        float *at = x->send + x->dsp_s[p];
        at = pack_heads(c->q, s->B, c->n, s->H, s->D, hp.h0, hp.h1, at);
        at = pack_heads(c->k, s->B, c->m_own, s->G, s->D, hp.g0, hp.g1, at);
        pack_heads(c->v, s->B, c->m_own, s->G, s->Dv, hp.g0, hp.g1, at);
    }
    ra_status st = heads_exchange(c, x, "the all-to-all of q, k, v");
    for (int p = 0; st == RA_OK && p < x->size; p++) {
        const int src = x->first + p;
        const int64_t np = ra_params_slice(c->params, c->lay, s->N, src, c->P).count;
        const int64_t mp = ra_params_slice(c->params, c->lay, s->M, src, c->P).count;
        const head_dest qd = {s->N, qo->len, qo->idx ? qo->idx + qo->off[p]
                                                     : NULL};
        const head_dest kd = {s->M, ko->len, ko->idx ? ko->idx + ko->off[p]
                                                     : NULL};
        const float *at = x->recv + x->dsp_r[p];
        to_natural(c, &me, src, &qd, (head_rows){hr, s->D, 0}, at, q);
        at += s->B * np * hr * s->D;
        to_natural(c, &me, src, &kd, (head_rows){gr, s->D, 1}, at, kv);
        at += s->B * mp * gr * s->D;
        to_natural(c, &me, src, &kd, (head_rows){gr, s->Dv, 1}, at, v);
    }
    return st;
}

ra_status heads_gather(strat_call *c, head_xchg *x, const head_order *qo,
                       const float *o, const float *lse)
{
    const ra_shape *s = c->shape;
    const head_group me = heads_of(s, c->r - x->first, x->size);
    const int64_t n = c->n, Dv = s->Dv;
    heads_counts(c, x, 1);
    for (int p = 0; p < x->size; p++) {
        const head_dest od = {s->N, qo->len, qo->idx ? qo->idx + qo->off[p]
                                                     : NULL};
        from_natural(c, &me, x->first + p, &od, o, lse,
                     x->send + x->dsp_s[p]);
    }
    ra_status st = heads_exchange(c, x, "the all-to-all of o, lse");
    for (int p = 0; st == RA_OK && p < x->size; p++) {
        const head_group hp = heads_of(s, p, x->size);
        const int64_t nh = hp.h1 - hp.h0;
        const float *ob = x->recv + x->dsp_r[p], *lb = ob + s->B * n * nh * Dv;
        for (int64_t b = 0; b < s->B; b++)
            for (int64_t i = 0; i < n; i++)
                for (int64_t hl = 0; hl < nh; hl++) {
                    const int64_t h = hp.h0 + hl;
                    memcpy(c->o + ((b * n + i) * s->H + h) * Dv,
                           ob + ((b * n + i) * nh + hl) * Dv,
                           sizeof(float) * (size_t)Dv);
                    c->lse[(b * s->H + h) * n + i] = lb[(b * nh + hl) * n + i];
                }
    }
    return st;
}

ra_status ulysses_fits(const ra_shape *s, int P)
{
    if (s->H < P)
        return ra_error_set(RA_ERR_ARG, "ulysses: %lld query heads cannot "
                            "be split over %d ranks; it runs on 1 to %lld "
                            "ranks (strategy ring runs on any number)",
                            (long long)s->H, P, (long long)s->H);
    return RA_OK;
}

ra_status heads_xchg_init(const strat_call *c, head_xchg *x, int first,
                          int size, int64_t most)
{
    *x = (head_xchg){.first = first, .size = size};
    const int64_t there = heads_counts(c, x, 0), back = heads_counts(c, x, 1);
    if (there < 0 || back < 0 || most > INT_MAX)
        return ra_error_set(RA_ERR_ARG,
                            "%s: one all-to-all would move more "
                            "than 2^31 floats per rank; use more ranks or "
                            "strategy ring",
                            ra_strategy_name(c->params->exec.strategy));
    most = there > most ? there : most;
    x->floats = back > most ? back : most;
    return RA_OK;
}

void heads_xchg_carve(head_xchg *x, ra_carver *cv)
{
    x->cnt_s = ra_carve(cv, x->size, sizeof(int));
    x->dsp_s = ra_carve(cv, x->size, sizeof(int));
    x->cnt_r = ra_carve(cv, x->size, sizeof(int));
    x->dsp_r = ra_carve(cv, x->size, sizeof(int));
    x->send = ra_carve(cv, x->floats, sizeof(float));
    x->recv = ra_carve(cv, x->floats, sizeof(float));
}

/* The exchange's arrays and the head groups' (ids only with segments),
 * carved out of u->mem (uly_alloc). */
static void uly_carve(void *state, const strat_call *c, ra_carver *cv)
{
    uly_state *u = state;
    const ra_shape *s = c->shape;
    const int64_t hr = u->hg.h1 - u->hg.h0, gr = u->hg.g1 - u->hg.g0;
    const int64_t BN = s->B * s->N, BM = s->B * s->M;
    heads_xchg_carve(&u->x, cv);
    u->q = ra_carve(cv, BN * hr * s->D, sizeof(float));
    u->k = ra_carve(cv, BM * gr * (s->D + s->Dv), sizeof(float));
    u->v = u->k ? u->k + BM * gr * s->D : NULL;
    u->o = ra_carve(cv, BN * hr * s->Dv, sizeof(float));
    u->lse = ra_carve(cv, BN * hr, sizeof(float));
    u->qpos = ra_carve(cv, s->N, sizeof(int64_t));
    u->kpos = ra_carve(cv, s->M, sizeof(int64_t));
    if (c->segs) {
        u->qseg = ra_carve(cv, BN, sizeof(int64_t));
        u->kseg = ra_carve(cv, BM, sizeof(int64_t));
    }
}

static ra_status uly_alloc(uly_state *u, const strat_call *c)
{
    const ra_shape *s = c->shape;
    ra_status st = ulysses_fits(s, c->P);
    /* with ids, the gathers of ids_natural use the all-to-all's recv */
    if (st == RA_OK)
        st = heads_xchg_init(c, &u->x, 0, c->P,
                             c->segs ? 2 * s->B * (s->N > s->M ? s->N : s->M)
                                     : 0);
    if (st != RA_OK)
        return st;
    u->hg = heads_of(s, c->r, c->P);
    return strat_alloc(c, uly_carve, u, "the head groups", &u->mem, &u->ws);
}

static void uly_free(uly_state *u, const strat_call *c)
{
    strat_free(c, u->mem, NULL, 0, u->ws);
}

/* All N queries of this rank's heads against all M keys, one kernel call
 * per kv head (its query heads as a run). */
static void uly_attend(uly_state *u, const strat_call *c)
{
    const ra_shape *s = c->shape;
    const head_group *me = &u->hg;
    const int64_t per = s->H / s->G, B = s->B, N = s->N, M = s->M;
    ra_block blk;
    for (int64_t i = 0; i < N; i++)
        u->qpos[i] = i;
    for (int64_t j = 0; j < M; j++)
        u->kpos[j] = j;
    for (int64_t g = me->g0; g < me->g1; g++) {
        const int64_t a = g * per > me->h0 ? g * per : me->h0;
        const int64_t z = (g + 1) * per < me->h1 ? (g + 1) * per : me->h1;
        const int64_t st = a - me->h0, gl = g - me->g0;
        float *o = u->o + B * N * s->Dv * st, *lse = u->lse + B * N * st;
        strat_block_init(c, N, u->qpos, u->qseg, &blk);
        blk.H = z - a;
        blk.G = 1;
        blk.m = M;
        blk.alibi = c->slopes ? c->slopes + a : NULL;
        blk.mask.kpos = u->kpos;
        blk.mask.k_seg = u->kseg;
        ra_state_reset(B, N, z - a, s->Dv, o, lse);
        const ra_fwd_ops ops = {u->q + B * N * s->D * st,
                                u->k + B * M * s->D * gl,
                                u->v + B * M * s->Dv * gl, o, lse, NULL,
                                NULL};
        ra_kernel_forward_block(&blk, &ops, u->ws);
    }
}

ra_status ulysses_forward(strat_call *c)
{
    uly_state u = {0};
    ra_status st = ra_agree(c->comm, uly_alloc(&u, c));
    const double t0 = MPI_Wtime();
    if (st == RA_OK && c->segs) {
        int64_t *all = (int64_t *)u.x.recv; /* sized for them */
        st = strat_ids_natural(c, c->shape->N, c->masks->q_segments, all,
                               u.qseg);
        if (st == RA_OK)
            st = strat_ids_natural(c, c->shape->M, c->masks->kv_segments,
                                   all, u.kseg);
    }
    const head_order qo = {c->shape->N, NULL, NULL};
    const head_order ko = {c->shape->M, NULL, NULL};
    if (st == RA_OK)
        st = heads_scatter(c, &u.x, &qo, &ko, u.q, u.k);
    const double t1 = MPI_Wtime();
    if (st == RA_OK)
        uly_attend(&u, c);
    const double t2 = MPI_Wtime();
    if (st == RA_OK)
        st = heads_gather(c, &u.x, &qo, u.o, u.lse);
    c->tm->compute = t2 - t1;
    c->tm->comm_wait = (t1 - t0) + (MPI_Wtime() - t2);
    uly_free(&u, c);
    return st;
}
