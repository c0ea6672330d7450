/* model.c: see model.h. The counts restate the strategies' own arithmetic
 * (ring_pass.c, ringq.c, allgather.c, tree.c, ulysses.c, hybrid.c); the
 * times combine them with the profile's rates.
 *
 * Cost: the pair matrix (every rank's queries against every rank's keys)
 * is O(P N log(M / P)) per batch; well under a second up to a few hundred
 * ranks at N = 10^6. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model.h"
#include "plan.h"
#include "strategy.h"

/* Calibrated against bench on this machine (docs/PERFORMANCE.md, "The
 * performance model"): the share of the kernel's rate each strategy's
 * compute reaches (its tile edges, packing and per-call overheads). */
const double model_eff[RA_STRATEGY_COUNT] = {
    [RA_STRATEGY_RING] = 0.95,    [RA_STRATEGY_ALLGATHER] = 0.95,
    [RA_STRATEGY_TREE] = 0.90,    [RA_STRATEGY_RING_Q] = 0.93,
    [RA_STRATEGY_ULYSSES] = 0.95, [RA_STRATEGY_HYBRID] = 0.93,
};

/* ---- visible pairs -------------------------------------------------------- */

/* How many tokens of slice sl lie at positions [a, b]: each run is an
 * arithmetic progression, so O(1). */
static int64_t slice_count_in(const ra_slice *sl, int64_t a, int64_t b)
{
    int64_t n = 0;
    for (int i = 0; i < sl->nruns; i++) {
        const ra_run *r = &sl->run[i];
        if (r->count <= 0 || b < r->start)
            continue;
        const int64_t st = r->stride > 0 ? r->stride : 1;
        const int64_t lo = a <= r->start ? 0 : (a - r->start + st - 1) / st;
        int64_t hi = (b - r->start) / st + 1; /* first index past b */
        hi = hi < r->count ? hi : r->count;
        n += hi > lo ? hi - lo : 0;
    }
    return n;
}

/* The keys [*a, *b) whose segment id is id: ids are numbered in order,
 * so two binary searches. */
static void segment_run(const int64_t *kseg, int64_t M, int64_t id,
                        int64_t *a, int64_t *b)
{
    int64_t lo = 0, hi = M;
    while (lo < hi) { /* first id >= id */
        const int64_t mid = lo + (hi - lo) / 2;
        if (kseg[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *a = lo;
    hi = M;
    while (lo < hi) { /* first id > id */
        const int64_t mid = lo + (hi - lo) / 2;
        if (kseg[mid] <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *b = lo;
}

double model_slice_pairs(ra_band band, const ra_slice *qs, const ra_slice *ks,
                         int64_t M, int64_t q_len, int64_t kv_len,
                         const int64_t *q_seg, const int64_t *k_seg)
{
    int64_t run_a = 0, run_b = 0, run_id = -1; /* cached segment run */
    double pairs = 0;
    for (int64_t i = 0; i < qs->count; i++) {
        const int64_t qp = ra_slice_pos(qs, i);
        if (qp >= q_len)
            continue;
        int64_t first, last;
        ra_band_keys(band, qp, kv_len, &first, &last);
        if (k_seg) {
            const int64_t id = q_seg[i];
            if (id != run_id)
                segment_run(k_seg, M, run_id = id, &run_a, &run_b);
            first = first > run_a ? first : run_a;
            last = last < run_b - 1 ? last : run_b - 1;
        }
        if (last < first)
            continue;
        pairs += ks ? (double)slice_count_in(ks, first, last)
                    : (double)(last - first + 1);
    }
    return pairs;
}

/* ---- the problem as the model sees it ------------------------------------- */

typedef struct {
    const ra_shape *s;
    ra_params p;          /* layout resolved */
    const model_masks *mk;
    const model_alloc *al;
    const ra_profile *pf;
    int P, segs;
    int *node;            /* P: node of each rank */
    double *pairs;        /* P x P: rank d's queries, rank src's keys */
    double *qrow, *kcol;  /* P each: row and column sums */
    int64_t *ids;         /* scratch: one slice's query ids */
    double rate;          /* FLOP/s of one rank's compute */
    double pair_cost;     /* seconds per pair-head on one rank */
} model_ctx;

static int64_t slice_n(const model_ctx *m, int64_t len, int r)
{
    return ra_layout_slice(m->p.layout, len, r, m->P).count;
}

/* Fills the pair matrix, summed over batches. */
static void pairs_fill(model_ctx *m)
{
    const ra_shape *s = m->s;
    const model_masks *mk = m->mk;
    const ra_band band = ra_band_of(&m->p, s);
    for (int d = 0; d < m->P; d++) {
        const ra_slice qs = ra_layout_slice(m->p.layout, s->N, d, m->P);
        for (int64_t b = 0; b < s->B; b++) {
            const int64_t ql = mk->q_lens ? mk->q_lens[b] : s->N;
            const int64_t kl = mk->kv_lens ? mk->kv_lens[b] : s->M;
            const int64_t *kseg = m->segs ? mk->kv_seg + b * s->M : NULL;
            for (int64_t i = 0; m->segs && i < qs.count; i++)
                m->ids[i] = mk->q_seg[b * s->N + ra_slice_pos(&qs, i)];
            for (int src = 0; src < m->P; src++) {
                const ra_slice ks = ra_layout_slice(m->p.layout, s->M, src,
                                                    m->P);
                m->pairs[d * m->P + src] +=
                    model_slice_pairs(band, &qs, m->P > 1 ? &ks : NULL, s->M,
                                      ql, kl, m->ids, kseg);
            }
        }
    }
    for (int d = 0; d < m->P; d++)
        for (int src = 0; src < m->P; src++) {
            m->qrow[d] += m->pairs[d * m->P + src];
            m->kcol[src] += m->pairs[d * m->P + src];
        }
}

static int model_setup(model_ctx *m)
{
    const int P = m->P;
    m->node = malloc(sizeof(int) * (size_t)P);
    m->pairs = calloc((size_t)P * (size_t)P + 2 * (size_t)P, sizeof(double));
    m->ids = malloc(sizeof(int64_t) * (size_t)(m->s->N / P + 2));
    if (!m->node || !m->pairs || !m->ids)
        return -1;
    m->qrow = m->pairs + (size_t)P * P;
    m->kcol = m->qrow + P;
    const int nodes = m->al->nodes > 0 ? m->al->nodes : 1;
    const int per = (P + nodes - 1) / nodes;
    for (int r = 0; r < P; r++)
        m->node[r] = m->al->node_of ? m->al->node_of[r] : r / per;
    pairs_fill(m);
    return 0;
}

static void model_free(model_ctx *m)
{
    free(m->node);
    free(m->pairs);
    free(m->ids);
}

/* ---- memory ---------------------------------------------------------------- */

double model_rank_bytes(const ra_shape *s, const ra_params *p, ra_layout lay,
                        int P, int r)
{
    const int64_t n = ra_layout_slice(lay, s->N, r, P).count;
    const int64_t m = ra_layout_slice(lay, s->M, r, P).count;
    const double B = (double)s->B;
    const double mine = 4.0 * B * ((double)n * (double)(s->H * s->D) +
                                   (double)m * (double)(s->G * s->D) +
                                   (double)m * (double)(s->G * s->Dv) +
                                   (double)n * (double)(s->H * s->Dv) +
                                   (double)n * (double)s->H);
    const double kv_all = 4.0 * B * (double)s->M * (double)(s->G * (s->D + s->Dv));
    const double q_all = 4.0 * B * (double)s->N * (double)s->H;
    int64_t mmax = 0, bq, bkv;
    for (int i = 0; i < P; i++) {
        const int64_t c = ra_layout_slice(lay, s->M, i, P).count;
        mmax = c > mmax ? c : mmax;
    }
    ra_params_tiles(p, s, &bq, &bkv);
    switch (p->strategy) {
    case RA_STRATEGY_ALLGATHER: /* every K/V block */
        return mine + kv_all;
    case RA_STRATEGY_TREE: /* all queries, their partials, merge elements */
        return mine + q_all * (double)(s->D + 2 * s->Dv + 2);
    case RA_STRATEGY_RING_Q: /* two travelling query blocks */
        return mine + 2.0 * q_all / P * (double)(s->D + s->Dv + 1);
    case RA_STRATEGY_ULYSSES: /* head groups, twice for the all-to-all */
    case RA_STRATEGY_HYBRID:
        return mine + 3.0 * (q_all * (double)(s->D + s->Dv + 1) + kv_all) / P;
    default: /* ring: two K/V buffers and the tiles */
        return mine +
               2.0 * 4.0 * B * (double)mmax * (double)(s->G * (s->D + s->Dv)) +
               4.0 * ra_params_threads(p) * (double)(bq * (bkv + s->Dv + 2));
    }
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

static void send_to(const model_ctx *m, sent *x, int from, int to, double b)
{
    sent_add(m, &x[from], from, to, b);
}

/* ring_pass.c: at step t < last, rank r sends the part of block
 * (r - t) mod P that step t + 1 holds. Also the step's largest transfer
 * into step_bytes[t] (P entries). */
static void bytes_ring(const model_ctx *m, sent *x, double *step_bytes)
{
    const ra_shape *s = m->s;
    const int P = m->P;
    const ra_masks rm = {m->mk->q_lens, m->mk->kv_lens, NULL, NULL};
    const ring_plan pl = ring_plan_make(s, &m->p, &rm, P);
    const int last = ring_plan_last_step(&pl);
    const int64_t A = m->p.score == RA_SCORE_ADDITIVE && m->p.additive
                          ? m->p.additive->A : 0;
    const double row = 4.0 * (double)(s->G * ((A ? A : s->D) + s->Dv)) +
                       (m->segs ? 8.0 : 0.0);
    for (int t = 0; t < last; t++)
        for (int r = 0; r < P; r++) {
            const ring_span out =
                ring_plan_held(&pl, (r - t + P) % P, t + 1, last);
            const double b = (double)s->B * (double)(out.b - out.a) * row;
            send_to(m, x, r, (r + 1) % P, b);
            step_bytes[t] = b > step_bytes[t] ? b : step_bytes[t];
        }
}

/* ringq.c: queries (and ids) at steps t < P - 1, (o, lse) at every step. */
static void bytes_ringq(const model_ctx *m, sent *x)
{
    const ra_shape *s = m->s;
    const int P = m->P;
    for (int t = 0; t < P && P > 1; t++)
        for (int r = 0; r < P; r++) {
            const double nj = (double)slice_n(m, s->N, (r - t % P + P) % P);
            const double q = t < P - 1
                                 ? (double)s->B * nj *
                                       (4.0 * (double)(s->H * s->D) +
                                        (m->segs ? 8.0 : 0.0))
                                 : 0.0;
            const double acc = 4.0 * (double)s->B * nj * (double)s->H *
                               (double)(s->Dv + 1);
            send_to(m, x, r, (r + 1) % P, q + acc);
        }
}

/* tree.c: rank r's sends to rank j, those of the queries' all-gather into
 * r's tally q and those of the partial results' reduce-scatter into part. */
static void tree_sends(const model_ctx *m, sent *q, sent *part, int r, int j)
{
    const ra_shape *s = m->s;
    const double qrow = 4.0 * (double)(s->H * s->D) + (m->segs ? 8.0 : 0.0);
    sent_add(m, q, r, j, (double)s->B * (double)slice_n(m, s->N, r) * qrow);
    sent_add(m, part, r, j, 4.0 * (double)s->B * (double)slice_n(m, s->N, j) *
                                (double)s->H * (double)(s->Dv + 1));
}

/* allgather.c and tree.c count what a rank hands to MPI for each other
 * rank: allgather its own K/V (and key ids) to all; tree its own queries
 * (and query ids) to all, then each rank's merge elements (o, lse of that
 * rank's queries against this rank's keys) to that rank. */
static void bytes_gathered(const model_ctx *m, sent *x)
{
    const ra_shape *s = m->s;
    const double krow = 4.0 * (double)(s->G * (s->D + s->Dv)) +
                        (m->segs ? 8.0 : 0.0);
    for (int r = 0; r < m->P; r++)
        for (int j = 0; j < m->P; j++) {
            if (j == r)
                continue;
            if (m->p.strategy == RA_STRATEGY_ALLGATHER)
                send_to(m, x, r, j, (double)s->B *
                                        (double)slice_n(m, s->M, r) * krow);
            else
                tree_sends(m, &x[r], &x[r], r, j);
        }
}

/* ulysses.c and hybrid.c with segments: strat_ids_natural gathers every
 * rank's query and key ids on every rank. */
static void bytes_ids(const model_ctx *m, sent *x)
{
    const ra_shape *s = m->s;
    for (int r = 0; m->segs && r < m->P; r++)
        for (int j = 0; j < m->P; j++)
            if (j != r)
                send_to(m, x, r, j,
                        8.0 * (double)s->B *
                            (double)(slice_n(m, s->N, r) +
                                     slice_n(m, s->M, r)));
}

/* ulysses.c (group of all P) and hybrid.c's all-to-alls inside groups of
 * u consecutive ranks: q, k, v to the heads' owners, then o, lse back. */
static void bytes_heads(const model_ctx *m, sent *x, int u)
{
    const ra_shape *s = m->s;
    for (int r = 0; r < m->P; r++) {
        const int grp = r / u, gi = r % u;
        const head_group me = heads_of(s, gi, u);
        const double n = (double)slice_n(m, s->N, r);
        const double mo = (double)slice_n(m, s->M, r);
        for (int p = 0; p < u; p++) {
            if (p == gi)
                continue;
            const head_group hp = heads_of(s, p, u);
            const double np = (double)slice_n(m, s->N, grp * u + p);
            const double to = (double)s->B *
                              (n * (double)((hp.h1 - hp.h0) * s->D) +
                               mo * (double)((hp.g1 - hp.g0) * (s->D + s->Dv)));
            const double back = (double)s->B * np *
                                (double)((me.h1 - me.h0) * (s->Dv + 1));
            send_to(m, x, r, grp * u + p, 4.0 * (to + back));
        }
    }
}

/* hybrid.c's ring between groups: at step t < ng - 1 the block of group
 * (grp - t) mod ng, this rank's kv heads, to the same index in the next
 * group. */
static void bytes_hybrid_ring(const model_ctx *m, sent *x, int u,
                              double *step_bytes)
{
    const ra_shape *s = m->s;
    const int ng = m->P / u;
    for (int r = 0; r < m->P; r++) {
        const int grp = r / u, gi = r % u;
        const head_group hg = heads_of(s, gi, u);
        for (int t = 0; t < ng - 1; t++) {
            const int og = (grp - t + ng) % ng;
            double mg = 0;
            for (int j = 0; j < u; j++)
                mg += (double)slice_n(m, s->M, og * u + j);
            const double b = 4.0 * (double)s->B * mg *
                             (double)((hg.g1 - hg.g0) * (s->D + s->Dv));
            send_to(m, x, r, ((grp + 1) % ng) * u + gi, b);
            step_bytes[t] = b > step_bytes[t] ? b : step_bytes[t];
        }
    }
}

/* ---- times ----------------------------------------------------------------- */

/* Seconds to move b bytes once over the link between ranks a and b. */
static double link_time(const model_ctx *m, int from, int to, double b)
{
    if (from == to) /* one rank: its "next" is itself, nothing moves */
        return 0.0;
    const int cross = m->node[from] != m->node[to];
    const profile_link *l = cross ? &m->pf->inter : &m->pf->intra;
    const double bw = l->bandwidth > 0 ? l->bandwidth : m->pf->intra.bandwidth;
    return b > 0 ? l->latency + b / bw : 0.0;
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
    const double link = m->pf->inter.bandwidth > 0 ? m->pf->inter.bandwidth
                                                   : intra * per;
    const double out = inter > 0 ? inter : link / per;
    double t = 0;
    if (x->intra > 0 && intra > 0)
        t += x->intra / intra;
    if (x->inter > 0 && out > 0)
        t += x->inter / out;
    return t > 0 ? t + m->pf->intra.latency * m->P : 0.0;
}

/* A ring of steps: each step's time is its slowest rank's compute or
 * transfer, whichever is longer. c[t * P + r]: rank r's compute at step t;
 * x[t]: the step's transfer. */
static void ring_times(const model_ctx *m, int steps, const double *c,
                       const double *x, model_result *res)
{
    double total = 0, busiest = 0;
    for (int t = 0; t < steps; t++) {
        double cm = 0;
        for (int r = 0; r < m->P; r++)
            cm = c[t * m->P + r] > cm ? c[t * m->P + r] : cm;
        busiest += cm;
        total += cm > x[t] ? cm : x[t];
    }
    res->t_imbalance = busiest - res->t_compute;
    res->t_comm = total - busiest;
}

/* Ring and ring-q: step t computes rank r's queries against block
 * (r - t) (ring) or the queries of block (r - t) against its keys
 * (ring-q); the transfer of a step overlaps its compute. */
static int times_ring(const model_ctx *m, const double *step_bytes,
                      model_result *res)
{
    const int P = m->P, q = m->p.strategy == RA_STRATEGY_RING_Q;
    double *c = calloc((size_t)P * (size_t)P + (size_t)P, sizeof(double));
    if (!c)
        return -1;
    double *x = c + (size_t)P * P;
    for (int t = 0; t < P; t++) {
        double far = 0;
        for (int r = 0; r < P; r++) {
            const int j = (r - t + P) % P;
            c[t * P + r] = (q ? m->pairs[j * P + r] : m->pairs[r * P + j]) *
                           (double)m->s->H * m->pair_cost;
            const double lt = link_time(m, r, (r + 1) % P, step_bytes[t]);
            far = lt > far ? lt : far;
        }
        x[t] = far;
    }
    ring_times(m, P, c, x, res);
    free(c);
    return 0;
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
        for (int j = 0; j < m->P; j++)
            if (j != r)
                tree_sends(m, &q, &part, r, j);
        worst = fmax(worst, coll_time(m, &q, pf->allgather_intra,
                                      pf->allgather_inter) +
                                coll_time(m, &part, rs_intra, rs_inter));
    }
    return worst;
}

/* The exposed time of the collectives of each strategy but the rings. */
static void times_collective(const model_ctx *m, const sent *x, int u,
                             const double *step_bytes, model_result *res)
{
    const ra_profile *pf = m->pf;
    const sent mine = busiest(m, x);
    switch (m->p.strategy) {
    case RA_STRATEGY_ALLGATHER: { /* blocks fold in as they arrive */
        const double g = coll_time(m, &mine, pf->allgather_intra,
                                   pf->allgather_inter);
        const double hidden = res->t_compute * (m->P - 1) / m->P;
        res->t_comm = g > hidden ? g - hidden : 0.0;
        break;
    }
    case RA_STRATEGY_TREE:
        res->t_comm = tree_time(m);
        break;
    case RA_STRATEGY_ULYSSES:
        res->t_comm = coll_time(m, &mine, pf->alltoall_intra,
                                pf->alltoall_inter);
        break;
    case RA_STRATEGY_HYBRID: { /* the group's all-to-alls, then a ring
                                  whose steps overlap 1/ng of the compute */
        const int ng = m->P / u;
        const double per_step = res->t_compute / ng;
        sent heads = {0, 0, 0};
        for (int r = 0; r < m->P; r++)
            heads.intra = fmax(heads.intra, x[r].intra);
        res->t_comm = coll_time(m, &heads, pf->alltoall_intra,
                                pf->alltoall_inter);
        for (int t = 0; t < ng - 1; t++) {
            const double lt = link_time(m, 0, u % m->P, step_bytes[t]);
            res->t_comm += lt > per_step ? lt - per_step : 0.0;
        }
        break;
    }
    default:
        break;
    }
}

/* ---- one strategy ---------------------------------------------------------- */

/* Applies or not, as the strategy's own checks say (RA_OK or the first
 * refusal); sets the hybrid group size res->u (1 when refused). */
static ra_status model_checks(const model_ctx *m, model_result *res)
{
    const ra_shape *s = m->s;
    const int P = m->P, nodes = m->al->nodes > 0 ? m->al->nodes : 1;
    const ra_strategy st = m->p.strategy;
    ra_status ok = RA_OK;
    res->u = 1;
    if (st != RA_STRATEGY_RING && m->p.score == RA_SCORE_ADDITIVE)
        return ra_error_set(RA_ERR_ARG, "the additive score runs on strategy "
                                        "ring only");
    if (st == RA_STRATEGY_ULYSSES)
        ok = ulysses_fits(s, P);
    if (st == RA_STRATEGY_HYBRID) {
        const int u = m->p.ulysses_size > 0 ? (int)m->p.ulysses_size
                                            : P / nodes;
        if (m->p.ulysses_size <= 0 && P % nodes != 0)
            ok = ra_error_set(RA_ERR_ARG, "hybrid: nodes hold different "
                              "numbers of ranks (%d over %d); give the "
                              "group size explicitly", P, nodes);
        else
            ok = hybrid_group_check(s, P, u);
        res->u = ok == RA_OK ? u : 1;
    }
    const double limit = m->p.mem_limit > 0
                             ? (double)m->p.mem_limit
                             : (double)m->pf->mem_per_node /
                                   ((P + nodes - 1) / nodes);
    if (ok == RA_OK && st == RA_STRATEGY_ALLGATHER &&
        (double)allgather_bytes(s, m->segs) > limit)
        ok = ra_error_set(RA_ERR_ARG, "allgather: the gathered K/V needs "
                          "%.0f MB per rank, above the limit of %.0f MB",
                          (double)allgather_bytes(s, m->segs) / 1e6,
                          limit / 1e6);
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

/* Pair-heads rank r computes under the strategy. */
static double rank_work(const model_ctx *m, const model_result *res, int r)
{
    const ra_shape *s = m->s;
    switch (m->p.strategy) {
    case RA_STRATEGY_RING_Q: /* every query against the own keys */
    case RA_STRATEGY_TREE:
        return m->kcol[r] * (double)s->H;
    case RA_STRATEGY_ULYSSES: { /* its heads over the whole sequence */
        const head_group hg = heads_of(s, r, m->P);
        return res->pairs_total * (double)(hg.h1 - hg.h0);
    }
    case RA_STRATEGY_HYBRID: { /* its heads over its group's queries */
        const head_group hg = heads_of(s, r % res->u, res->u);
        double g = 0;
        for (int j = 0; j < res->u; j++)
            g += m->qrow[(r / res->u) * res->u + j];
        return g * (double)(hg.h1 - hg.h0);
    }
    default: /* the own queries against every key */
        return m->qrow[r] * (double)s->H;
    }
}

/* Counts: pairs, work per rank, bytes; step_bytes for the times. */
static void model_counts(const model_ctx *m, sent *x, double *step_bytes,
                         model_result *res)
{
    const ra_shape *s = m->s;
    const int P = m->P;
    for (int r = 0; r < P; r++) {
        res->pairs_total += m->qrow[r];
        res->pairs_ring_max = fmax(res->pairs_ring_max, m->qrow[r]);
        res->mem_max = fmax(res->mem_max,
                            model_rank_bytes(s, &m->p, m->p.layout, P, r));
    }
    res->flops = ra_pair_flops(s, &m->p) * res->pairs_total;
    for (int r = 0; r < P; r++) {
        const double w = rank_work(m, res, r);
        res->work_max = fmax(res->work_max, w);
        res->work_avg += w / P;
    }
    switch (m->p.strategy) {
    case RA_STRATEGY_RING:
        bytes_ring(m, x, step_bytes);
        break;
    case RA_STRATEGY_RING_Q:
        bytes_ringq(m, x);
        for (int t = 0; t < P; t++) /* queries overlap; o, lse do not */
            step_bytes[t] = 4.0 * (double)s->B *
                            (double)slice_n(m, s->N, 0) * (double)(s->H * s->D);
        break;
    case RA_STRATEGY_ALLGATHER:
    case RA_STRATEGY_TREE:
        bytes_gathered(m, x);
        break;
    case RA_STRATEGY_ULYSSES:
        bytes_heads(m, x, P);
        bytes_ids(m, x);
        break;
    case RA_STRATEGY_HYBRID:
        bytes_heads(m, x, res->u);
        bytes_ids(m, x);
        bytes_hybrid_ring(m, x, res->u, step_bytes);
        break;
    default:
        break;
    }
    for (int r = 0; r < P; r++) {
        res->bytes_max = fmax(res->bytes_max, x[r].all);
        res->bytes_avg += x[r].all / P;
        res->intra_max = fmax(res->intra_max, x[r].intra);
        res->inter_max = fmax(res->inter_max, x[r].inter);
        if (m->p.strategy == RA_STRATEGY_RING ||
            m->p.strategy == RA_STRATEGY_RING_Q) {
            const double c = m->node[r] != m->node[(r + 1) % P] ? x[r].all : 0;
            res->cross_max = fmax(res->cross_max, c);
            res->cross_total += c;
        }
    }
}

/* The exposed accumulator hops of ring-q (not overlapped): each step
 * waits for its slowest link. */
static double ringq_acc_time(const model_ctx *m)
{
    const ra_shape *s = m->s;
    double worst = 0;
    for (int r = 0; r < m->P && m->P > 1; r++) {
        const double b = 4.0 * (double)s->B * (double)slice_n(m, s->N, r) *
                         (double)s->H * (double)(s->Dv + 1);
        worst = fmax(worst, link_time(m, r, (r + 1) % m->P, b));
    }
    return worst * m->P;
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
    return m->al->core_rate * share * model_eff[m->p.strategy];
}

/* One strategy on a set-up context (m->p.strategy); 0 or -1 (memory). */
static int predict_one(model_ctx *m, int with_io, model_result *res)
{
    const ra_shape *s = m->s;
    const ra_strategy strat = m->p.strategy;
    memset(res, 0, sizeof *res);
    res->strategy = strat;
    res->layout = m->p.layout;
    sent *x = calloc((size_t)m->P, sizeof *x);
    double *step_bytes = calloc((size_t)m->P + 1, sizeof(double));
    int rc = -1;
    if (!x || !step_bytes)
        goto cleanup;
    m->rate = rank_rate(m);
    m->pair_cost = ra_pair_flops(s, &m->p) / (double)s->H / m->rate;
    ra_status ok = model_checks(m, res);
    model_counts(m, x, step_bytes, res);
    if (ok == RA_OK)
        ok = model_fits(m, res);
    res->applies = ok == RA_OK;
    if (ok != RA_OK)
        snprintf(res->why, sizeof res->why, "%s", ra_error_message());
    res->t_compute = res->work_avg * m->pair_cost;
    if (strat == RA_STRATEGY_RING || strat == RA_STRATEGY_RING_Q) {
        if (times_ring(m, step_bytes, res) != 0)
            goto cleanup;
        if (strat == RA_STRATEGY_RING_Q)
            res->t_comm += ringq_acc_time(m);
    } else {
        res->t_imbalance = (res->work_max - res->work_avg) * m->pair_cost;
        times_collective(m, x, res->u, step_bytes, res);
    }
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
    m.p.layout = lay;
    m.segs = m.mk->q_seg && m.mk->kv_seg;
    int rc = model_setup(&m); /* the pair matrix, shared by all */
    for (int k = 0; k < RA_STRATEGY_COUNT && rc == 0; k++) {
        m.p.strategy = (ra_strategy)k;
        rc = predict_one(&m, with_io, &res[k]);
    }
    model_free(&m);
    return rc;
}

int model_predict(const ra_shape *s, const ra_params *p, ra_layout lay,
                  const model_masks *mk, const model_alloc *al,
                  const ra_profile *pf, int with_io, model_result *res)
{
    model_result all[RA_STRATEGY_COUNT];
    const int rc = model_predict_all(s, p, lay, mk, al, pf, with_io, all);
    if (rc == 0)
        *res = all[p->strategy];
    return rc;
}

int64_t model_max_seq(const ra_shape *s, const ra_params *p, ra_layout lay,
                      const model_alloc *al, const ra_profile *pf)
{
    const int P = al->P > 0 ? al->P : 1;
    const int nodes = al->nodes > 0 ? al->nodes : 1;
    const double limit = (double)pf->mem_per_node / ((P + nodes - 1) / nodes);
    int64_t lo = 0, hi = (int64_t)1 << 40;
    while (lo < hi) { /* the largest N whose busiest rank fits */
        const int64_t mid = lo + (hi - lo + 1) / 2;
        ra_shape t = *s;
        t.N = t.M = mid;
        double worst = 0;
        for (int r = 0; r < P && r < 2; r++) /* rank 0 holds the most */
            worst = fmax(worst, model_rank_bytes(&t, p, lay, P, r));
        if (p->strategy == RA_STRATEGY_ALLGATHER && p->mem_limit > 0 &&
            (double)allgather_bytes(&t, 0) > (double)p->mem_limit)
            worst = INFINITY;
        if (worst <= limit)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}
