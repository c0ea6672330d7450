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
 * sender need. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "plan.h"

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
    if (p->causal && j > a)
        return 0;
    if (p->window && (j < a - p->window_left || j > a + p->window_right))
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
    const ra_slice qs = ra_layout_slice(lay, c->s.N, d, c->P);
    const ra_slice ks = ra_layout_slice(lay, c->s.M, src, c->P);
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
            if (k < ra_layout_slice(lay, c->s.M, src, c->P).count && need[k]) {
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
                    if (k < ra_layout_slice(lay, c->s.M, src, c->P).count &&
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
                                 RA_LAYOUT_STRIPED};
    int64_t cases = 0, skipped_hops = 0, rows = 0;
    for (size_t li = 0; li < 3; li++)
        for (int P = 1; P <= 4; P++)
            for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
                for (int causal = 0; causal < 2; causal++)
                    for (size_t wi = 0; wi < 5; wi++)
                        for (int lens = 0; lens < 2; lens++) {
                            plan_case c = {.P = P, .lens = lens};
                            c.s = (ra_shape){2, shapes[si][0], shapes[si][1],
                                             1, 1, 4, 4, 0};
                            ra_params_default(&c.p);
                            c.p.layout = layouts[li];
                            c.p.causal = causal;
                            c.p.window = windows[wi][0] >= 0;
                            c.p.window_left = c.p.window ? windows[wi][0] : 0;
                            c.p.window_right = c.p.window ? windows[wi][1] : 0;
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
        c.p.layout = RA_LAYOUT_CONTIGUOUS;
        const ring_plan pl = ring_plan_make(&c.s, &c.p, NULL, P);
        assert_int_equal(ring_plan_last_step(&pl), P - 1);
        for (int src = 0; src < P; src++) {
            const int64_t m = ra_layout_slice(pl.layout, c.s.M, src, P).count;
            for (int t = 0; t < P; t++) {
                const ring_span h = ring_plan_held(&pl, src, t, P - 1);
                assert_int_equal(h.b - h.a, m);
            }
        }
        assert_int_equal(check_case(&c), (int64_t)(P - 1) * c.s.M);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_unmasked),
        cmocka_unit_test(test_plan_brute_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
