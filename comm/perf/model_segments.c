/* model_segments.c: the ring's busiest rank at each step with packed
 * segments (model_ring_diag's case where a block's pairs have no closed
 * form).
 *
 * Rank d's queries see, key by key, a step function: cover(j), how many
 * of its query rows (over the batches) see key j, changes only where one
 * of their key ranges starts or ends. A block (d, src) sums cover over
 * src's keys, so it is the same for every src between the ranks that hold
 * such an end (or a kink of the key axis, where the slices' lengths
 * change): rank d costs O(n log n) for its n query rows, whatever P, in
 * all O(B N log N + P). The steps' maxima gather in a tree over the steps,
 * one range of ranks at a time. */
#include <stdlib.h>

#include "model_steps.h"
#include "plan.h"

/* ---- the steps' running maxima ------------------------------------------- */

/* A tree over size leaves (a power of two >= P): every step under node i
 * is at least node[i] (2 size entries). */
typedef struct {
    int P, size;
    double *node;
} step_max;

/* Raises steps [a, z] (0 <= a <= z < P) to at least v. */
static void step_max_raise(step_max *sm, int a, int z, double v)
{
    for (a += sm->size, z += sm->size + 1; a < z; a /= 2, z /= 2) {
        if (a & 1) {
            sm->node[a] = v > sm->node[a] ? v : sm->node[a];
            a++;
        }
        if (z & 1) {
            z--;
            sm->node[z] = v > sm->node[z] ? v : sm->node[z];
        }
    }
}

/* The blocks (d, src) for src in [r1, r2] hold v: they are the ring's at
 * steps (d - src) mod P, at most two ranges of steps. */
static void step_max_blocks(step_max *sm, int d, int r1, int r2, double v)
{
    const int P = sm->P;
    if (v <= 0 || r1 > r2)
        return;
    if (r2 - r1 + 1 >= P) {
        step_max_raise(sm, 0, P - 1, v);
        return;
    }
    const int a = ((d - r2) % P + P) % P, z = ((d - r1) % P + P) % P;
    if (a <= z) {
        step_max_raise(sm, a, z, v);
    } else {
        step_max_raise(sm, a, P - 1, v);
        step_max_raise(sm, 0, z, v);
    }
}

/* ---- one rank's cover ---------------------------------------------------- */

/* The key ranges of one rank's query rows: starts st and ends en (one
 * past), each sorted, n of each; cover(j) = #(st <= j) - #(en <= j). With
 * contiguous runs, sst and sen (n + 1) hold their prefix sums. */
typedef struct {
    int64_t n;
    int64_t *st, *en, *sst, *sen;
} key_cover;

static int i64_cmp(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Fills c with the non-empty key ranges of rank d's query rows in every
 * batch (those below q_lens; the band, kv_lens and the query's segment,
 * as model_block_pairs counts them), sorted. */
static void cover_make(const model_problem *pb, int d, key_cover *c)
{
    const ra_shape *s = pb->s;
    const model_masks *mk = pb->mk;
    const ra_band band = ra_band_of(pb->p, s);
    const ra_slice qs =
        ra_params_slice(pb->p, pb->p->exec.layout, s->N, d, pb->P);
    c->n = 0;
    for (int64_t b = 0; b < s->B; b++) {
        const int64_t ql = mk->q_lens ? mk->q_lens[b] : s->N;
        const int64_t kl = mk->kv_lens ? mk->kv_lens[b] : s->M;
        model_key_segs segs = {mk->kv_seg + b * s->M, s->M, 0, 0, -1};
        for (int64_t i = 0; i < qs.count; i++) {
            const int64_t qp = ra_slice_pos(&qs, i);
            int64_t first, last;
            if (qp >= ql)
                continue;
            model_query_keys(band, qp, kl, &segs, mk->q_seg[b * s->N + qp],
                             &first, &last);
            if (last >= first) {
                c->st[c->n] = first;
                c->en[c->n++] = last + 1;
            }
        }
    }
    qsort(c->st, (size_t)c->n, sizeof *c->st, i64_cmp);
    qsort(c->en, (size_t)c->n, sizeof *c->en, i64_cmp);
}

/* The sum of cover(j) over the keys j < x: each range that starts at
 * s < x adds x - s, each that ends at e < x takes x - e back. */
static int64_t cover_below(const key_cover *c, int64_t x)
{
    const int64_t i = ra_lower_bound(c->st, c->n, x);
    const int64_t k = ra_lower_bound(c->en, c->n, x);
    return (x * i - c->sst[i]) - (x * k - c->sen[k]);
}

/* ---- contiguous, balanced and zigzag slices ------------------------------ */

/* The chunk of `parts` near-equal ones (ra_shard_range) holding j. */
static int64_t chunk_of(int64_t len, int64_t parts, int64_t j)
{
    const int64_t base = len / parts, e = len % parts;
    return j < e * (base + 1) ? j / (base + 1)
                              : e + (j - e * (base + 1)) / base;
}

/* The rank whose slice holds key j (0 <= j < M): chunk c of P (contiguous)
 * or 2P (zigzag), the first M mod parts one key longer; balanced: the
 * first or last rank's run, or a chunk of P - 2 between them. */
static int64_t key_owner(const model_problem *pb, int64_t M, int P,
                         int64_t j)
{
    const ra_layout lay = pb->p->exec.layout;
    if (lay == RA_LAYOUT_BALANCED && P >= 2) {
        const ra_band wt = ra_cut_band(pb->p);
        const int64_t b1 = ra_balanced_start(wt, M, 1, P);
        const int64_t bz = ra_balanced_start(wt, M, P - 1, P);
        return j < b1 ? 0 : j >= bz ? P - 1 : 1 + chunk_of(bz - b1, P - 2,
                                                           j - b1);
    }
    const int64_t parts = lay == RA_LAYOUT_ZIGZAG ? 2 * (int64_t)P : P;
    const int64_t c = chunk_of(M, parts, j);
    return c < P ? c : parts - 1 - c;
}

/* Block (d, src): cover summed over src's runs. */
static double block_runs(const model_problem *pb, const key_cover *c, int src)
{
    const ra_slice ks =
        ra_params_slice(pb->p, pb->p->exec.layout, pb->s->M, src, pb->P);
    int64_t pairs = 0;
    for (int i = 0; i < ks.nruns; i++)
        pairs += cover_below(c, ks.run[i].start + ks.run[i].count) -
                 cover_below(c, ks.run[i].start);
    return (double)pairs;
}

/* Rank d's blocks: rank 0, the kinks and the ranks holding a range's end
 * (mark, 2n + 4 entries) one by one; between two of them every rank's
 * runs lie where cover is constant and are as long as the first's, so
 * that rank's block stands for all. */
static void blocks_runs(const model_problem *pb, key_cover *c, int d,
                        int64_t *mark, step_max *sm)
{
    const int P = pb->P;
    const int64_t M = pb->s->M;
    int kink[3];
    int64_t n = 0;
    mark[n++] = 0;
    for (int i = ring_layout_kinks(pb->p->exec.layout, ra_cut_band(pb->p), M, P,
                                   kink);
         i > 0; i--)
        mark[n++] = kink[i - 1];
    c->sst[0] = c->sen[0] = 0;
    for (int64_t i = 0; i < c->n; i++) {
        c->sst[i + 1] = c->sst[i] + c->st[i];
        c->sen[i + 1] = c->sen[i] + c->en[i];
        mark[n++] = key_owner(pb, M, P, c->st[i]);
        if (c->en[i] < M)
            mark[n++] = key_owner(pb, M, P, c->en[i]);
    }
    qsort(mark, (size_t)n, sizeof *mark, i64_cmp);
    for (int64_t i = 0; i < n; i++) {
        if (i > 0 && mark[i] == mark[i - 1])
            continue;
        const int r = (int)mark[i];
        int64_t z = i + 1; /* the next mark above r, or P */
        while (z < n && mark[z] == r)
            z++;
        const int end = z < n ? (int)mark[z] : P;
        step_max_blocks(sm, d, r, r, block_runs(pb, c, r));
        if (r + 1 < end)
            step_max_blocks(sm, d, r + 1, end - 1, block_runs(pb, c, r + 1));
    }
}

/* ---- striped slices ------------------------------------------------------ */

/* Striped slices: rank src holds the keys j = src mod P, so a stretch
 * [x, y) where cover is v adds v floor((y - x) / P) to every block and v
 * to the (y - x) mod P ranks from x mod P on, cyclically: *all takes the
 * first, ev (rank, change) pairs the second (two pairs; a range that
 * wraps adds v to all and takes it back from the ranks it misses). */
static int64_t stretch_add(int P, int64_t x, int64_t y, int64_t v,
                           int64_t *all, int64_t *ev)
{
    const int64_t rem = (y - x) % P, a = x % P;
    *all += v * ((y - x) / P);
    if (rem == 0)
        return 0;
    if (a + rem <= P) {
        ev[0] = a, ev[1] = v, ev[2] = a + rem, ev[3] = -v;
    } else {
        *all += v;
        ev[0] = a + rem - P, ev[1] = -v, ev[2] = a, ev[3] = v;
    }
    return 2;
}

/* Rank d's blocks: the stretches of constant cover (the starts and ends
 * merged) become rank events (ev: 8n entries), swept by rank. */
static void blocks_striped(const model_problem *pb, const key_cover *c, int d,
                           int64_t *ev, step_max *sm)
{
    const int P = pb->P;
    int64_t all = 0, ne = 0, cov = 0, x = 0, i = 0, k = 0;
    while (k < c->n) { /* every start lies below its end */
        const int64_t y = i < c->n && c->st[i] <= c->en[k] ? c->st[i]
                                                           : c->en[k];
        if (cov > 0 && y > x)
            ne += stretch_add(P, x, y, cov, &all, ev + 2 * ne);
        for (; i < c->n && c->st[i] == y; i++)
            cov++;
        for (; k < c->n && c->en[k] == y; k++)
            cov--;
        x = y;
    }
    qsort(ev, (size_t)ne, 2 * sizeof *ev, i64_cmp); /* by rank */
    int64_t r = 0, v = all;
    for (int64_t e = 0; e < ne;) {
        const int64_t at = ev[2 * e];
        step_max_blocks(sm, d, (int)r, (int)at - 1, (double)v);
        for (; e < ne && ev[2 * e] == at; e++)
            v += ev[2 * e + 1];
        r = at;
    }
    step_max_blocks(sm, d, (int)r, P - 1, (double)v);
}

/* ---- every rank ---------------------------------------------------------- */

/* Every rank's blocks into sm, then diag[t]: buf holds key_cover's four
 * arrays (n + 1 each), then the marks or events (8n + 4). */
static void diag_fill(const model_problem *pb, int64_t *buf, int64_t n,
                      step_max *sm, double *diag)
{
    key_cover c = {0, buf, buf + n + 1, buf + 2 * (n + 1), buf + 3 * (n + 1)};
    int64_t *work = buf + 4 * (n + 1);
    for (int d = 0; d < pb->P; d++) {
        cover_make(pb, d, &c);
        if (pb->p->exec.layout == RA_LAYOUT_STRIPED)
            blocks_striped(pb, &c, d, work, sm);
        else
            blocks_runs(pb, &c, d, work, sm);
    }
    double *node = sm->node;
    for (int i = 1; i < sm->size; i++) { /* each bound down to the leaves */
        node[2 * i] = node[i] > node[2 * i] ? node[i] : node[2 * i];
        node[2 * i + 1] = node[i] > node[2 * i + 1] ? node[i] : node[2 * i + 1];
    }
    for (int t = 0; t < pb->P; t++)
        diag[t] = node[sm->size + t];
}

int model_diag_segments(const model_problem *pb, double *diag)
{
    const int P = pb->P;
    const int64_t n =
        pb->s->B * model_slice_most(pb->p, pb->p->exec.layout, pb->s->N, P);
    int size = 1;
    while (size < P)
        size *= 2;
    int64_t *buf = malloc(sizeof(int64_t) * (size_t)(12 * n + 8));
    step_max sm = {P, size, calloc((size_t)(2 * size), sizeof(double))};
    const int ok = buf && sm.node;
    if (ok)
        diag_fill(pb, buf, n, &sm, diag);
    free(buf);
    free(sm.node);
    return ok ? 0 : -1;
}
