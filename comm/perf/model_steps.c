/* model_steps.c: see model_steps.h.
 *
 * Cost, per layout: the rows O(B (N + M)) (segments: O(M) memory); the
 * ring's diagonal maxima a few blocks per step without segments (pieces
 * between the layouts' kinks whose blocks must be equal cost one block;
 * padding lengths make a few ranks differ, found by halving), with them
 * O(B N log N + P) (model_segments.c); the plan's last step O(P log P)
 * (comm/plan.c); the ring's sends O(P) without a band, else per block
 * the steps that grow its hull until it is whole: contiguous slices try
 * their candidate steps one by one (O(P) under causal), zigzag and
 * striped slices find each such step by halving (O(log P) each). */
#include <stdlib.h>
#include <string.h>

#include "model_steps.h"
#include "plan.h"

int64_t model_slice_most(const ra_params *p, ra_layout lay, int64_t len,
                         int P)
{
    if (lay == RA_LAYOUT_ZIGZAG) { /* chunks r and 2P-1-r of 2P */
        const int64_t c = 2 * (int64_t)P, base = len / c, extra = len % c;
        return 2 * base + (extra > P ? 2 : extra > 0 ? 1 : 0);
    }
    if (lay == RA_LAYOUT_BALANCED) { /* the first, last or second rank */
        int64_t most = 0;
        const int r[3] = {0, 1, P - 1};
        for (int i = 0; i < 3; i++) {
            const int64_t c = ra_params_slice(p, lay, len, r[i], P).count;
            most = c > most ? c : most;
        }
        return most;
    }
    return (len + P - 1) / P; /* contiguous and striped: rank 0's */
}

/* ---- visible pairs -------------------------------------------------------- */

/* How many tokens of run r lie at positions [a, b]: an arithmetic
 * progression, so O(1). */
static int64_t run_count_in(const ra_run *r, int64_t a, int64_t b)
{
    if (r->count <= 0 || b < r->start)
        return 0;
    const int64_t st = r->stride > 0 ? r->stride : 1;
    const int64_t lo = a <= r->start ? 0 : (a - r->start + st - 1) / st;
    int64_t hi = (b - r->start) / st + 1; /* first index past b */
    hi = hi < r->count ? hi : r->count;
    return hi > lo ? hi - lo : 0;
}

/* How many tokens of slice sl lie at positions [a, b]. */
static int64_t slice_count_in(const ra_slice *sl, int64_t a, int64_t b)
{
    int64_t n = 0;
    for (int i = 0; i < sl->nruns; i++)
        n += run_count_in(&sl->run[i], a, b);
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

void model_query_keys(ra_band band, int64_t qp, int64_t kv_len,
                      model_key_segs *ks, int64_t id, int64_t *first,
                      int64_t *last)
{
    ra_band_keys(band, qp, kv_len, first, last);
    if (!ks->ids)
        return;
    if (id != ks->id)
        segment_run(ks->ids, ks->M, ks->id = id, &ks->a, &ks->b);
    *first = *first > ks->a ? *first : ks->a;
    *last = *last < ks->b - 1 ? *last : ks->b - 1;
}

double model_slice_pairs(ra_band band, const ra_slice *qs, const ra_slice *ks,
                         int64_t M, int64_t q_len, int64_t kv_len,
                         const int64_t *q_seg, const int64_t *k_seg)
{
    model_key_segs segs = {k_seg, M, 0, 0, -1};
    double pairs = 0;
    for (int64_t i = 0; i < qs->count; i++) {
        const int64_t qp = ra_slice_pos(qs, i);
        if (qp >= q_len)
            continue;
        int64_t first, last;
        model_query_keys(band, qp, kv_len, &segs, k_seg ? q_seg[i] : -1,
                         &first, &last);
        if (last < first)
            continue;
        pairs += ks ? (double)slice_count_in(ks, first, last)
                    : (double)(last - first + 1);
    }
    return pairs;
}

double model_block_pairs(const model_problem *pb, int d, int src,
                         int64_t *ids)
{
    const ra_shape *s = pb->s;
    const model_masks *mk = pb->mk;
    const ra_band band = ra_band_of(pb->p, s);
    const ra_slice qs =
        ra_params_slice(pb->p, pb->p->exec.layout, s->N, d, pb->P);
    const ra_slice ks =
        ra_params_slice(pb->p, pb->p->exec.layout, s->M, src, pb->P);
    const int segs = mk->q_seg && mk->kv_seg;
    double pairs = 0;
    for (int64_t b = 0; b < s->B; b++) {
        const int64_t ql = mk->q_lens ? mk->q_lens[b] : s->N;
        const int64_t kl = mk->kv_lens ? mk->kv_lens[b] : s->M;
        for (int64_t i = 0; segs && i < qs.count; i++)
            ids[i] = mk->q_seg[b * s->N + ra_slice_pos(&qs, i)];
        pairs += model_slice_pairs(band, &qs, pb->P > 1 ? &ks : NULL, s->M,
                                   ql, kl, ids, segs ? mk->kv_seg + b * s->M
                                                     : NULL);
    }
    return pairs;
}

/* ---- each rank's row and column of the pair matrix ------------------------ */

/* Batch b as the counts see it: the band and the padding lengths. */
typedef struct {
    ra_band band;
    int64_t ql, kl;
} batch_view;

static batch_view batch_of(const model_problem *pb, int64_t b)
{
    const model_masks *mk = pb->mk;
    return (batch_view){ra_band_of(pb->p, pb->s),
                        mk->q_lens ? mk->q_lens[b] : pb->s->N,
                        mk->kv_lens ? mk->kv_lens[b] : pb->s->M};
}

/* seen[k] for k < M: how many queries of batch b see key k (with
 * segments: a difference array over the queries' key ranges). */
static void keys_seen_segments(const model_problem *pb, int64_t b,
                               int64_t *seen)
{
    const ra_shape *s = pb->s;
    const model_masks *mk = pb->mk;
    const batch_view v = batch_of(pb, b);
    model_key_segs segs = {mk->kv_seg + b * s->M, s->M, 0, 0, -1};
    memset(seen, 0, sizeof(int64_t) * (size_t)(s->M + 1));
    for (int64_t qp = 0; qp < s->N && qp < v.ql; qp++) {
        int64_t first, last;
        model_query_keys(v.band, qp, v.kl, &segs, mk->q_seg[b * s->N + qp],
                         &first, &last);
        if (last >= first) {
            seen[first]++;
            seen[last + 1]--;
        }
    }
    for (int64_t k = 1; k <= s->M; k++)
        seen[k] += seen[k - 1];
}

/* How many queries of a batch see key k under the band alone: those at
 * positions [k - hi, k - lo] below q_len (ra_band_keys turned around). */
static int64_t key_seen(ra_band band, int64_t k, int64_t q_len,
                        int64_t kv_len)
{
    if (k >= kv_len)
        return 0;
    const int64_t a = k - band.hi > 0 ? k - band.hi : 0;
    const int64_t z = k - band.lo < q_len - 1 ? k - band.lo : q_len - 1;
    return z >= a ? z - a + 1 : 0;
}

/* kcol[r] += the pairs of batch b's queries with rank r's keys. */
static void kcol_add(const model_problem *pb, int64_t b, const int64_t *seen,
                     double *kcol)
{
    const ra_shape *s = pb->s;
    const batch_view v = batch_of(pb, b);
    for (int r = 0; r < pb->P; r++) {
        const ra_slice ks =
            ra_params_slice(pb->p, pb->p->exec.layout, s->M, r, pb->P);
        double n = 0;
        for (int64_t i = 0; i < ks.count; i++) {
            const int64_t k = ra_slice_pos(&ks, i);
            n += (double)(seen ? seen[k]
                               : key_seen(v.band, k, v.ql < s->N ? v.ql : s->N,
                                          v.kl));
        }
        kcol[r] += n;
    }
}

/* qrow[r] += the pairs of rank r's queries with every key (ids: scratch
 * of the largest query slice). */
static void qrow_add(const model_problem *pb, int r, int64_t *ids,
                     double *qrow)
{
    const ra_shape *s = pb->s;
    const model_masks *mk = pb->mk;
    const int segs = mk->q_seg && mk->kv_seg;
    const ra_band band = ra_band_of(pb->p, s);
    const ra_slice qs =
        ra_params_slice(pb->p, pb->p->exec.layout, s->N, r, pb->P);
    for (int64_t b = 0; b < s->B; b++) {
        for (int64_t i = 0; segs && i < qs.count; i++)
            ids[i] = mk->q_seg[b * s->N + ra_slice_pos(&qs, i)];
        qrow[r] += model_slice_pairs(
            band, &qs, NULL, s->M, mk->q_lens ? mk->q_lens[b] : s->N,
            mk->kv_lens ? mk->kv_lens[b] : s->M, ids,
            segs ? mk->kv_seg + b * s->M : NULL);
    }
}

int model_rows(const model_problem *pb, double *qrow, double *kcol)
{
    const ra_shape *s = pb->s;
    const int segs = pb->mk->q_seg && pb->mk->kv_seg;
    const int64_t nids =
        segs ? model_slice_most(pb->p, pb->p->exec.layout, s->N, pb->P) : 0;
    /* seen: M + 1 counts (segments only), then the ids */
    int64_t *seen = malloc(sizeof(int64_t) *
                           (size_t)((segs ? s->M + 1 : 0) + nids + 1));
    if (!seen)
        return -1;
    for (int r = 0; r < pb->P; r++)
        qrow_add(pb, r, seen + (segs ? s->M + 1 : 0), qrow);
    for (int64_t b = 0; b < s->B; b++) {
        if (segs)
            keys_seen_segments(pb, b, seen);
        kcol_add(pb, b, segs ? seen : NULL, kcol);
    }
    free(seen);
    return 0;
}

/* ---- the ring's busiest rank at each step --------------------------------- */

enum { MAX_COUNT_RUNS = 8 };

/* Ranks [r0, r1) whose slices hold at most c tokens. */
typedef struct {
    int r0, r1;
    double c;
} count_run;

/* The ranks in runs of equal slice count (at most MAX_COUNT_RUNS; more
 * become one run of the largest count, still a bound). */
static int count_runs(const ra_params *p, ra_layout lay, int64_t len, int P,
                      count_run *out)
{
    int n = 0;
    for (int r = 0; r < P; r++) {
        const double c = (double)ra_params_slice(p, lay, len, r, P).count;
        if (n > 0 && out[n - 1].c == c) {
            out[n - 1].r1 = r + 1;
            continue;
        }
        if (n == MAX_COUNT_RUNS) {
            out[0] = (count_run){0, P, (double)model_slice_most(p, lay, len, P)};
            return 1;
        }
        out[n++] = (count_run){r, r + 1, c};
    }
    return n;
}

/* Pairs of one query run and one key run, the bound first. */
typedef struct {
    count_run q, k;
    double bound; /* B times both counts: every pair visible */
} run_pair;

static int run_pair_desc(const void *a, const void *b)
{
    const double x = ((const run_pair *)a)->bound;
    const double y = ((const run_pair *)b)->bound;
    return (x < y) - (x > y);
}

/* Whether each run of the slices x[0] and x[1] holds as many tokens below
 * end (every run: one count per batch of lens, none without lens). */
static int lens_same(const ra_slice x[2], const int64_t *lens, int64_t B)
{
    for (int64_t b = 0; lens && b < B; b++)
        for (int i = 0; i < x[0].nruns; i++)
            if (run_count_in(&x[0].run[i], 0, lens[b] - 1) !=
                run_count_in(&x[1].run[i], 0, lens[b] - 1))
                return 0;
    return 1;
}

/* Whether every block (r, (r - t) mod P) for r in [a, z] holds the same
 * pairs (without segments, the only case that comes here), the ranks' run
 * lengths being the same throughout:
 * a pair of runs' pairs depend only on the tokens below the padding
 * lengths and the offset between them. A run's tokens below a length move
 * monotonically with r, so equal at a and z they are equal throughout:
 * striped runs then keep their counts and offsets (the ranks move
 * together); contiguous runs (contiguous, zigzag) move linearly, so each
 * run is then whole or gone in each batch, and a pair of whole runs is the
 * same throughout when its offset is, or when its offsets at both ends
 * show all pairs visible, or none. */
static int diag_flat(const model_problem *pb, int t, int a, int z)
{
    const model_masks *mk = pb->mk;
    const ra_layout lay = pb->p->exec.layout;
    const int P = pb->P;
    if (a == z)
        return 1;
    const ra_slice q[2] = {ra_params_slice(pb->p, lay, pb->s->N, a, P),
                           ra_params_slice(pb->p, lay, pb->s->N, z, P)};
    const ra_slice k[2] = {ra_params_slice(pb->p, lay, pb->s->M, (a - t + P) % P, P),
                           ra_params_slice(pb->p, lay, pb->s->M, (z - t + P) % P, P)};
    if (!lens_same(q, mk->q_lens, pb->s->B) ||
        !lens_same(k, mk->kv_lens, pb->s->B))
        return 0;
    if (lay == RA_LAYOUT_STRIPED)
        return 1;
    const ra_band band = ra_band_of(pb->p, pb->s);
    for (int i = 0; i < q[0].nruns; i++)
        for (int j = 0; j < k[0].nruns; j++) {
            const int64_t n = q[0].run[i].count, m = k[0].run[j].count;
            int cls[2];
            int64_t d[2];
            for (int e = 0; e < 2; e++) { /* keys before every query's
                                             band 1, after 3, inside 2 */
                d[e] = k[e].run[j].start - q[e].run[i].start;
                cls[e] = n == 0 || m == 0 ? 1
                         : d[e] + m - 1 < band.lo ? 1
                         : d[e] - (n - 1) > band.hi ? 3
                         : d[e] - (n - 1) >= band.lo && d[e] + m - 1 <= band.hi
                             ? 2 : 0;
            }
            if (cls[0] != cls[1] || (cls[0] == 0 && d[0] != d[1]))
                return 0;
        }
    return 1;
}

/* The busiest rank at step t among ranks [a, z] without a kink inside,
 * from the highest rank down: a range diag_flat finds flat costs one
 * block, another is halved (padding makes a few ranks differ, each found
 * in O(log P) halvings). Stops at bound. */
static double diag_piece(const model_problem *pb, int t, int a, int z,
                         double best, double bound, int64_t *ids)
{
    if (a > z || best >= bound)
        return best;
    if (diag_flat(pb, t, a, z)) {
        const double v = model_block_pairs(pb, z, (z - t + pb->P) % pb->P,
                                           ids);
        return v > best ? v : best;
    }
    const int mid = a + (z - a) / 2;
    best = diag_piece(pb, t, mid + 1, z, best, bound, ids);
    return diag_piece(pb, t, a, mid, best, bound, ids);
}

/* The busiest rank at step t among ranks [lo, hi], from the highest rank
 * down (below a causal diagonal, the high ranks' blocks are whole), in
 * pieces between the layout's kinks. Stops at bound. */
static double diag_scan(const model_problem *pb, int t, int lo, int hi,
                        double best, double bound, int64_t *ids)
{
    const int P = pb->P;
    const ra_band wt = ra_cut_band(pb->p);
    int cut[6],
        nc = ring_layout_kinks(pb->p->exec.layout, wt, pb->s->N, P, cut);
    int kk[3];
    const int nk = ring_layout_kinks(pb->p->exec.layout, wt, pb->s->M, P, kk);
    for (int i = 0; i < nk; i++) /* key rank kk[i]: rank kk[i] + t */
        cut[nc++] = (kk[i] + t) % P;
    for (int z = hi; z >= lo && best < bound;) {
        int a = lo; /* the piece [a, z]: no kink inside */
        for (int i = 0; i < nc; i++)
            a = cut[i] <= z && cut[i] > a ? cut[i] : a;
        best = diag_piece(pb, t, a, z, best, bound, ids);
        z = a - 1;
    }
    return best;
}

/* diag[t] of one step: the run pairs by falling bound, each scanned until
 * a block reaches it; a pair whose bound the best so far reaches ends it. */
static double diag_step(const model_problem *pb, int t, const run_pair *rp,
                        int npairs, int64_t *ids)
{
    const int P = pb->P;
    double best = 0;
    for (int i = 0; i < npairs && best < rp[i].bound; i++) {
        /* ranks r of run q whose (r - t) mod P lies in run k: r in
         * [k.r0 + t, k.r1 + t) mod P, at most two pieces */
        for (int wrap = 0; wrap < 2; wrap++) {
            const int a = rp[i].k.r0 + t - wrap * P;
            const int z = rp[i].k.r1 - 1 + t - wrap * P;
            const int lo = a > rp[i].q.r0 ? a : rp[i].q.r0;
            const int hi = z < rp[i].q.r1 - 1 ? z : rp[i].q.r1 - 1;
            best = diag_scan(pb, t, lo, hi, best, rp[i].bound, ids);
        }
    }
    return best;
}

/* diag[t] for the steps t <= last without segments: per step, the run
 * pairs by falling bound. */
static int diag_banded(const model_problem *pb, int last, double *diag)
{
    const ra_shape *s = pb->s;
    const int P = pb->P;
    count_run q[MAX_COUNT_RUNS], k[MAX_COUNT_RUNS];
    run_pair rp[MAX_COUNT_RUNS * MAX_COUNT_RUNS];
    const int nq = count_runs(pb->p, pb->p->exec.layout, s->N, P, q);
    const int nk = count_runs(pb->p, pb->p->exec.layout, s->M, P, k);
    for (int i = 0; i < nq * nk; i++)
        rp[i] = (run_pair){q[i / nk], k[i % nk],
                           (double)s->B * q[i / nk].c * k[i % nk].c};
    qsort(rp, (size_t)(nq * nk), sizeof *rp, run_pair_desc);
    int64_t *ids = malloc(
        sizeof(int64_t) *
        (size_t)(model_slice_most(pb->p, pb->p->exec.layout, s->N, P) + 1));
    if (!ids)
        return -1;
    for (int t = 0; t <= last; t++)
        diag[t] = diag_step(pb, t, rp, nq * nk, ids);
    free(ids);
    return 0;
}

int model_ring_diag(const model_problem *pb, double *diag)
{
    const ra_masks rm = {pb->mk->q_lens, pb->mk->kv_lens, NULL, NULL};
    const ring_plan pl = ring_plan_make(pb->s, pb->p, &rm, pb->P);
    const int last = ring_plan_last_step(&pl); /* later steps see nothing */
    const int rc = pb->mk->q_seg && pb->mk->kv_seg
                       ? model_diag_segments(pb, diag)
                       : diag_banded(pb, last, diag);
    for (int t = last + 1; t < pb->P; t++)
        diag[t] = 0.0;
    return rc;
}

/* One step of model_ring_schedule: st[r] becomes rank r's start of the
 * next step (nx: scratch, P). */
static void schedule_step(const model_problem *pb, int t, double pair_s,
                          double fixed, double x, int64_t *ids, double *st,
                          double *nx)
{
    const int P = pb->P;
    for (int r = 0; r < P; r++) {
        const double pairs =
            pair_s > 0 ? model_block_pairs(pb, r, (r - t + P) % P, ids) : 0.0;
        nx[r] = st[r] + fixed + pair_s * pairs;
        if (x > 0) { /* the receive from the left, the send to the right */
            const double left = st[(r - 1 + P) % P], right = st[(r + 1) % P];
            double posted = left > right ? left : right;
            posted = posted > st[r] ? posted : st[r];
            nx[r] = nx[r] > posted + x ? nx[r] : posted + x;
        }
    }
    memcpy(st, nx, sizeof(double) * (size_t)P);
}

int model_ring_schedule(const model_problem *pb, const double *diag,
                        double pair_s, const double *fixed, const double *x,
                        double max_blocks, double *makespan)
{
    const int P = pb->P;
    double blocks = 0;
    for (int t = 0; t < P; t++)
        blocks += diag[t] > 0 ? (double)P : 0.0;
    if (pb->mk->q_seg && pb->mk->kv_seg) /* block pairs scan the queries */
        blocks *=
            (double)model_slice_most(pb->p, pb->p->exec.layout, pb->s->N, P);
    if (blocks > max_blocks)
        return -1;
    double *st = calloc((size_t)(2 * P), sizeof(double));
    int64_t *ids = malloc(
        sizeof(int64_t) *
        (size_t)(model_slice_most(pb->p, pb->p->exec.layout, pb->s->N, P) + 1));
    if (!st || !ids) {
        free(st);
        free(ids);
        return -1;
    }
    for (int t = 0; t < P; t++)
        if (diag[t] > 0 || fixed[t] > 0 || x[t] > 0)
            schedule_step(pb, t, diag[t] > 0 ? pair_s : 0.0, fixed[t], x[t],
                          ids, st, st + P);
    *makespan = 0;
    for (int r = 0; r < P; r++)
        *makespan = st[r] > *makespan ? st[r] : *makespan;
    free(st);
    free(ids);
    return 0;
}

/* ---- the ring's bytes ------------------------------------------------------ */

/* Adds v to a[i] for i in [from, from + len) mod P (len <= P), through the
 * difference array a (P + 1 entries). */
static void cyclic_add(double *a, int P, int from, int len, double v)
{
    const int end = from + len;
    a[from] += v;
    if (end <= P) {
        a[end] -= v;
    } else {
        a[P] -= v;
        a[0] += v;
        a[end - P] -= v;
    }
}

/* Without a band every rank with a query below q_end needs the keys of a
 * block below kv_end, [0, kc): block src travels whole as long as a rank
 * ahead of it still has a query, umax(src) steps (the farthest such rank),
 * so its rank-to-rank sends are one range of ranks, added in O(1). */
static int sends_unbanded(const model_problem *pb, const ring_plan *pl,
                          int last, double row, double *sent, double *step)
{
    const int P = pb->P;
    int *prev = malloc(sizeof(int) * (size_t)(2 * P));
    double *acc = calloc((size_t)(2 * P + 2), sizeof(double));
    if (!prev || !acc) {
        free(prev);
        free(acc);
        return -1;
    }
    double *top = acc + P + 1; /* top[u]: the largest block sent u steps */
    for (int i = 0; i < 2 * P; i++) { /* prev[i]: last active rank <= i */
        const ra_slice qs = ra_band_slice(pl->layout, pl->cut, pl->N, i % P, P);
        const int active = qs.count > 0 && ra_slice_pos(&qs, 0) < pl->q_end;
        prev[i] = active ? i : i > 0 ? prev[i - 1] : -1;
    }
    for (int src = 0; src < P; src++) {
        const ra_slice ks = ra_band_slice(pl->layout, pl->cut, pl->M, src, P);
        const int64_t kc = slice_count_in(&ks, 0, pl->kv_end - 1);
        const int far = prev[src + P - 1] > src ? prev[src + P - 1] - src : 0;
        const int u = far < last ? far : last;
        const double b = (double)pb->s->B * (double)kc * row;
        if (u > 0 && kc > 0) {
            cyclic_add(acc, P, src, u, b);
            top[u] = b > top[u] ? b : top[u];
        }
    }
    for (int r = 0; r < P; r++) { /* the prefix sums: each rank's bytes */
        acc[r + 1] += acc[r];
        sent[r] += acc[r];
    }
    for (int t = last - 1; t >= 0; t--) { /* step t sends blocks of u > t */
        const double most = t + 2 <= last && top[t + 2] > top[t + 1]
                                ? top[t + 2] : top[t + 1];
        top[t + 1] = most;
        step[t] = most > step[t] ? most : step[t];
    }
    free(prev);
    free(acc);
    return 0;
}

/* Block src's bytes at steps [t1, t2] (v each, sent by rank src + t - 1
 * at step t - 1): into the ranks' difference array acc and top[t2] (a
 * block's bytes never grow with the step, so the steps' largest is a
 * running maximum from the last step down). */
static void sends_piece(int P, int src, int t1, int t2, double v,
                        double *acc, double *top)
{
    if (t1 > t2 || v <= 0)
        return;
    cyclic_add(acc, P, (src + t1 - 1) % P, t2 - t1 + 1, v);
    top[t2] = v > top[t2] ? v : top[t2];
}

/* One block's sends under a band, gathered from the last step down: the
 * steps (u, upto] hold hull (kc: the block's keys below kv_end). */
typedef struct {
    const ring_plan *pl;
    int src, upto;
    int64_t kc;
    ring_span hull;
    double per, *acc, *top;
} block_sends;

static int block_whole(const block_sends *bs)
{
    return bs->hull.a == 0 && bs->hull.b == bs->kc && bs->kc > 0;
}

/* Step u needs sp: when it is not empty, the steps above u make one piece
 * and the hull takes sp in. */
static void block_take(block_sends *bs, int u, ring_span sp)
{
    if (sp.a >= sp.b)
        return;
    sends_piece(bs->pl->P, bs->src, u + 1, bs->upto,
                bs->per * (double)(bs->hull.b - bs->hull.a), bs->acc,
                bs->top);
    bs->hull.a = bs->hull.a < bs->hull.b && bs->hull.a < sp.a ? bs->hull.a
                                                              : sp.a;
    bs->hull.b = bs->hull.b > sp.b ? bs->hull.b : sp.b;
    bs->upto = u;
}

/* Ranks [x, y] (steps beyond last left out), from y down, when each end
 * of the ranks' needs is monotone in the rank (so its extremes over the
 * range are at x or y): a range whose needs are all empty, or all inside
 * the hull, changes nothing (a step that needs only what the hull holds
 * only splits a piece of equal bytes), so the ranks that grow the hull
 * are found by halving, O(log P) each. */
static void sends_ranks(block_sends *bs, int x, int y)
{
    if (x > y || block_whole(bs))
        return;
    const ring_span lo = ring_plan_ends(bs->pl, x, bs->src);
    const ring_span hi = ring_plan_ends(bs->pl, y, bs->src);
    const int64_t amin = lo.a < hi.a ? lo.a : hi.a;
    const int64_t bmax = lo.b > hi.b ? lo.b : hi.b;
    if (amin >= bmax) /* a(d) >= amin >= bmax >= b(d): nothing */
        return;
    if (bs->hull.a < bs->hull.b && amin >= bs->hull.a && bmax <= bs->hull.b)
        return;
    if (x == y) {
        block_take(bs, (x - bs->src + bs->pl->P) % bs->pl->P, lo);
        return;
    }
    const int mid = x + (y - x) / 2;
    sends_ranks(bs, mid + 1, y);
    sends_ranks(bs, x, mid);
}

/* Striped and zigzag slices: steps last .. 1 visit the ranks behind src
 * (step P - src + d), then those ahead (step d - src), each from the
 * highest rank down; between the layout's kinks a rank's first query
 * position grows with the rank and its last one grows (striped, zigzag
 * with empty second chunks) or falls (zigzag). */
static void sends_kinked(block_sends *bs, int last)
{
    const int P = bs->pl->P, src = bs->src;
    const int ahead = last < P - 1 - src ? last : P - 1 - src;
    const int range[2][2] = {{0, last + src - P}, {src + 1, src + ahead}};
    for (int i = 0; i < 2; i++) {
        int piece[3][2];
        const int n = ring_plan_pieces(bs->pl, range[i][0], range[i][1], piece);
        for (int j = 0; j < n; j++)
            sends_ranks(bs, piece[j][0], piece[j][1]);
    }
}

/* Contiguous slices: the candidate steps one by one, farthest first. */
static void sends_scan(block_sends *bs, int last)
{
    int da, dz;
    ring_plan_candidates(bs->pl, bs->src, &da, &dz);
    for (int i = 0; !block_whole(bs); i++) {
        const int u = ring_plan_step_at(bs->pl, bs->src, da, dz, i);
        if (u < 1)
            break;
        if (u <= last)
            block_take(bs, u, ring_plan_need(bs->pl, (bs->src + u) % bs->pl->P,
                                             bs->src));
    }
}

/* Block src under a band: its hull grows, from the last step back, only
 * at the steps that need something, and stops growing once it holds every
 * key below kv_end; between those steps the bytes are one piece. */
static void sends_block(const ring_plan *pl, int src, int last, double per,
                        double *acc, double *top)
{
    const ra_slice ks = ra_band_slice(pl->layout, pl->cut, pl->M, src, pl->P);
    block_sends bs = {pl, src, last, slice_count_in(&ks, 0, pl->kv_end - 1),
                      {0, 0}, per, acc, top};
    if (!ring_layout_runs(pl->layout))
        sends_kinked(&bs, last);
    else
        sends_scan(&bs, last);
    sends_piece(pl->P, src, 1, bs.upto,
                per * (double)(bs.hull.b - bs.hull.a), acc, top);
}

int model_ring_sends(const model_problem *pb, double row, double *sent,
                     double *step)
{
    const int P = pb->P;
    const ra_masks rm = {pb->mk->q_lens, pb->mk->kv_lens, NULL, NULL};
    const ring_plan pl = ring_plan_make(pb->s, pb->p, &rm, P);
    const int last = ring_plan_last_step(&pl);
    if (pl.band.lo <= -RA_UNBOUNDED && pl.band.hi >= RA_UNBOUNDED)
        return sends_unbanded(pb, &pl, last, row, sent, step);
    double *acc = calloc((size_t)(2 * P + 2), sizeof(double));
    if (!acc)
        return -1;
    double *top = acc + P + 1;
    for (int src = 0; src < P; src++)
        sends_block(&pl, src, last, (double)pb->s->B * row, acc, top);
    for (int r = 0; r < P; r++) {
        acc[r + 1] += acc[r];
        sent[r] += acc[r];
    }
    for (int t = last; t >= 1; t--) {
        top[t] = t < last && top[t + 1] > top[t] ? top[t + 1] : top[t];
        step[t - 1] = top[t] > step[t - 1] ? top[t] : step[t - 1];
    }
    free(acc);
    return 0;
}
