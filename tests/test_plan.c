/* test_plan.c: the ring plan (comm/plan.h) against a brute-force count.
 *
 * For every layout, P = 1..4, causal or not, windows of several spans and
 * random padding lengths, on small shapes (N and M below 20, unequal too),
 * each (query, key) pair is tested with the visibility rule written out
 * pair by pair. The plan must keep every needed key (no rank misses a key
 * it may see); and against the brute force of its own model (the largest
 * lens; a rank's queries as one range of positions, exact for contiguous
 * slices) its held ranges must be tight, its skipped hops exactly those
 * nobody needs, and its sent key rows exactly those the ranks after the
 * sender need.
 *
 * Then the performance model's counts that pair ranks with ranks
 * (comm/perf/model_steps.h), computed without a loop over every pair, against
 * those loops on random problems (P up to 64, every layout, causal,
 * windows, padding, packed segments): each rank's row and column of the
 * pair matrix, the ring's busiest rank per step, the ring's bytes per rank
 * and per step, the largest slice, the plan's last step.
 *
 * And the model's own table of the strategies' costs (comm/perf/model.c)
 * has a row for every row of the strategy table: each strategy is
 * predicted, none refused for want of a cost. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "model.h"
#include "model_steps.h"
#include "plan.h"
#include "plan_run.h"

enum { MAXB = 3, MAXLEN = 20 };

/* One configuration of the sweep. */
typedef struct {
    ra_shape s;
    ra_params p;
    int64_t q_lens[MAXB], kv_lens[MAXB];
    int lens;
    int P;
} plan_case;

/* Whether query position i sees key position j in some batch, the rules
 * written out one pair at a time (ringattn.h's conventions). */
static int pair_visible(const plan_case *c, int64_t i, int64_t j)
{
    const ra_params *p = &c->p;
    const int64_t diag = c->s.M - c->s.N, a = i + diag;
    if (p->num.causal && j > a)
        return 0;
    if (p->num.window &&
        (j < a - p->num.window_left || j > a + p->num.window_right))
        return 0;
    for (int64_t b = 0; b < c->s.B; b++)
        if (!c->lens || (i < c->q_lens[b] && j < c->kv_lens[b]))
            return 1;
    return 0;
}

/* need[k] = 1 when some query of rank d sees local key k of block src;
 * returns how many. With hull set, the queries are every position from
 * rank d's first to its last (the plan's model: a block's rows are kept as
 * one range, so gaps in a zigzag or striped slice count as queries). */
static int64_t brute_need(const plan_case *c, ra_layout lay, int d, int src,
                          int hull, int *need)
{
    const ra_slice qs = ra_params_slice(&c->p, lay, c->s.N, d, c->P);
    const ra_slice ks = ra_params_slice(&c->p, lay, c->s.M, src, c->P);
    const int64_t first = qs.count ? ra_slice_pos(&qs, 0) : 0;
    const int64_t span = qs.count ? ra_slice_pos(&qs, qs.count - 1) - first + 1
                                  : 0;
    int64_t count = 0;
    for (int64_t k = 0; k < ks.count; k++) {
        need[k] = 0;
        for (int64_t i = 0; i < (hull ? span : qs.count) && !need[k]; i++)
            need[k] = pair_visible(c, hull ? first + i : ra_slice_pos(&qs, i),
                                   ra_slice_pos(&ks, k));
        count += need[k];
    }
    return count;
}

/* The plan's model keeps only the largest lens: brute force on a case
 * whose every batch has them gives the keys the plan must match exactly. */
static plan_case widest(const plan_case *c)
{
    plan_case w = *c;
    int64_t qmax = 0, kmax = 0;
    for (int64_t b = 0; b < c->s.B; b++) {
        qmax = c->q_lens[b] > qmax ? c->q_lens[b] : qmax;
        kmax = c->kv_lens[b] > kmax ? c->kv_lens[b] : kmax;
    }
    for (int64_t b = 0; b < c->s.B; b++) {
        w.q_lens[b] = qmax;
        w.kv_lens[b] = kmax;
    }
    return w;
}

/* The hull of the keys that ranks src + t .. src + last need: [*a, *z). */
static void brute_hull(const plan_case *c, ra_layout lay, int src, int t,
                       int last, int64_t *a, int64_t *z)
{
    int need[MAXLEN];
    *a = MAXLEN;
    *z = 0;
    for (int u = t; u <= last; u++) {
        const int64_t m = brute_need(c, lay, (src + u) % c->P, src, 1, need);
        for (int64_t k = 0; m && k < MAXLEN; k++)
            if (k < ra_params_slice(&c->p, lay, c->s.M, src, c->P).count &&
                need[k]) {
                *a = k < *a ? k : *a;
                *z = k + 1 > *z ? k + 1 : *z;
            }
    }
    if (*a >= *z)
        *a = *z = 0;
}

/* Checks one case: the plan keeps every key a query sees, and matches the
 * brute force of its own model (largest lens, each rank's queries as one
 * range of positions) exactly; returns the number of key rows sent. For
 * contiguous slices that model is exact: no row is sent that nobody
 * needs. */
static int64_t check_case(const plan_case *c)
{
    const ra_masks mk = {c->lens ? c->q_lens : NULL,
                         c->lens ? c->kv_lens : NULL, NULL, NULL};
    const ring_plan pl = ring_plan_make(&c->s, &c->p, &mk, c->P);
    const ra_layout lay = ra_params_layout(&c->p, 0);
    const plan_case w = widest(c);
    const int last = ring_plan_last_step(&pl);
    int need[MAXLEN], brute_last = 0;
    int64_t sent = 0, brute_sent = 0;
    assert_int_equal(pl.layout, lay);
    for (int src = 0; src < c->P; src++) {
        for (int u = 0; u < c->P; u++) {
            const int d = (src + u) % c->P;
            const ring_span sp = ring_plan_need(&pl, d, src);
            /* every key that some batch's query may see is inside */
            if (brute_need(c, lay, d, src, 0, need) > 0)
                for (int64_t k = 0; k < MAXLEN; k++)
                    if (k < ra_params_slice(&c->p, lay, c->s.M, src,
                                            c->P).count &&
                        need[k])
                        assert_true(sp.a <= k && k < sp.b);
            /* and the range is the plan model's hull exactly */
            int64_t a, z;
            brute_hull(&w, lay, src, u, u, &a, &z);
            assert_int_equal(sp.a, a);
            assert_int_equal(sp.b, z);
            if (u > 0 && z > a)
                brute_last = u > brute_last ? u : brute_last;
        }
        for (int t = 0; t <= last; t++) {
            const ring_span held = ring_plan_held(&pl, src, t, last);
            int64_t a, z;
            brute_hull(&w, lay, src, t, last, &a, &z);
            assert_int_equal(held.a, a);
            assert_int_equal(held.b, z);
            if (t < last) { /* the rows sent on to the next rank */
                const ring_span out = ring_plan_held(&pl, src, t + 1, last);
                brute_hull(&w, lay, src, t + 1, last, &a, &z);
                sent += out.b - out.a;
                brute_sent += z - a;
                assert_true(out.a == out.b ||
                            (out.a >= held.a && out.b <= held.b));
            }
        }
    }
    assert_int_equal(last, brute_last); /* hops skipped: exactly the unneeded */
    assert_int_equal(sent, brute_sent);
    return sent;
}

static void fill_lens(plan_case *c, uint64_t seed)
{
    ra_random_lens(seed, RA_STREAM_Q_LENS, c->s.B, c->s.N, c->q_lens);
    ra_random_lens(seed, RA_STREAM_KV_LENS, c->s.B, c->s.M, c->kv_lens);
}

/* The sweep: layouts x P x causal x windows x lens x shapes. */
static void test_plan_brute_force(void **state)
{
    (void)state;
    const int64_t shapes[][2] = {{13, 13}, {7, 13}, {13, 5}, {1, 1}, {16, 16},
                                 {4, 19}};
    const int64_t windows[][2] = {{-1, -1}, {0, 0}, {2, 1}, {5, 0}, {0, 3}};
    const ra_layout layouts[] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                                 RA_LAYOUT_STRIPED, RA_LAYOUT_BALANCED};
    int64_t cases = 0, skipped_hops = 0, rows = 0;
    for (size_t li = 0; li < 4; li++)
        for (int P = 1; P <= 4; P++)
            for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
                for (int causal = 0; causal < 2; causal++)
                    for (size_t wi = 0; wi < 5; wi++)
                        for (int lens = 0; lens < 2; lens++) {
                            plan_case c = {.P = P, .lens = lens};
                            c.s = (ra_shape){2, shapes[si][0], shapes[si][1],
                                             1, 1, 4, 4, 0};
                            ra_params_default(&c.p);
                            c.p.exec.layout = layouts[li];
                            c.p.num.causal = causal;
                            c.p.num.window = windows[wi][0] >= 0;
                            c.p.num.window_left =
                                c.p.num.window ? windows[wi][0] : 0;
                            c.p.num.window_right =
                                c.p.num.window ? windows[wi][1] : 0;
                            if (lens)
                                fill_lens(&c, (uint64_t)(cases + 1));
                            rows += check_case(&c);
                            const ra_masks mk = {lens ? c.q_lens : NULL,
                                                 lens ? c.kv_lens : NULL,
                                                 NULL, NULL};
                            const ring_plan pl = ring_plan_make(&c.s, &c.p,
                                                                &mk, P);
                            skipped_hops += P - 1 - ring_plan_last_step(&pl);
                            cases++;
                        }
    printf("# %lld cases: %lld hops skipped, %lld key rows sent in all\n",
           (long long)cases, (long long)skipped_hops, (long long)rows);
    assert_true(skipped_hops > 0); /* the windows do skip hops */
}

/* Without masks every rank needs every block whole: P - 1 hops, each block
 * sent whole P - 1 times. */
static void test_plan_unmasked(void **state)
{
    (void)state;
    for (int P = 1; P <= 4; P++) {
        plan_case c = {.P = P};
        c.s = (ra_shape){1, 11, 9, 1, 1, 4, 4, 0};
        ra_params_default(&c.p);
        c.p.exec.layout = RA_LAYOUT_CONTIGUOUS;
        const ring_plan pl = ring_plan_make(&c.s, &c.p, NULL, P);
        assert_int_equal(ring_plan_last_step(&pl), P - 1);
        for (int src = 0; src < P; src++) {
            const int64_t m =
                ra_params_slice(&c.p, pl.layout, c.s.M, src, P).count;
            for (int t = 0; t < P; t++) {
                const ring_span h = ring_plan_held(&pl, src, t, P - 1);
                assert_int_equal(h.b - h.a, m);
            }
        }
        assert_int_equal(check_case(&c), (int64_t)(P - 1) * c.s.M);
    }
}

/* ---- the model's counts against loops over every pair of ranks ------------ */

enum { MODEL_CASES = 400, MODEL_MAXB = 3, MODEL_MAXLEN = 160 };

/* One random problem: its shape, params, masks and P. */
typedef struct {
    ra_shape s;
    ra_params p;
    int64_t q_lens[MODEL_MAXB], kv_lens[MODEL_MAXB];
    int64_t q_seg[MODEL_MAXB * MODEL_MAXLEN], kv_seg[MODEL_MAXB * MODEL_MAXLEN];
    model_masks mk;
    model_problem pb;
} model_case;

static int64_t pick(uint64_t seed, uint64_t i, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(ra_random_u64(seed, 77, i) % (uint64_t)(hi - lo + 1));
}

static void model_case_make(model_case *c, uint64_t seed)
{
    const ra_layout lays[] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                              RA_LAYOUT_STRIPED, RA_LAYOUT_BALANCED};
    memset(c, 0, sizeof *c);
    c->s = (ra_shape){pick(seed, 0, 1, MODEL_MAXB), pick(seed, 1, 1, MODEL_MAXLEN),
                      pick(seed, 2, 1, MODEL_MAXLEN), 1, 1, 4, 4, 0};
    if (pick(seed, 3, 0, 2) == 0) /* self-attention, the common case */
        c->s.M = c->s.N;
    ra_params_default(&c->p);
    c->p.exec.layout = lays[pick(seed, 4, 0, 3)];
    c->p.num.causal = (int)pick(seed, 5, 0, 1);
    c->p.num.window = pick(seed, 6, 0, 2) == 0;
    c->p.num.window_left = c->p.num.window ? pick(seed, 7, 0, 40) : 0;
    c->p.num.window_right = c->p.num.window ? pick(seed, 8, 0, 10) : 0;
    const int64_t masks = pick(seed, 9, 0, 3); /* none, lens, segments, both */
    if (masks & 1) {
        ra_random_lens(seed, RA_STREAM_Q_LENS, c->s.B, c->s.N, c->q_lens);
        ra_random_lens(seed, RA_STREAM_KV_LENS, c->s.B, c->s.M, c->kv_lens);
        c->mk.q_lens = c->q_lens;
        c->mk.kv_lens = c->kv_lens;
    }
    if (masks & 2) {
        const ra_slice qall = {1, {{0, c->s.N, 1}}, c->s.N};
        const ra_slice kall = {1, {{0, c->s.M, 1}}, c->s.M};
        const int64_t avg = pick(seed, 10, 1, 30);
        ra_random_segments(seed, RA_STREAM_Q_SEGMENTS, c->s.B, c->s.N, avg,
                           &qall, c->q_seg);
        ra_random_segments(seed, RA_STREAM_Q_SEGMENTS, c->s.B, c->s.M, avg,
                           &kall, c->kv_seg);
        c->mk.q_seg = c->q_seg;
        c->mk.kv_seg = c->kv_seg;
    }
    c->pb = (model_problem){&c->s, &c->p, &c->mk, (int)pick(seed, 11, 1, 64)};
}

/* The pair matrix (P x P) from model_block_pairs, one block at a time. */
static double *pair_matrix(const model_problem *pb)
{
    const int P = pb->P;
    double *pm = calloc((size_t)P * (size_t)P, sizeof(double));
    int64_t *ids = malloc(sizeof(int64_t) * MODEL_MAXLEN);
    assert_non_null(pm);
    assert_non_null(ids);
    for (int d = 0; d < P; d++)
        for (int src = 0; src < P; src++)
            pm[d * P + src] = model_block_pairs(pb, d, src, ids);
    free(ids);
    return pm;
}

/* The ring's sends as ring_pass.c makes them: at step t < last, rank r
 * sends ring_plan_held(block r - t, step t + 1). */
static void sends_by_steps(const model_problem *pb, double row, double *sent,
                           double *step)
{
    const int P = pb->P;
    const ra_masks rm = {pb->mk->q_lens, pb->mk->kv_lens, NULL, NULL};
    const ring_plan pl = ring_plan_make(pb->s, pb->p, &rm, P);
    const int last = ring_plan_last_step(&pl);
    for (int t = 0; t < last; t++)
        for (int r = 0; r < P; r++) {
            const ring_span out = ring_plan_held(&pl, (r - t + P) % P, t + 1,
                                                 last);
            const double b = (double)pb->s->B * (double)(out.b - out.a) * row;
            sent[r] += b;
            step[t] = b > step[t] ? b : step[t];
        }
}

/* The last step anybody needs, every block at every step asked. */
static int last_step_by_steps(const ring_plan *pl)
{
    int last = 0;
    for (int src = 0; src < pl->P; src++)
        for (int u = 1; u < pl->P; u++) {
            const ring_span sp = ring_plan_need(pl, (src + u) % pl->P, src);
            last = sp.a < sp.b && u > last ? u : last;
        }
    return last;
}

/* The ring's schedule (model_ring_schedule) against the recurrence over
 * the pair matrix pm, with transfers of x_unit times 1-3 at every step
 * but the last and a fixed cost on every step after the first: starts
 * S(r, t + 1) =
 * max(S(r, t) + w(r, t), max(S(r, t), S(r -+ 1, t)) + x(t)); then the
 * bounds it must lie in, and at P <= 2 its closed form. */
static void check_schedule(const model_problem *pb, const double *pm,
                           const double *diag, double x_unit)
{
    const int P = pb->P;
    double *v = calloc((size_t)(5 * P), sizeof(double));
    assert_non_null(v);
    double *x = v, *fixed = v + P, *st = v + 2 * P, *nx = v + 3 * P,
           *tot = v + 4 * P;
    const double pair_s = 0.5;
    double upper = 0, got = 0;
    for (int t = 0; t < P; t++) {
        x[t] = t + 1 < P ? x_unit * (double)(1 + t % 3) : 0.0;
        fixed[t] = t > 0 ? 0.25 : 0.0;
    }
    for (int t = 0; t < P; t++) {
        double most = 0;
        for (int r = 0; r < P; r++) {
            const double w = pair_s * pm[r * P + (r - t + P) % P] + fixed[t];
            const double l = st[(r - 1 + P) % P], rt = st[(r + 1) % P];
            double e = st[r] + w;
            if (x[t] > 0)
                e = fmax(e, fmax(fmax(l, st[r]), fmax(rt, st[r])) + x[t]);
            nx[r] = e;
            tot[r] += w;
            most = fmax(most, w);
        }
        memcpy(st, nx, sizeof(double) * (size_t)P);
        upper += most + x[t];
    }
    double want = 0, own = 0;
    for (int r = 0; r < P; r++) {
        want = fmax(want, st[r]);
        own = fmax(own, tot[r]);
    }
    double alone = 0, none[64] = {0}; /* without transfers */
    assert_true(P <= 64);
    assert_int_equal(model_ring_schedule(pb, diag, pair_s, fixed, none,
                                         1e300, &alone), 0);
    assert_int_equal(model_ring_schedule(pb, diag, pair_s, fixed, x, 1e300,
                                         &got), 0);
    assert_true(fabs(alone - own) <= 1e-9 * (1.0 + own));
    assert_true(fabs(got - want) <= 1e-9 * (1.0 + want));
    assert_true(got >= own - 1e-9 * (1.0 + own)); /* the busiest rank's work */
    assert_true(got <= upper + 1e-9 * (1.0 + upper)); /* steps in lockstep */
    if (P == 2) { /* the other rank's block is on hand from the start */
        double close = 0;
        for (int r = 0; r < 2; r++)
            close = fmax(close, fmax(pair_s * pm[r * 2 + r], x[0]) +
                                    pair_s * pm[r * 2 + 1 - r] + fixed[1]);
        assert_true(fabs(got - close) <= 1e-9 * (1.0 + close));
    }
    if (x_unit == 0) /* without transfers no rank waits */
        assert_true(fabs(got - own) <= 1e-9 * (1.0 + own));
    free(v);
}

/* One problem: every count against its loop, exactly. */
static void check_model_case(const model_case *c)
{
    const model_problem *pb = &c->pb;
    const int P = pb->P;
    const ra_masks rm = {c->mk.q_lens, c->mk.kv_lens, NULL, NULL};
    const ring_plan pl = ring_plan_make(&c->s, &c->p, &rm, P);
    assert_int_equal(ring_plan_last_step(&pl), last_step_by_steps(&pl));
    double *pm = pair_matrix(pb);
    double *v = calloc((size_t)(9 * P), sizeof(double));
    assert_non_null(v);
    double *qrow = v, *kcol = v + P, *diag = v + 2 * P, *sent = v + 3 * P,
           *step = v + 4 * P, *bq = v + 5 * P, *bk = v + 6 * P,
           *bsent = v + 7 * P, *bstep = v + 8 * P;
    assert_int_equal(model_rows(pb, qrow, kcol), 0);
    assert_int_equal(model_ring_diag(pb, diag), 0);
    assert_int_equal(model_ring_sends(pb, 12.0, sent, step), 0);
    sends_by_steps(pb, 12.0, bsent, bstep);
    for (int t = 0; t < P; t++) {
        double most = 0;
        for (int r = 0; r < P; r++) {
            most = fmax(most, pm[r * P + (r - t + P) % P]);
            bq[t] += pm[t * P + r];
            bk[t] += pm[r * P + t];
        }
        assert_true(diag[t] == most);
        assert_true(qrow[t] == bq[t] && kcol[t] == bk[t]);
        assert_true(sent[t] == bsent[t] && step[t] == bstep[t]);
    }
    for (int len = 0; len <= 2; len++) {
        const int64_t n = len == 0 ? c->s.N : len == 1 ? c->s.M : P - 1;
        int64_t most = 0;
        for (int r = 0; r < P; r++)
            most =
                fmax(most,
                     ra_params_slice(&c->p, c->p.exec.layout, n, r, P).count);
        assert_int_equal(model_slice_most(&c->p, c->p.exec.layout, n, P), most);
    }
    check_schedule(pb, pm, diag, 0.0);
    check_schedule(pb, pm, diag, 3.0);
    free(pm);
    free(v);
}

static void test_model_counts(void **state)
{
    (void)state;
    model_case *c = malloc(sizeof *c);
    assert_non_null(c);
    int64_t masked = 0, sent = 0;
    for (uint64_t seed = 1; seed <= MODEL_CASES; seed++) {
        model_case_make(c, seed);
        check_model_case(c);
        masked +=
            c->p.num.causal || c->p.num.window || c->mk.q_lens || c->mk.q_seg;
        sent += c->pb.P > 1;
    }
    printf("# %d random problems (%lld with masks, %lld over several "
           "ranks): the counts equal the loops over every pair of ranks\n",
           MODEL_CASES, (long long)masked, (long long)sent);
    free(c);
}

/* Every strategy of strat_table has its row in the model's table: on a
 * problem every strategy takes (P = 2, 4 heads), each one applies, with
 * a time, and reports itself. */
static void test_model_rows(void **state)
{
    (void)state;
    ra_shape s = {.B = 1, .N = 96, .M = 96, .H = 4, .G = 4, .D = 16,
                  .Dv = 16};
    ra_params p;
    ra_params_default(&p);
    ra_profile pf;
    profile_default(&pf);
    const model_alloc al = {.P = 2, .nodes = 1, .core_rate = 1e9};
    model_result res[RA_STRATEGY_COUNT];
    assert_int_equal(model_predict_all(&s, &p, RA_LAYOUT_CONTIGUOUS, NULL,
                                       &al, &pf, 0, res), 0);
    for (int k = 0; k < RA_STRATEGY_COUNT; k++) {
        if (!res[k].applies)
            printf("# %s\n", res[k].why);
        assert_int_equal(res[k].strategy, k);
        assert_true(res[k].applies && res[k].t_total > 0);
    }
    printf("# %d strategies, each with its row in the model's table\n",
           RA_STRATEGY_COUNT);
}

/* A plan's scaling sweep (comm/perf/plan_run.c): at each node count the
 * strong point keeps the problem and the weak one grows N and M with the
 * nodes from the first count, both at the job's ranks per node; at the
 * first count the two are one problem and predict alike; every table is
 * the model's own for its point. */
static void test_plan_sweep(void **state)
{
    (void)state;
    const int64_t counts[] = {2, 3, 8};
    perf_plan *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->s = (ra_shape){.B = 1, .N = 3001, .M = 3001, .H = 4, .G = 4,
                      .D = 32, .Dv = 32};
    ra_params_default(&w->p);
    w->p.num.causal = 1;
    profile_default(&w->pf);
    w->ranks = 7; /* 2 per node, the rest dropped */
    w->nodes = 3;
    memcpy(w->sweep, counts, sizeof counts);
    w->nsweep = 3;
    assert_int_equal(plan_evaluate(w), RA_OK);
    const plan_point job = plan_point_of(w, -1);
    assert_true(job.ranks == 7 && job.nodes == 3 && job.table == &w->table);
    for (int i = 0; i < 2 * w->nsweep; i++) {
        const plan_point at = plan_point_of(w, i);
        const int64_t K = counts[i / 2];
        assert_true(at.nodes == K && at.ranks == 2 * K);
        assert_int_equal(at.s.N, i % 2 ? 3001 * K / 2 : 3001);
        assert_int_equal(at.s.M, at.s.N);
        assert_string_equal(at.scaling, i % 2 ? "weak" : "strong");
        model_table *t = malloc(sizeof *t);
        assert_non_null(t);
        const model_alloc al = plan_alloc(w, at.ranks, at.nodes);
        assert_int_equal(model_evaluate(&at.s, &w->p, 0, NULL, &al, &w->pf,
                                        0, t), RA_OK);
        assert_true(t->best >= 0 && t->best == at.table->best);
        assert_true(t->row[t->best].t_total ==
                    at.table->row[at.table->best].t_total);
        free(t);
    }
    const model_table *a = &w->sweeps[0], *b = &w->sweeps[1];
    assert_true(a->row[a->best].t_total == b->row[b->best].t_total);
    free(w->sweeps);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_unmasked),
        cmocka_unit_test(test_plan_brute_force),
        cmocka_unit_test(test_model_counts),
        cmocka_unit_test(test_model_rows),
        cmocka_unit_test(test_plan_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
