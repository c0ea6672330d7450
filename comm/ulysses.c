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
 * over ranks. Needs P <= H (every rank gets a head). */
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
    head_group *hg;      /* P */
    int64_t *ns, *ms;    /* P: each rank's query and key counts */
    int *cnt_s, *dsp_s, *cnt_r, *dsp_r; /* P each: one all-to-all's floats */
    float *send, *recv;  /* packing buffers, sized for the largest */
    float *q, *k, *v, *o, *lse; /* natural order, one run per kv head:
                           q (B, N, hc, D), k (B, M, D), v (B, M, Dv),
                           o (B, N, hc, Dv), lse (B, hc, N) */
    int64_t *qseg, *kseg, *qpos, *kpos; /* natural order ids, positions */
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

void to_natural(const strat_call *c, const head_group *hg, int src,
                const head_dest *dst_of, int64_t nh, int64_t d, int kv,
                const float *blk, float *dst)
{
    const ra_slice sl = ra_layout_slice(c->lay, dst_of->axis, src, c->P);
    const int64_t B = c->shape->B, len = dst_of->len;
    for (int64_t hl = 0; hl < nh; hl++) {
        const head_run hr = run_of(c->shape, hg, hl, kv);
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

void from_natural(const strat_call *c, const head_group *hg, int dst,
                  const head_dest *src_of, const float *o, const float *lse,
                  float *blk)
{
    const ra_shape *s = c->shape;
    const ra_slice sl = ra_layout_slice(c->lay, s->N, dst, c->P);
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
float *pack_heads(const float *x, int64_t B, int64_t n, int64_t heads,
                         int64_t d, int64_t a, int64_t z, float *out)
{
    for (int64_t row = 0; row < B * n; row++, out += (z - a) * d)
        memcpy(out, x + (row * heads + a) * d,
               sizeof(float) * (size_t)((z - a) * d));
    return out;
}

/* Float counts of both all-to-alls; -1 in *most when one passes INT_MAX. */
static void uly_counts(uly_state *u, const strat_call *c, int back,
                       int64_t *most)
{
    const ra_shape *s = c->shape;
    const head_group *me = &u->hg[c->r];
    int64_t sent = 0, got = 0;
    for (int p = 0; p < c->P; p++) {
        const head_group *hp = &u->hg[p];
        const int64_t hp_n = hp->h1 - hp->h0, gp_n = hp->g1 - hp->g0;
        const int64_t hr = me->h1 - me->h0, gr = me->g1 - me->g0;
        const int64_t to = back ? s->B * u->ns[p] * hr * (s->Dv + 1)
                                : s->B * (c->n * hp_n * s->D +
                                          c->m_own * gp_n * (s->D + s->Dv));
        const int64_t from = back ? s->B * c->n * hp_n * (s->Dv + 1)
                                  : s->B * (u->ns[p] * hr * s->D +
                                            u->ms[p] * gr * (s->D + s->Dv));
        u->cnt_s[p] = (int)to;
        u->dsp_s[p] = (int)sent;
        u->cnt_r[p] = (int)from;
        u->dsp_r[p] = (int)got;
        sent += to;
        got += from;
        if (sent > INT_MAX || got > INT_MAX)
            *most = -1;
    }
    if (*most >= 0) {
        *most = sent > *most ? sent : *most;
        *most = got > *most ? got : *most;
    }
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

static ra_status uly_alloc(uly_state *u, const strat_call *c)
{
    const ra_shape *s = c->shape;
    const size_t P = (size_t)c->P;
    const head_group *me;
    int64_t most = 0, bq, bkv;
    ra_status st = ulysses_fits(s, c->P);
    if (st != RA_OK)
        return st;
    u->hg = malloc(sizeof(head_group) * P);
    u->ns = malloc(sizeof(int64_t) * P);
    u->ms = malloc(sizeof(int64_t) * P);
    int **ia[4] = {&u->cnt_s, &u->dsp_s, &u->cnt_r, &u->dsp_r};
    for (int i = 0; i < 4; i++)
        *ia[i] = malloc(sizeof(int) * P);
    if (!u->hg || !u->ns || !u->ms || !u->cnt_s || !u->dsp_s || !u->cnt_r ||
        !u->dsp_r)
        return ra_error_set(RA_ERR_NOMEM, "ulysses: out of memory");
    for (int p = 0; p < c->P; p++) {
        u->hg[p] = heads_of(s, p, c->P);
        u->ns[p] = ra_layout_slice(c->lay, s->N, p, c->P).count;
        u->ms[p] = ra_layout_slice(c->lay, s->M, p, c->P).count;
    }
    if (c->segs) /* ids_natural gathers B max(N, M) int64 ids in recv */
        most = 2 * s->B * (s->N > s->M ? s->N : s->M);
    uly_counts(u, c, 0, &most);
    uly_counts(u, c, 1, &most);
    if (most < 0 || most > INT_MAX)
        return ra_error_set(RA_ERR_ARG, "ulysses: one all-to-all would move "
                            "more than 2^31 floats per rank; use more ranks "
                            "or strategy ring");
    me = &u->hg[c->r];
    const size_t hr = (size_t)(me->h1 - me->h0), gr = (size_t)(me->g1 - me->g0);
    const size_t BN = (size_t)(s->B * s->N), BM = (size_t)(s->B * s->M);
    u->send = malloc(sizeof(float) * (size_t)(most + 1));
    u->recv = malloc(sizeof(float) * (size_t)(most + 1));
    u->q = malloc(sizeof(float) * BN * hr * (size_t)s->D + 1);
    u->k = malloc(sizeof(float) * BM * gr * (size_t)s->D + 1);
    u->v = malloc(sizeof(float) * BM * gr * (size_t)s->Dv + 1);
    u->o = malloc(sizeof(float) * BN * hr * (size_t)s->Dv + 1);
    u->lse = malloc(sizeof(float) * BN * hr + 1);
    u->qpos = malloc(sizeof(int64_t) * (size_t)(s->N + s->M));
    u->kpos = u->qpos + s->N;
    if (c->segs) {
        u->qseg = malloc(sizeof(int64_t) * (BN + BM));
        u->kseg = u->qseg ? u->qseg + BN : NULL;
    }
    ra_params_tiles(c->params, s, &bq, &bkv);
    u->ws = ra_workspace_create(ra_params_threads(c->params), bq, bkv, s->Dv);
    if (!u->send || !u->recv || !u->q || !u->k || !u->v || !u->o || !u->lse ||
        !u->qpos || (c->segs && !u->qseg) || !u->ws)
        return ra_error_set(RA_ERR_NOMEM, "ulysses: cannot allocate the head "
                                          "groups");
    return RA_OK;
}

static void uly_free(uly_state *u)
{
    void *all[] = {u->hg, u->ns, u->ms, u->cnt_s, u->dsp_s, u->cnt_r,
                   u->dsp_r, u->send, u->recv, u->q, u->k, u->v, u->o,
                   u->lse, u->qpos, u->qseg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
    ra_workspace_free(u->ws);
}

/* Every rank's segment ids of a length-len axis, in natural order. */
static ra_status ids_natural(uly_state *u, const strat_call *c, int64_t len,
                             const int64_t *mine, int64_t *out)
{
    const int64_t B = c->shape->B;
    int64_t *all = (int64_t *)u->recv, at = 0; /* sized for them */
    for (int p = 0; p < c->P; p++) {
        const int64_t cnt = ra_layout_slice(c->lay, len, p, c->P).count;
        u->cnt_r[p] = (int)(B * cnt);
        u->dsp_r[p] = (int)at;
        at += B * cnt;
    }
    if (MPI_Allgatherv(mine, u->cnt_r[c->r], MPI_INT64_T, all, u->cnt_r,
                       u->dsp_r, MPI_INT64_T, c->comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ulysses: gathering the segment ids "
                                        "failed");
    for (int p = 0; p < c->P; p++) {
        const ra_slice sl = ra_layout_slice(c->lay, len, p, c->P);
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < sl.count; i++)
                out[b * len + ra_slice_pos(&sl, i)] =
                    all[u->dsp_r[p] + b * sl.count + i];
    }
    return RA_OK;
}

/* Sequence slices to head groups: q, k, v of every token for this rank's
 * heads, in natural order. */
static ra_status uly_scatter(uly_state *u, strat_call *c)
{
    const ra_shape *s = c->shape;
    const head_group *me = &u->hg[c->r];
    const int64_t hr = me->h1 - me->h0, gr = me->g1 - me->g0;
    int64_t most = 0;
    uly_counts(u, c, 0, &most);
    for (int p = 0; p < c->P; p++) {
        const head_group *hp = &u->hg[p];
        float *at = u->send + u->dsp_s[p];
        at = pack_heads(c->q, s->B, c->n, s->H, s->D, hp->h0, hp->h1, at);
        at = pack_heads(c->k, s->B, c->m_own, s->G, s->D, hp->g0, hp->g1, at);
        pack_heads(c->v, s->B, c->m_own, s->G, s->Dv, hp->g0, hp->g1, at);
        if (p != c->r)
            c->tm->bytes_sent += (int64_t)sizeof(float) * u->cnt_s[p];
    }
    if (MPI_Alltoallv(u->send, u->cnt_s, u->dsp_s, MPI_FLOAT, u->recv,
                      u->cnt_r, u->dsp_r, MPI_FLOAT, c->comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ulysses: the all-to-all of q, k, v "
                                        "failed");
    for (int p = 0; p < c->P; p++) {
        const float *at = u->recv + u->dsp_r[p];
        const head_dest qd = {s->N, s->N, NULL}, kd = {s->M, s->M, NULL};
        to_natural(c, me, p, &qd, hr, s->D, 0, at, u->q);
        at += s->B * u->ns[p] * hr * s->D;
        to_natural(c, me, p, &kd, gr, s->D, 1, at, u->k);
        at += s->B * u->ms[p] * gr * s->D;
        to_natural(c, me, p, &kd, gr, s->Dv, 1, at, u->v);
    }
    return RA_OK;
}

/* Head groups back to sequence slices: o and lse of this rank's tokens. */
static ra_status uly_gather(uly_state *u, strat_call *c)
{
    const ra_shape *s = c->shape;
    int64_t most = 0;
    uly_counts(u, c, 1, &most);
    const head_dest od = {s->N, s->N, NULL};
    for (int p = 0; p < c->P; p++) {
        from_natural(c, &u->hg[c->r], p, &od, u->o, u->lse,
                     u->send + u->dsp_s[p]);
        if (p != c->r)
            c->tm->bytes_sent += (int64_t)sizeof(float) * u->cnt_s[p];
    }
    if (MPI_Alltoallv(u->send, u->cnt_s, u->dsp_s, MPI_FLOAT, u->recv,
                      u->cnt_r, u->dsp_r, MPI_FLOAT, c->comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ulysses: the all-to-all of o, lse "
                                        "failed");
    for (int p = 0; p < c->P; p++) {
        const head_group *hp = &u->hg[p];
        const int64_t nh = hp->h1 - hp->h0, n = c->n;
        const float *ob = u->recv + u->dsp_r[p], *lb = ob + s->B * n * nh * s->Dv;
        for (int64_t b = 0; b < s->B; b++)
            for (int64_t i = 0; i < n; i++)
                for (int64_t hl = 0; hl < nh; hl++) {
                    const int64_t h = hp->h0 + hl;
                    memcpy(c->o + ((b * n + i) * s->H + h) * s->Dv,
                           ob + ((b * n + i) * nh + hl) * s->Dv,
                           sizeof(float) * (size_t)s->Dv);
                    c->lse[(b * s->H + h) * n + i] = lb[(b * nh + hl) * n + i];
                }
    }
    return RA_OK;
}

/* All N queries of this rank's heads against all M keys, one kernel call
 * per kv head (its query heads as a run). */
static void uly_attend(uly_state *u, const strat_call *c)
{
    const ra_shape *s = c->shape;
    const head_group *me = &u->hg[c->r];
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
        blk.mask.kpos = u->kpos;
        blk.mask.k_seg = u->kseg;
        ra_state_reset(B, N, z - a, s->Dv, o, lse);
        ra_kernel_forward_block(&blk, u->q + B * N * s->D * st,
                                u->k + B * M * s->D * gl,
                                u->v + B * M * s->Dv * gl, o, lse, u->ws,
                                NULL, NULL);
    }
}

ra_status ulysses_forward(strat_call *c)
{
    uly_state u = {0};
    ra_status st = ra_agree(c->comm, uly_alloc(&u, c));
    if (st == RA_OK)
        st = strat_check_range(c);
    const double t0 = MPI_Wtime();
    if (st == RA_OK && c->segs) {
        st = ids_natural(&u, c, c->shape->N, c->masks->q_segments, u.qseg);
        if (st == RA_OK)
            st = ids_natural(&u, c, c->shape->M, c->masks->kv_segments,
                             u.kseg);
    }
    if (st == RA_OK)
        st = uly_scatter(&u, c);
    const double t1 = MPI_Wtime();
    if (st == RA_OK)
        uly_attend(&u, c);
    const double t2 = MPI_Wtime();
    if (st == RA_OK)
        st = uly_gather(&u, c);
    c->tm->compute = t2 - t1;
    c->tm->comm_wait = (t1 - t0) + (MPI_Wtime() - t2);
    uly_free(&u);
    return st;
}
