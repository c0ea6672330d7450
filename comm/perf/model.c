/* model.c: see model.h. The counts restate the strategies' own arithmetic
 * (ring_pass.c, ringq.c, allgather.c, tree.c, ulysses.c, hybrid.c); the
 * times combine them with the profile's rates.
 *
 * Cost: per layout, the counts that pair ranks with ranks are
 * model_steps.c's; everything else is O(P) per strategy, through sums per
 * node and per group in place of loops over every pair of ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_env.h"
#include "internal.h"
#include "model.h"
#include "model_steps.h"
#include "strategy.h"

/* ---- the problem as the model sees it ------------------------------------- */

/* A strategy's row in the model's own table (struct model_cost, below). */
typedef struct model_cost model_cost;

typedef struct {
    const ra_shape *s;
    ra_params p;          /* layout resolved */
    const model_masks *mk;
    const model_alloc *al;
    const ra_profile *pf;
    const strat_row *row; /* the strategy predicted */
    const model_cost *cost; /* and its row in model_costs */
    int P, segs, nodes;   /* node ids are below nodes */
    int *node;            /* P: node of each rank */
    double *nq, *nk;      /* P each: slice counts over N and over M */
    double *qrow, *kcol;  /* P each: model_rows */
    double *diag;         /* P: model_ring_diag */
    double *grp;          /* P: per hybrid group sums (scratch) */
    double *on_node;      /* 3 x nodes: ranks, query and key tokens of a
                             node; then 3 x nodes of scratch */
    double nq_all, nk_all;
    int ring_intra, ring_inter; /* some rank's ring successor shares its
                                   node; some does not */
    double rate;          /* FLOP/s of one rank's compute */
    double pair_cost;     /* seconds per pair-head on one rank */
} model_ctx;

/* Node ids (the allocation's, or r / ceil(P / nodes)), each node's ranks
 * and tokens, and which ring links exist. */
static void model_nodes(model_ctx *m)
{
    const int P = m->P;
    const int nodes = m->al->nodes > 0 ? m->al->nodes : 1;
    const int per = (P + nodes - 1) / nodes;
    for (int r = 0; r < P; r++)
        m->node[r] = m->al->node_of ? m->al->node_of[r] : r / per;
    for (int r = 0; r < P; r++) {
        double *at = &m->on_node[3 * m->node[r]];
        at[0] += 1;
        at[1] += m->nq[r];
        at[2] += m->nk[r];
        m->nq_all += m->nq[r];
        m->nk_all += m->nk[r];
        if (P > 1 && m->node[r] == m->node[(r + 1) % P])
            m->ring_intra = 1;
        if (m->node[r] != m->node[(r + 1) % P])
            m->ring_inter = 1;
    }
}

static int model_setup(model_ctx *m)
{
    const int P = m->P;
    const model_problem pb = {m->s, &m->p, m->mk, P};
    m->nodes = m->al->nodes > 0 ? m->al->nodes : 1;
    for (int r = 0; m->al->node_of && r < P; r++)
        m->nodes = m->al->node_of[r] >= m->nodes ? m->al->node_of[r] + 1
                                                 : m->nodes;
    m->node = malloc(sizeof(int) * (size_t)P);
    m->nq = calloc((size_t)(6 * P + 6 * m->nodes), sizeof(double));
    if (!m->node || !m->nq)
        return -1;
    m->nk = m->nq + P;
    m->qrow = m->nk + P;
    m->kcol = m->qrow + P;
    m->diag = m->kcol + P;
    m->grp = m->diag + P;
    m->on_node = m->grp + P;
    for (int r = 0; r < P; r++) {
        m->nq[r] =
            (double)ra_params_slice(&m->p, m->p.exec.layout, m->s->N, r, P)
                .count;
        m->nk[r] =
            (double)ra_params_slice(&m->p, m->p.exec.layout, m->s->M, r, P)
                .count;
    }
    model_nodes(m);
    if (model_rows(&pb, m->qrow, m->kcol) != 0)
        return -1;
    return model_ring_diag(&pb, m->diag);
}

static void model_free(model_ctx *m)
{
    free(m->node);
    free(m->nq);
}

/* ---- memory ---------------------------------------------------------------- */

/* What a rank holds beyond its own slices, per strategy: the problem and
 * the sizes every strategy's count starts from. */
typedef struct {
    const ra_shape *s;
    const ra_params *p;
    ra_layout lay;
    int P;
    double kv_all, q_all; /* all K/V rows; B N H floats, in bytes */
} mem_view;

/* ring: two K/V buffers and the tiles */
static double mem_ring(const mem_view *v)
{
    const ra_shape *s = v->s;
    int64_t bq, bkv;
    ra_params_tiles(v->p, s, &bq, &bkv);
    return 2.0 * 4.0 * (double)s->B *
               (double)model_slice_most(v->p, v->lay, s->M, v->P) *
               (double)(s->G * (s->D + s->Dv)) +
           4.0 * ra_params_threads(v->p) * (double)(bq * (bkv + s->Dv + 2));
}

/* allgather: every K/V block */
static double mem_gathered(const mem_view *v)
{
    return v->kv_all;
}

/* tree: all queries, their partials, merge elements */
static double mem_tree(const mem_view *v)
{
    return v->q_all * (double)(v->s->D + 2 * v->s->Dv + 2);
}

/* ring-q: two travelling query blocks */
static double mem_ringq(const mem_view *v)
{
    return 2.0 * v->q_all / v->P * (double)(v->s->D + v->s->Dv + 1);
}

/* ulysses, hybrid: head groups, twice for the all-to-all */
static double mem_heads(const mem_view *v)
{
    return 3.0 * (v->q_all * (double)(v->s->D + v->s->Dv + 1) + v->kv_all) /
           v->P;
}

static double model_row_mem(const mem_view *v); /* the table's, below */

/* The call's own copies of n query and m key rows (call.c, call_carve):
 * RoPE's rotated or the Gaussian's centred q and k (with the keys'
 * bounds and centres, engine/centre.h); bf16's rounded q (bf16 precision)
 * and k, v
 * (or a bf16 wire), the own copies rounded in place; on oneDNN in bf16 the
 * kernel's k, v staged in bf16 (kernel.c, stage_kv), taken as m keys. */
static double mem_call_copies(const ra_shape *s, const ra_params *p,
                              int64_t n, int64_t m)
{
    const int gauss = p->num.score == RA_SCORE_GAUSSIAN;
    const int own = p->num.rope != RA_ROPE_NONE || gauss; /* call_owns_qk */
    const int q16 = p->num.precision == RA_PRECISION_BF16;
    const int kv16 = q16 || p->exec.wire == RA_WIRE_BF16;
    const double q = (double)s->B * (double)n * (double)(s->H * s->D);
    const double k = (double)s->B * (double)m * (double)(s->G * s->D);
    const double dk = (double)s->B * (double)m *
                      (double)(s->G * ra_shape_dk(s));
    const double v = (double)s->B * (double)m * (double)(s->G * s->Dv);
    const int staged = q16 && p->num.score != RA_SCORE_ADDITIVE &&
                       ra_gemm_pick(p->exec.gemm) == RA_GEMM_ONEDNN;
    return 4.0 * ((own ? q + k : 0.0) + (q16 && !own ? q : 0.0) +
                  (kv16 && !own ? dk : 0.0) + (kv16 ? v : 0.0)) +
           (staged ? 2.0 * (k + v) : 0.0) +
           (gauss ? 20.0 * (double)(s->B * s->G * s->D) : 0.0);
}

double model_rank_bytes(const ra_shape *s, const ra_params *p, ra_layout lay,
                        int P, int r)
{
    const int64_t n = ra_params_slice(p, lay, s->N, r, P).count;
    const int64_t m = ra_params_slice(p, lay, s->M, r, P).count;
    const double B = (double)s->B;
    const double mine = 4.0 * B * ((double)n * (double)(s->H * s->D) +
                                   (double)m * (double)(s->G * s->D) +
                                   (double)m * (double)(s->G * s->Dv) +
                                   (double)n * (double)(s->H * s->Dv) +
                                   (double)n * (double)s->H);
    const mem_view v = {
        s, p, lay, P,
        4.0 * B * (double)s->M * (double)(s->G * (s->D + s->Dv)),
        4.0 * B * (double)s->N * (double)s->H};
    return mine + mem_call_copies(s, p, n, m) + model_row_mem(&v);
}

/* ---- bytes sent ------------------------------------------------------------ */

/* Per rank: bytes sent in all, to ranks on its node, to other nodes. */
typedef struct {
    double all, intra, inter;
} sent;

/* b bytes from rank from to rank to, into from's tally one. */
static void sent_add(const model_ctx *m, sent *one, int from, int to,
                     double b)
{
    one->all += b;
    if (m->node[from] == m->node[to])
        one->intra += b;
    else
        one->inter += b;
}

/* Into rank r's tally one: b each to every other rank of the job (here:
 * how many of them share r's node). The counts stay integers below 2^53,
 * so the products equal the sums of P - 1 terms they replace. */
static void send_each(const model_ctx *m, sent *one, int r, double b)
{
    const double here = m->on_node[3 * m->node[r]] - 1;
    one->all += b * (double)(m->P - 1);
    one->intra += b * here;
    one->inter += b * ((double)(m->P - 1) - here);
}

/* ring_pass.c: at step t < last, rank r sends the part of block
 * (r - t) mod P that step t + 1 holds (model_ring_sends), to rank r + 1. */
static int bytes_ring(const model_ctx *m, sent *x, double *step_bytes)
{
    const ra_shape *s = m->s;
    const model_problem pb = {s, &m->p, m->mk, m->P};
    const int64_t A = m->p.num.score == RA_SCORE_ADDITIVE && m->p.num.additive
                          ? m->p.num.additive->A
                          : 0;
    /* K/V as fp32, or bf16 on a bf16 wire (ring_pass.c) */
    const double elt = ra_params_wire_bf16(&m->p) ? 2.0 : 4.0;
    const double row = elt * (double)(s->G * ((A ? A : s->D) + s->Dv)) +
                       (m->segs ? 8.0 : 0.0);
    for (int r = 0; r < m->P; r++)
        m->grp[r] = 0; /* scratch: model_ring_sends adds into it */
    if (model_ring_sends(&pb, row, m->grp, step_bytes) != 0)
        return -1;
    for (int r = 0; r < m->P; r++)
        sent_add(m, &x[r], r, (r + 1) % m->P, m->grp[r]);
    return 0;
}

/* ringq.c: queries (and ids) at steps t < P - 1, (o, lse) at every step,
 * to rank r + 1: at step t the block of rank r - t, so every block but
 * that of rank r + 1 travels with its queries. */
static void bytes_ringq(const model_ctx *m, sent *x)
{
    const ra_shape *s = m->s;
    const int P = m->P;
    const double qrow = (double)s->B * (4.0 * (double)(s->H * s->D) +
                                        (m->segs ? 8.0 : 0.0));
    const double acc = 4.0 * (double)s->B * (double)s->H *
                       (double)(s->Dv + 1);
    for (int r = 0; r < P && P > 1; r++)
        sent_add(m, &x[r], r, (r + 1) % P,
                 qrow * (m->nq_all - m->nq[(r + 1) % P]) + acc * m->nq_all);
}

/* tree.c: rank r's queries (and query ids) to every other rank into q;
 * each other rank j's merge elements (o, lse of j's queries against r's
 * keys) to j into part. */
static void tree_sent(const model_ctx *m, int r, sent *q, sent *part)
{
    const ra_shape *s = m->s;
    const double qrow = 4.0 * (double)(s->H * s->D) + (m->segs ? 8.0 : 0.0);
    const double elem = 4.0 * (double)s->B * (double)s->H *
                        (double)(s->Dv + 1);
    const double here = m->on_node[3 * m->node[r] + 1] - m->nq[r];
    const double all = m->nq_all - m->nq[r];
    send_each(m, q, r, (double)s->B * m->nq[r] * qrow);
    part->all += elem * all;
    part->intra += elem * here;
    part->inter += elem * (all - here);
}

/* allgather.c counts what a rank hands to MPI for each other rank: its
 * own K/V (and key ids) to all. */
static void bytes_gathered(const model_ctx *m, sent *x)
{
    const ra_shape *s = m->s;
    const double krow = 4.0 * (double)(s->G * (s->D + s->Dv)) +
                        (m->segs ? 8.0 : 0.0);
    for (int r = 0; r < m->P; r++)
        send_each(m, &x[r], r, (double)s->B * m->nk[r] * krow);
}

/* ulysses.c and hybrid.c with segments: strat_ids_natural gathers every
 * rank's query and key ids on every rank. */
static void bytes_ids(const model_ctx *m, sent *x)
{
    for (int r = 0; m->segs && r < m->P; r++)
        send_each(m, &x[r], r,
                  8.0 * (double)m->s->B * (m->nq[r] + m->nk[r]));
}

/* Adds (heads, kv heads, query tokens) of group member p (rank r) to the
 * per-node sums at (scratch) and to the group's tot; sign -1 takes them
 * back out. */
static void heads_tally(const model_ctx *m, int r, int p, int u, double sign,
                        double *at, double *tot)
{
    const head_group hg = heads_of(m->s, p, u);
    const double v[3] = {(double)(hg.h1 - hg.h0), (double)(hg.g1 - hg.g0),
                         m->nq[r]};
    for (int i = 0; i < 3; i++) {
        at[3 * m->node[r] + i] += sign * v[i];
        tot[i] += sign * v[i];
    }
}

/* ulysses.c (group of all P) and hybrid.c's all-to-alls inside groups of
 * u consecutive ranks: q, k, v to the heads' owners, then o, lse back.
 * A member sends to each other member p its share of p's heads, and gets
 * back its own heads of p's queries: sums over the group and its node. */
static void bytes_heads(const model_ctx *m, sent *x, int u)
{
    const ra_shape *s = m->s;
    double *at = m->on_node + 3 * m->nodes; /* scratch, zero between groups */
    for (int g0 = 0; g0 < m->P; g0 += u) {
        double tot[3] = {0, 0, 0};
        for (int p = 0; p < u; p++)
            heads_tally(m, g0 + p, p, u, 1.0, at, tot);
        for (int p = 0; p < u; p++) {
            const int r = g0 + p;
            const head_group me = heads_of(s, p, u);
            const double *here = &at[3 * m->node[r]];
            const double w[2][3] = {{tot[0], tot[1], tot[2]}, /* the group */
                                    {here[0], here[1], here[2]}}; /* node */
            const double own[3] = {(double)(me.h1 - me.h0),
                                   (double)(me.g1 - me.g0), m->nq[r]};
            double b[2];
            for (int k = 0; k < 2; k++)
                b[k] = 4.0 * (double)s->B *
                       (m->nq[r] * (w[k][0] - own[0]) * (double)s->D +
                        m->nk[r] * (w[k][1] - own[1]) *
                            (double)(s->D + s->Dv) +
                        (w[k][2] - own[2]) * own[0] * (double)(s->Dv + 1));
            x[r].all += b[0];
            x[r].intra += b[1];
            x[r].inter += b[0] - b[1];
        }
        for (int p = 0; p < u; p++)
            heads_tally(m, g0 + p, p, u, -1.0, at, tot);
    }
}

/* hybrid.c's ring between groups: at step t < ng - 1 the block of group
 * (grp - t) mod ng, this rank's kv heads, to the same index in the next
 * group: every group's keys but those of the next group. */
static void bytes_hybrid_ring(const model_ctx *m, sent *x, int u,
                              double *step_bytes)
{
    const ra_shape *s = m->s;
    const int ng = m->P / u;
    double most = 0, gmost = 0;
    for (int g = 0; g < ng; g++) { /* each group's keys */
        m->grp[g] = 0;
        for (int j = 0; j < u; j++)
            m->grp[g] += m->nk[g * u + j];
        most = fmax(most, m->grp[g]);
    }
    for (int r = 0; r < m->P; r++) {
        const int grp = r / u, gi = r % u;
        const head_group hg = heads_of(s, gi, u);
        const double per = 4.0 * (double)s->B *
                           (double)((hg.g1 - hg.g0) * (s->D + s->Dv));
        if (ng > 1)
            sent_add(m, &x[r], r, ((grp + 1) % ng) * u + gi,
                     per * (m->nk_all - m->grp[(grp + 1) % ng]));
        gmost = fmax(gmost, (double)(hg.g1 - hg.g0));
    }
    for (int t = 0; t < ng - 1; t++) /* every group's block at every step */
        step_bytes[t] = fmax(step_bytes[t],
                             4.0 * (double)s->B * most *
                                 (gmost * (double)(s->D + s->Dv)));
}

/* ---- times ----------------------------------------------------------------- */

/* The bandwidth of one flow between nodes while every node of the job
 * sends one (a ring step, a collective's round): the node's link, or its
 * share of a backbone they all cross. */
static double inter_bandwidth(const model_ctx *m)
{
    const double bw = m->pf->inter.bandwidth;
    const double share = m->pf->backbone / m->nodes;
    return m->pf->backbone > 0 && m->nodes > 1 && share < bw ? share : bw;
}

/* Seconds to move b bytes once over the link between ranks a and b. */
static double link_time(const model_ctx *m, int from, int to, double b)
{
    if (from == to) /* one rank: its "next" is itself, nothing moves */
        return 0.0;
    const int cross = m->node[from] != m->node[to];
    const profile_link *l = cross ? &m->pf->inter : &m->pf->intra;
    const double lb = cross ? inter_bandwidth(m) : l->bandwidth;
    const double bw = lb > 0 ? lb : m->pf->intra.bandwidth;
    return b > 0 ? l->latency + b / bw : 0.0;
}

/* The slowest ring link's time for b bytes: a link inside a node and one
 * between nodes, where the ring has them. */
static double ring_link_time(const model_ctx *m, double b)
{
    const profile_link *in = &m->pf->intra, *out = &m->pf->inter;
    const double bw = out->bandwidth > 0 ? inter_bandwidth(m) : in->bandwidth;
    const double t_in = m->ring_intra && b > 0 ? in->latency + b / in->bandwidth
                                               : 0.0;
    const double t_out = m->ring_inter && b > 0 ? out->latency + b / bw : 0.0;
    return t_in > t_out ? t_in : t_out;
}

/* Seconds of a collective in which a rank sends x: its bytes inside the
 * node at the collective's rate there, and its bytes to other nodes over
 * the node's link, which the node's ranks share (inter: the collective's
 * measured rate per rank, else the link's bandwidth over those ranks). */
static double coll_time(const model_ctx *m, const sent *x, double intra,
                        double inter)
{
    const int nodes = m->al->nodes > 0 ? m->al->nodes : 1;
    const int per = (m->P + nodes - 1) / nodes;
    const double link = m->pf->inter.bandwidth > 0 ? inter_bandwidth(m)
                                                   : intra * per;
    const double out = inter > 0 ? inter : link / per;
    double t = 0;
    if (x->intra > 0 && intra > 0)
        t += x->intra / intra;
    if (x->inter > 0 && out > 0)
        t += x->inter / out;
    return t > 0 ? t + m->pf->intra.latency * m->P : 0.0;
}

/* Block pairs (ranks times steps that see a pair) up to which the ring's
 * steps are followed rank by rank (model_ring_schedule, some 0.1 s);
 * beyond, bounded step by step. */
#define RING_SCHEDULE_BLOCKS 65536.0

/* Ring and ring-q: step t computes rank r's queries against block
 * (r - t) (ring) or (q) the queries of block (r - t) against its keys
 * (ring-q). Each step after the first that runs (computes or moves
 * something) adds the profile's fixed step cost to the compute. The
 * ring's ranks are followed step by step (model_ring_schedule): a rank
 * waits for its neighbours only where a block it needs has not been
 * forwarded yet, so a rank whose heavy step comes early and one whose
 * heavy step comes late cost their own sums, not the sum of both heavy
 * steps. Ring-q, whose (o, lse) travel with its queries, and a ring too
 * large to follow rank by rank are bounded instead: each step lasts its
 * busiest rank's compute or its transfer, whichever is longer. */
static void times_ring(const model_ctx *m, const double *step_bytes, int q,
                       model_result *res)
{
    const int P = m->P;
    double total = 0, busiest = 0, fixed = 0;
    double *per = q ? NULL : calloc((size_t)(2 * P), sizeof(double));
    for (int t = 0; t < P; t++) {
        const double x = ring_link_time(m, step_bytes[t]);
        double cm = m->diag[q ? (P - t) % P : t] * (double)m->s->H *
                    m->pair_cost;
        if (t > 0 && (cm > 0 || x > 0)) {
            cm += m->pf->step_seconds;
            fixed += m->pf->step_seconds;
            if (per)
                per[P + t] = m->pf->step_seconds;
        }
        if (per)
            per[t] = x;
        busiest += cm;
        total += cm > x ? cm : x;
    }
    const model_problem pb = {m->s, &m->p, m->mk, P};
    const double pair_s = (double)m->s->H * m->pair_cost;
    if (per && model_ring_schedule(&pb, m->diag, pair_s, per + P, per,
                                   RING_SCHEDULE_BLOCKS, &total) == 0)
        busiest = res->pairs_ring_max * pair_s + fixed; /* its own steps */
    free(per);
    res->t_compute += fixed;
    res->t_imbalance = busiest + m->pf->call_seconds - res->t_compute;
    res->t_comm = total - busiest;
}

/* The busiest rank's bytes, by destination. */
static sent busiest(const model_ctx *m, const sent *x)
{
    sent b = {0, 0, 0};
    for (int r = 0; r < m->P; r++)
        if (x[r].all > b.all)
            b = x[r];
    return b;
}

/* tree.c's two collectives in turn, for the rank they take longest: the
 * queries' all-gather, then the reduce-scatter of the partial results
 * (the all-to-all rate where the profile has no reduce-scatter rate). */
static double tree_time(const model_ctx *m)
{
    const ra_profile *pf = m->pf;
    const double rs_intra = pf->reduce_scatter_intra > 0
                                ? pf->reduce_scatter_intra
                                : pf->alltoall_intra;
    const double rs_inter = pf->reduce_scatter_inter > 0
                                ? pf->reduce_scatter_inter
                                : pf->alltoall_inter;
    double worst = 0;
    for (int r = 0; r < m->P; r++) {
        sent q = {0, 0, 0}, part = {0, 0, 0};
        tree_sent(m, r, &q, &part);
        worst = fmax(worst, coll_time(m, &q, pf->allgather_intra,
                                      pf->allgather_inter) +
                                coll_time(m, &part, rs_intra, rs_inter));
    }
    return worst;
}

/* The exposed accumulator hops of ring-q (not overlapped): each step
 * waits for its slowest link. */
static double ringq_acc_time(const model_ctx *m)
{
    const ra_shape *s = m->s;
    double worst = 0;
    for (int r = 0; r < m->P && m->P > 1; r++) {
        const double b = 4.0 * (double)s->B * m->nq[r] *
                         (double)s->H * (double)(s->Dv + 1);
        worst = fmax(worst, link_time(m, r, (r + 1) % m->P, b));
    }
    return worst * m->P;
}

/* The exposed time of each strategy, given what each rank sends (x) and
 * the bytes of each ring step; the strategies but the rings also pay for
 * their ranks' unequal work, which no step evens out. */
typedef struct {
    const sent *x;
    const double *step_bytes;
} model_sends;

static void times_of_ring(const model_ctx *m, const model_sends *d,
                          model_result *res)
{
    times_ring(m, d->step_bytes, 0, res);
}

static void times_of_ringq(const model_ctx *m, const model_sends *d,
                           model_result *res)
{
    times_ring(m, d->step_bytes, 1, res);
    res->t_comm += ringq_acc_time(m);
}

static double imbalance(const model_ctx *m, const model_result *res)
{
    return (res->work_max - res->work_avg) * m->pair_cost;
}

/* allgather: blocks fold in as they arrive */
/* The all-gather: a rank's own block goes to the others one send after
 * another (allgather.c), so each send to another node adds that link's
 * latency to the collective's time; and each further block is a kernel
 * call, with the fixed step cost the ring's steps pay (both simulated at
 * 1024 nodes: without them the model was 21-37% low, docs/SIMULATION.md). */
static void times_of_allgather(const model_ctx *m, const model_sends *d,
                               model_result *res)
{
    const sent mine = busiest(m, d->x);
    const int nodes = m->al->nodes > 0 ? m->al->nodes : 1;
    const int per = (m->P + nodes - 1) / nodes;
    const double chain = nodes > 1 ? (m->P - per) * m->pf->inter.latency : 0;
    const double g = coll_time(m, &mine, m->pf->allgather_intra,
                               m->pf->allgather_inter) + chain;
    res->t_compute += (m->P - 1) * m->pf->step_seconds;
    const double hidden = res->t_compute * (m->P - 1) / m->P;
    res->t_imbalance = imbalance(m, res);
    res->t_comm = g > hidden ? g - hidden : 0.0;
}

static void times_of_tree(const model_ctx *m, const model_sends *d,
                          model_result *res)
{
    (void)d;
    res->t_imbalance = imbalance(m, res);
    res->t_comm = tree_time(m);
}

static void times_of_ulysses(const model_ctx *m, const model_sends *d,
                             model_result *res)
{
    const sent mine = busiest(m, d->x);
    res->t_imbalance = imbalance(m, res);
    res->t_comm = coll_time(m, &mine, m->pf->alltoall_intra,
                            m->pf->alltoall_inter);
}

/* hybrid: the group's all-to-alls, then a ring whose steps overlap 1/ng
 * of the compute */
static void times_of_hybrid(const model_ctx *m, const model_sends *d,
                            model_result *res)
{
    const int u = res->u, ng = m->P / u;
    const double per_step = res->t_compute / ng;
    sent heads = {0, 0, 0};
    for (int r = 0; r < m->P; r++)
        heads.intra = fmax(heads.intra, d->x[r].intra);
    res->t_imbalance = imbalance(m, res);
    res->t_comm = coll_time(m, &heads, m->pf->alltoall_intra,
                            m->pf->alltoall_inter);
    for (int t = 0; t < ng - 1; t++) {
        const double lt = link_time(m, 0, u % m->P, d->step_bytes[t]);
        res->t_comm += lt > per_step ? lt - per_step : 0.0;
    }
}

/* A strategy as the model counts it (model.h), its row in model_costs
 * (below): eff, the share of the kernel's rate its
 * compute reaches (tile edges, packing, per-call work; calibrated against
 * bench on this machine, docs/PERFORMANCE.md "The performance model");
 * its own refusals beyond the shared ones (NULL: none); what it gathers
 * whole under the memory limit (NULL: nothing); what a rank holds beyond
 * its slices; the work of rank r; what each rank sends; the exposed time;
 * ring_like: each rank sends to its successor only (its cross-node bytes
 * are all or none). */
struct model_cost {
    double eff;
    ra_status (*check)(const model_ctx *m, model_result *res);
    int64_t (*gathered)(const ra_shape *s, int segs);
    double (*mem)(const mem_view *v);
    double (*work)(const model_ctx *m, const model_result *res, int r);
    int (*bytes)(const model_ctx *m, sent *x, double *step_bytes,
                 const model_result *res);
    void (*times)(const model_ctx *m, const model_sends *d,
                  model_result *res);
    int ring_like;
};

/* ---- one strategy ---------------------------------------------------------- */

/* The memory limit of one rank: --mem-limit, else its node's share. */
static double rank_limit(const ra_params *p, const ra_profile *pf, int P,
                         int nodes)
{
    return p->exec.mem_limit > 0
               ? (double)p->exec.mem_limit
               : (double)pf->mem_per_node / ((P + nodes - 1) / nodes);
}

/* ulysses.c's refusal: more ranks than query heads. */
static ra_status check_ulysses(const model_ctx *m, model_result *res)
{
    (void)res;
    return ulysses_fits(m->s, m->P);
}

/* hybrid.c's group size into res->u (1 when refused), and each group's
 * query pairs into m->grp, which its work reads. */
static ra_status check_hybrid(const model_ctx *m, model_result *res)
{
    const int P = m->P, nodes = m->al->nodes > 0 ? m->al->nodes : 1;
    const int u =
        m->p.exec.ulysses_size > 0 ? (int)m->p.exec.ulysses_size : P / nodes;
    ra_status ok;
    if (m->p.exec.ulysses_size <= 0 && P % nodes != 0)
        ok = ra_error_set(RA_ERR_ARG, "hybrid: nodes hold different "
                          "numbers of ranks (%d over %d); give the "
                          "group size explicitly", P, nodes);
    else
        ok = hybrid_group_check(m->s, P, u);
    res->u = ok == RA_OK ? u : 1;
    for (int g = 0; g < P / res->u; g++) {
        m->grp[g] = 0;
        for (int j = 0; j < res->u; j++)
            m->grp[g] += m->qrow[g * res->u + j];
    }
    return ok;
}

/* Applies or not, as the row's own checks say (RA_OK or the refusal):
 * its check (which sets res->u), the memory a gathering row allocates,
 * then the features only some rows take, as the call refuses them. */
static ra_status model_checks(const model_ctx *m, model_result *res)
{
    const model_cost *cost = m->cost;
    const int nodes = m->al->nodes > 0 ? m->al->nodes : 1;
    res->u = 1;
    ra_status ok = cost->check ? cost->check(m, res) : RA_OK;
    const double limit = rank_limit(&m->p, m->pf, m->P, nodes);
    if (ok == RA_OK && cost->gathered &&
        (double)cost->gathered(m->s, m->segs) > limit)
        ok = ra_error_set(RA_ERR_ARG, "%s: the gathered K/V needs %.0f MB "
                          "per rank, above the limit of %.0f MB",
                          ra_strategy_name(m->row->id),
                          (double)cost->gathered(m->s, m->segs) / 1e6,
                          limit / 1e6);
    if (ok == RA_OK)
        ok = strat_takes(m->row, &m->p);
    return ok;
}

/* Whether the rank's model memory fits its share of the node. */
static ra_status model_fits(const model_ctx *m, const model_result *res)
{
    const int nodes = m->al->nodes > 0 ? m->al->nodes : 1;
    const int per = (m->P + nodes - 1) / nodes;
    if (m->pf->mem_per_node > 0 &&
        res->mem_max * per > (double)m->pf->mem_per_node)
        return ra_error_set(RA_ERR_ARG, "needs %.0f MB per rank, above the "
                            "node's %.0f MB over its %d ranks",
                            res->mem_max / 1e6,
                            (double)m->pf->mem_per_node / 1e6, per);
    return RA_OK;
}

/* Pair-heads rank r computes under each strategy. */
static double work_own_queries(const model_ctx *m, const model_result *res,
                               int r)
{
    (void)res; /* the own queries against every key */
    return m->qrow[r] * (double)m->s->H;
}

static double work_own_keys(const model_ctx *m, const model_result *res,
                            int r)
{
    (void)res; /* every query against the own keys */
    return m->kcol[r] * (double)m->s->H;
}

static double work_ulysses(const model_ctx *m, const model_result *res,
                           int r)
{
    const head_group hg = heads_of(m->s, r, m->P); /* its heads, all N */
    return res->pairs_total * (double)(hg.h1 - hg.h0);
}

static double work_hybrid(const model_ctx *m, const model_result *res,
                          int r)
{
    const head_group hg = heads_of(m->s, r % res->u, res->u);
    return m->grp[r / res->u] * (double)(hg.h1 - hg.h0); /* its group's */
}

static double model_row_work(const model_ctx *m, const model_result *res,
                             int r);

/* Pairs, work per rank and memory (with hybrid, m->grp holds each group's
 * queries' pairs: check_hybrid). */
static void model_work(const model_ctx *m, model_result *res)
{
    const ra_shape *s = m->s;
    const int P = m->P;
    for (int r = 0; r < P; r++) {
        res->pairs_total += m->qrow[r];
        res->pairs_ring_max = fmax(res->pairs_ring_max, m->qrow[r]);
        res->mem_max = fmax(res->mem_max,
                            model_rank_bytes(s, &m->p, m->p.exec.layout, P, r));
    }
    res->flops = ra_pair_flops(s, &m->p) * res->pairs_total;
    for (int r = 0; r < P; r++) {
        const double w = model_row_work(m, res, r);
        res->work_max = fmax(res->work_max, w);
        res->work_avg += w / P;
    }
}

/* Bytes per rank (x) and per ring step (step_bytes) of each strategy; 0,
 * or -1 when out of memory. */
static int bytes_of_ring(const model_ctx *m, sent *x, double *step_bytes,
                         const model_result *res)
{
    (void)res;
    return bytes_ring(m, x, step_bytes);
}

static int bytes_of_ringq(const model_ctx *m, sent *x, double *step_bytes,
                          const model_result *res)
{
    const ra_shape *s = m->s;
    (void)res;
    bytes_ringq(m, x);
    for (int t = 0; t < m->P; t++) /* queries overlap; o, lse do not */
        step_bytes[t] = 4.0 * (double)s->B * m->nq[0] * (double)(s->H * s->D);
    return 0;
}

static int bytes_of_allgather(const model_ctx *m, sent *x,
                              double *step_bytes, const model_result *res)
{
    (void)step_bytes;
    (void)res;
    bytes_gathered(m, x);
    return 0;
}

/* tree.c: its queries to all, the merge elements back (tree_sent). */
static int bytes_of_tree(const model_ctx *m, sent *x, double *step_bytes,
                         const model_result *res)
{
    (void)step_bytes;
    (void)res;
    for (int r = 0; r < m->P; r++)
        tree_sent(m, r, &x[r], &x[r]);
    return 0;
}

static int bytes_of_ulysses(const model_ctx *m, sent *x, double *step_bytes,
                            const model_result *res)
{
    (void)step_bytes;
    (void)res;
    bytes_heads(m, x, m->P);
    bytes_ids(m, x);
    return 0;
}

static int bytes_of_hybrid(const model_ctx *m, sent *x, double *step_bytes,
                           const model_result *res)
{
    bytes_heads(m, x, res->u);
    bytes_ids(m, x);
    bytes_hybrid_ring(m, x, res->u, step_bytes);
    return 0;
}

/* The model's own table, one row per strategy keyed by its enum (the
 * strategy table, call.c, knows nothing of the model). A strategy without
 * a row here is predicted as refused, by name (model_cost_of). */
static const model_cost model_costs[RA_STRATEGY_COUNT] = {
    [RA_STRATEGY_RING] = {0.95, NULL, NULL, mem_ring, work_own_queries,
                          bytes_of_ring, times_of_ring, 1},
    [RA_STRATEGY_ALLGATHER] = {0.95, NULL, allgather_bytes, mem_gathered,
                               work_own_queries, bytes_of_allgather,
                               times_of_allgather, 0},
    [RA_STRATEGY_TREE] = {0.90, NULL, NULL, mem_tree, work_own_keys,
                          bytes_of_tree, times_of_tree, 0},
    [RA_STRATEGY_RING_Q] = {0.93, NULL, NULL, mem_ringq, work_own_keys,
                            bytes_of_ringq, times_of_ringq, 1},
    [RA_STRATEGY_ULYSSES] = {0.95, check_ulysses, NULL, mem_heads,
                             work_ulysses, bytes_of_ulysses,
                             times_of_ulysses, 0},
    [RA_STRATEGY_HYBRID] = {0.93, check_hybrid, NULL, mem_heads,
                            work_hybrid, bytes_of_hybrid, times_of_hybrid,
                            0},
};

/* The row of strategy id in model_costs, or NULL when it has none. */
static const model_cost *model_cost_of(ra_strategy id)
{
    if ((int)id < 0 || id >= RA_STRATEGY_COUNT || !model_costs[id].times)
        return NULL;
    return &model_costs[id];
}

/* What a strategy without a cost holds beyond its slices is unknown:
 * counted as nothing, and predict_one refuses it. */
static double model_row_mem(const mem_view *v)
{
    const model_cost *cost = model_cost_of(v->p->exec.strategy);
    return cost ? cost->mem(v) : 0.0;
}

static double model_row_work(const model_ctx *m, const model_result *res,
                             int r)
{
    return m->cost->work(m, res, r);
}

/* Counts: pairs, work per rank, bytes; step_bytes for the times. 0, or -1
 * when out of memory. */
static int model_counts(const model_ctx *m, sent *x, double *step_bytes,
                        model_result *res)
{
    const int P = m->P;
    model_work(m, res);
    if (m->cost->bytes(m, x, step_bytes, res) != 0)
        return -1;
    for (int r = 0; r < P; r++) {
        res->bytes_max = fmax(res->bytes_max, x[r].all);
        res->bytes_avg += x[r].all / P;
        res->intra_max = fmax(res->intra_max, x[r].intra);
        res->inter_max = fmax(res->inter_max, x[r].inter);
        if (m->cost->ring_like) {
            const double c = m->node[r] != m->node[(r + 1) % P] ? x[r].all : 0;
            res->cross_max = fmax(res->cross_max, c);
            res->cross_total += c;
        }
    }
    return 0;
}

static double io_time(const ra_shape *s, const ra_profile *pf)
{
    const double B = (double)s->B;
    const double in = 4.0 * B * ((double)s->N * (double)(s->H * s->D) +
                                 (double)s->M * (double)(s->G * (s->D + s->Dv)));
    const double out = 4.0 * B * (double)s->N * (double)(s->H * (s->Dv + 1));
    return (pf->io_read > 0 ? in / pf->io_read : 0.0) +
           (pf->io_write > 0 ? out / pf->io_write : 0.0);
}

/* The compute rate of one rank: its threads, but no more than its share
 * of the cores. */
static double rank_rate(const model_ctx *m)
{
    double share = ra_params_threads(&m->p);
    if (m->al->cores > 0 && share * m->P > m->al->cores)
        share = (double)m->al->cores / m->P;
    return m->al->core_rate * share * m->cost->eff;
}

/* One strategy on a set-up context (m->p.strategy); 0 or -1 (memory). */
static int predict_one(model_ctx *m, int with_io, model_result *res)
{
    const ra_shape *s = m->s;
    const ra_strategy strat = m->p.exec.strategy;
    memset(res, 0, sizeof *res);
    res->strategy = strat;
    res->layout = m->p.exec.layout;
    sent *x = calloc((size_t)m->P, sizeof *x);
    double *step_bytes = calloc((size_t)m->P + 1, sizeof(double));
    int rc = -1;
    if (!x || !step_bytes)
        goto cleanup;
    if (!m->cost) { /* refused by name, never predicted as another */
        snprintf(res->why, sizeof res->why, "%s: the performance model has "
                 "no cost for it (comm/perf/model.c)", ra_strategy_name(strat));
        rc = 0;
        goto cleanup;
    }
    m->rate = rank_rate(m);
    m->pair_cost = ra_pair_flops(s, &m->p) / (double)s->H / m->rate;
    ra_status ok = model_checks(m, res);
    if (model_counts(m, x, step_bytes, res) != 0)
        goto cleanup;
    if (ok == RA_OK)
        ok = model_fits(m, res);
    res->applies = ok == RA_OK;
    if (ok != RA_OK)
        snprintf(res->why, sizeof res->why, "%s", ra_error_message());
    /* the tiles, and the call's fixed cost (the profile's; 0 unprobed) */
    res->t_compute = res->work_avg * m->pair_cost + m->pf->call_seconds;
    const model_sends sends = {x, step_bytes};
    m->cost->times(m, &sends, res);
    res->t_io = with_io ? io_time(s, m->pf) : 0.0;
    res->t_total = res->t_compute + res->t_comm + res->t_imbalance + res->t_io;
    rc = 0;
cleanup:
    free(x);
    free(step_bytes);
    return rc;
}

int model_predict_all(const ra_shape *s, const ra_params *p, ra_layout lay,
                      const model_masks *mk, const model_alloc *al,
                      const ra_profile *pf, int with_io,
                      model_result res[RA_STRATEGY_COUNT])
{
    const model_masks none = {0};
    model_ctx m = {.s = s, .p = *p, .mk = mk ? mk : &none, .al = al,
                   .pf = pf, .P = al->P > 0 ? al->P : 1};
    m.p.exec.layout = lay;
    m.segs = m.mk->q_seg && m.mk->kv_seg;
    int rc = model_setup(&m); /* the rows and steps, shared by all */
    for (int i = 0; i < RA_STRATEGY_COUNT && rc == 0; i++) {
        m.row = &strat_table[i];
        m.cost = model_cost_of(m.row->id);
        m.p.exec.ulysses_size = p->exec.ulysses_size;
        model_use_strategy(&m.p, m.row->id);
        rc = predict_one(&m, with_io, &res[m.row->id]);
    }
    model_free(&m);
    return rc;
}

int64_t model_max_seq(const ra_shape *s, const ra_params *p, ra_layout lay,
                      const model_alloc *al, const ra_profile *pf)
{
    const int P = al->P > 0 ? al->P : 1;
    const int nodes = al->nodes > 0 ? al->nodes : 1;
    const double limit = (double)pf->mem_per_node / ((P + nodes - 1) / nodes);
    const model_cost *cost = model_cost_of(p->exec.strategy);
    int64_t (*gathered)(const ra_shape *, int) = cost ? cost->gathered : NULL;
    int64_t lo = 0, hi = (int64_t)1 << 40;
    while (lo < hi) { /* the largest N whose busiest rank fits */
        const int64_t mid = lo + (hi - lo + 1) / 2;
        ra_shape t = *s;
        t.N = t.M = mid;
        double worst = 0;
        for (int r = 0; r < P && r < 2; r++) /* rank 0 holds the most */
            worst = fmax(worst, model_rank_bytes(&t, p, lay, P, r));
        if (gathered && p->exec.mem_limit > 0 &&
            (double)gathered(&t, 0) > (double)p->exec.mem_limit)
            worst = INFINITY;
        if (worst <= limit)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void model_use_strategy(ra_params *p, ra_strategy k)
{
    p->exec.strategy = k;
    if (k != RA_STRATEGY_HYBRID)
        p->exec.ulysses_size = 0;
}
