/* test_backward_ref.c: the fp64 reference gradients against central finite
 * differences of L = sum(dO * O) computed by the forward reference, on tiny
 * fresh random problems, for every mask rule and the dot and Gaussian
 * scores, ALiBi, RoPE (taken back by the rotation at minus the positions)
 * and the additive score with its weights. Proves the reference that the kernel and the ring are checked
 * against. No MPI call is made. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backward.h"
#include "internal.h"

enum { NQ = 5, MK = 7, DQ = 3, DV = 2 };

static uint64_t seed_next = 5000;

/* One tiny problem: q (NQ, DQ), k (MK, DQ), v (MK, DV), dout (NQ, DV). */
typedef struct {
    double q[NQ * DQ], k[MK * DQ], v[MK * DV], dout[NQ * DV];
} tiny;

static void tiny_make(tiny *t)
{
    float buf[NQ * DQ + MK * DQ + MK * DV + NQ * DV];
    ra_random_normal(seed_next++, RA_STREAM_Q, 0, (int64_t)(sizeof buf / 4),
                     buf);
    double *dst[4] = {t->q, t->k, t->v, t->dout};
    const int len[4] = {NQ * DQ, MK * DQ, MK * DV, NQ * DV};
    const float *src = buf;
    for (int a = 0; a < 4; a++, src += len[a - 1])
        for (int i = 0; i < len[a]; i++)
            dst[a][i] = src[i];
}

/* L = sum(dout * o) by the forward reference. */
static double loss(const ra_ref_score *sc, const ra_mask *mk, const tiny *t)
{
    double o[NQ * DV], lse[NQ], scores[MK], l = 0.0;
    const ra_ref_rows rr = {NQ, MK, DQ, DV, t->q, DQ, t->k, DQ, t->v, DV, o, DV,
                            lse};
    ra_reference_scored(sc, mk, &rr, scores);
    for (int i = 0; i < NQ * DV; i++)
        l += t->dout[i] * o[i];
    return l;
}

/* Worst |fd - analytic| / (1 + |analytic|) over the n entries of x. */
static double fd_error(const ra_ref_score *sc, const ra_mask *mk, tiny *t,
                       double *x, int n, const double *grad)
{
    const double h = 1e-5;
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        const double keep = x[i];
        x[i] = keep + h;
        const double up = loss(sc, mk, t);
        x[i] = keep - h;
        const double down = loss(sc, mk, t);
        x[i] = keep;
        const double fd = (up - down) / (2 * h);
        const double e = fabs(fd - grad[i]) / (1.0 + fabs(grad[i]));
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Checks dq, dk, dv of a fresh problem; rows that see no key must have
 * exact zeros in dq. Returns the worst error. */
static double check_case(const char *name, const ra_ref_score *sc,
                         const ra_mask *mk)
{
    tiny t;
    tiny_make(&t);
    double dq[NQ * DQ], dk[MK * DQ] = {0}, dv[MK * DV] = {0}, p[MK];
    const ra_ref_grads g = {t.q, t.k, t.v, t.dout, DQ, DQ, DV, DV,
                            dq, dk, dv, DQ, DQ, DV};
    ra_reference_backward(sc, NQ, MK, DQ, DV, mk, &g, p);
    double e = fd_error(sc, mk, &t, t.q, NQ * DQ, dq);
    const double ek = fd_error(sc, mk, &t, t.k, MK * DQ, dk);
    const double ev = fd_error(sc, mk, &t, t.v, MK * DV, dv);
    e = ek > e ? ek : e;
    e = ev > e ? ev : e;
    double o[NQ * DV], lse[NQ], scores[MK];
    const ra_ref_rows rr = {NQ, MK, DQ, DV, t.q, DQ, t.k, DQ, t.v, DV, o, DV,
                            lse};
    ra_reference_scored(sc, mk, &rr, scores);
    int empty = 0;
    for (int i = 0; i < NQ; i++)
        if (lse[i] == -INFINITY) {
            empty++;
            for (int d = 0; d < DQ; d++)
                assert_true(dq[i * DQ + d] == 0.0);
        }
    printf("# %-9s %-8s worst fd error %.2e, empty rows %d %s\n", name,
           ra_score_name(sc->score), e, empty, e < 1e-6 ? "PASS" : "FAIL");
    return e;
}

static void run_masks(const ra_ref_score *sc)
{
    static const int64_t q_len[1] = {3}, kv_len[1] = {5};
    /* query 4's segment (9) has no key */
    static const int64_t q_seg[NQ] = {0, 0, 1, 1, 9};
    static const int64_t k_seg[MK] = {0, 0, 0, 1, 1, 2, 2};
    const ra_mask none = {0};
    const ra_mask causal = {.causal = 1, .diag = MK - NQ};
    /* the first rows see nothing: keys strictly before the aligned diagonal
     * come only later */
    const ra_mask causal_short = {.causal = 1, .diag = -2};
    const ra_mask window = {.window = 1, .diag = MK - NQ, .left = 1,
                            .right = 0};
    const ra_mask lens = {.q_lens = q_len, .kv_lens = kv_len};
    const ra_mask segs = {.q_seg = q_seg, .k_seg = k_seg};
    assert_true(check_case("none", sc, &none) < 1e-6);
    assert_true(check_case("causal", sc, &causal) < 1e-6);
    assert_true(check_case("causal-2", sc, &causal_short) < 1e-6);
    assert_true(check_case("window", sc, &window) < 1e-6);
    assert_true(check_case("lens", sc, &lens) < 1e-6);
    assert_true(check_case("segments", sc, &segs) < 1e-6);
}

static void test_dot_fd(void **state)
{
    (void)state;
    const ra_ref_score sc = {.score = RA_SCORE_DOT, .scale = 0.7};
    run_masks(&sc);
}

/* Softcap (issue 42): the cap's tanh inside the score, ALiBi after it. */
static void test_softcap_fd(void **state)
{
    (void)state;
    const ra_numerics cap09 = {.softcap = 0.9}, cap13 = {.softcap = 1.3};
    const ra_ref_score sc = {.score = RA_SCORE_DOT, .scale = 0.7,
                             .features = &cap09};
    run_masks(&sc);
    const ra_ref_score sa = {.score = RA_SCORE_DOT, .scale = 0.7,
                             .features = &cap13, .alibi = 1,
                             .alibi_slope = 0.4};
    run_masks(&sa);
}

static void test_gaussian_fd(void **state)
{
    (void)state;
    const ra_ref_score sc = {.score = RA_SCORE_GAUSSIAN, .sigma = 1.3};
    run_masks(&sc);
}

/* The additive score: q of dim DQ, keys of another dim (DK), A hidden
 * units; gradients of q, k, v and of the weights w_q, w_k, w_v. */
enum { DK = 4, A = 5 };

typedef struct {
    double q[NQ * DQ], k[MK * DK], v[MK * DV], dout[NQ * DV];
    float w[A * DQ + A * DK + A]; /* w_q | w_k | w_v */
    ra_additive ad;
    ra_ref_score sc;
} tiny_add;

static double loss_add(const tiny_add *t, const ra_mask *mk)
{
    double o[NQ * DV], lse[NQ], scores[MK], l = 0.0;
    const ra_ref_rows rr = {NQ, MK, DQ, DV, t->q, DQ, t->k, DK, t->v, DV, o, DV,
                            lse};
    ra_reference_scored(&t->sc, mk, &rr, scores);
    for (int i = 0; i < NQ * DV; i++)
        l += t->dout[i] * o[i];
    return l;
}

/* Central differences over doubles x[0..n) or, when w is given, over the
 * float weights (the step actually taken, known in double, divides). */
static double fd_add(tiny_add *t, const ra_mask *mk, double *x, float *w,
                     int n, const double *grad)
{
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        double up, down, step;
        if (w) {
            const float keep = w[i];
            w[i] = keep + 1e-3f;
            step = (double)w[i] - keep;
            up = loss_add(t, mk);
            w[i] = keep - 1e-3f;
            step += keep - (double)w[i];
            down = loss_add(t, mk);
            w[i] = keep;
        } else {
            const double keep = x[i];
            x[i] = keep + 1e-5;
            up = loss_add(t, mk);
            x[i] = keep - 1e-5;
            down = loss_add(t, mk);
            x[i] = keep;
            step = 2e-5;
        }
        const double e = fabs((up - down) / step - grad[i]) /
                         (1.0 + fabs(grad[i]));
        worst = e > worst ? e : worst;
    }
    return worst;
}

static double check_additive(const char *name, const ra_mask *mk)
{
    tiny_add t;
    float buf[NQ * DQ + MK * DK + MK * DV + NQ * DV];
    ra_random_normal(seed_next++, RA_STREAM_Q, 0, (int64_t)(sizeof buf / 4),
                     buf);
    ra_random_normal(seed_next++, RA_STREAM_ADDITIVE, 0,
                     (int64_t)(sizeof t.w / 4), t.w);
    double *dst[4] = {t.q, t.k, t.v, t.dout};
    const int len[4] = {NQ * DQ, MK * DK, MK * DV, NQ * DV};
    for (int a = 0, at = 0; a < 4; at += len[a], a++)
        for (int i = 0; i < len[a]; i++)
            dst[a][i] = buf[at + i];
    t.ad = (ra_additive){A, t.w, t.w + A * DQ, t.w + A * DQ + A * DK};
    t.sc = (ra_ref_score){.score = RA_SCORE_ADDITIVE, .additive = &t.ad,
                          .Dk = DK};
    double dq[NQ * DQ], dk[MK * DK] = {0}, dv[MK * DV] = {0}, p[MK];
    double dw[A * DQ + A * DK + A] = {0};
    const ra_ref_grads g = {t.q, t.k, t.v, t.dout, DQ, DK, DV, DV,
                            dq, dk, dv, DQ, DK, DV,
                            dw, dw + A * DQ, dw + A * DQ + A * DK};
    ra_reference_backward(&t.sc, NQ, MK, DQ, DV, mk, &g, p);
    const double e[4] = {fd_add(&t, mk, t.q, NULL, NQ * DQ, dq),
                         fd_add(&t, mk, t.k, NULL, MK * DK, dk),
                         fd_add(&t, mk, t.v, NULL, MK * DV, dv),
                         fd_add(&t, mk, NULL, t.w, A * DQ + A * DK + A, dw)};
    double worst = 0.0;
    for (int i = 0; i < 4; i++)
        worst = e[i] > worst ? e[i] : worst;
    printf("# %-9s additive worst fd error q %.1e k %.1e v %.1e weights "
           "%.1e %s\n", name, e[0], e[1], e[2], e[3],
           worst < 1e-5 ? "PASS" : "FAIL");
    return worst;
}

static void test_additive_fd(void **state)
{
    (void)state;
    static const int64_t q_len[1] = {4}, kv_len[1] = {6};
    const ra_mask none = {0};
    const ra_mask causal = {.causal = 1, .diag = MK - NQ};
    const ra_mask lens = {.q_lens = q_len, .kv_lens = kv_len};
    assert_true(check_additive("none", &none) < 1e-5);
    assert_true(check_additive("causal", &causal) < 1e-5);
    assert_true(check_additive("lens", &lens) < 1e-5);
}

/* ALiBi: a bias on the scores, so the same gradients as without it but
 * of other weights. */
static void test_alibi_fd(void **state)
{
    (void)state;
    const ra_ref_score sc = {.score = RA_SCORE_DOT, .scale = 0.7, .alibi = 1,
                             .alibi_slope = 0.37};
    run_masks(&sc);
    const ra_ref_score gs = {.score = RA_SCORE_GAUSSIAN, .sigma = 1.3,
                             .alibi = 1, .alibi_slope = 0.6};
    run_masks(&gs);
}

/* RoPE on a tiny problem of even head dim DK: queries at positions
 * i + diag, keys at j, base 7 (large angles). */
typedef struct {
    double q[NQ * DK], k[MK * DK], v[MK * DV], dout[NQ * DV];
    ra_rope rope;
    ra_mask mk;
} tiny_rope;

/* Rows of x (len, DK) rotated at positions (first + i) * sign. */
static void rope_rows(const tiny_rope *t, double *x, int len, int64_t first,
                      int64_t sign)
{
    for (int i = 0; i < len; i++)
        ra_rope_row_ref(t->rope, 7.0, x + i * DK, DK, sign * (first + i));
}

static double loss_rope(const tiny_rope *t, const ra_ref_score *sc)
{
    double q[NQ * DK], k[MK * DK], o[NQ * DV], lse[NQ], scores[MK], l = 0.0;
    memcpy(q, t->q, sizeof q);
    memcpy(k, t->k, sizeof k);
    rope_rows(t, q, NQ, t->mk.diag, 1);
    rope_rows(t, k, MK, 0, 1);
    const ra_ref_rows rr = {NQ, MK, DK, DV, q, DK, k, DK, t->v, DV, o, DV, lse};
    ra_reference_scored(sc, &t->mk, &rr, scores);
    for (int i = 0; i < NQ * DV; i++)
        l += t->dout[i] * o[i];
    return l;
}

static double fd_rope(tiny_rope *t, const ra_ref_score *sc, double *x, int n,
                      const double *grad)
{
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        const double keep = x[i];
        x[i] = keep + 1e-5;
        const double up = loss_rope(t, sc);
        x[i] = keep - 1e-5;
        const double down = loss_rope(t, sc);
        x[i] = keep;
        const double e = fabs((up - down) / 2e-5 - grad[i]) /
                         (1.0 + fabs(grad[i]));
        worst = e > worst ? e : worst;
    }
    return worst;
}

static double check_rope(ra_rope rope, const ra_mask *mk)
{
    tiny_rope t = {.rope = rope, .mk = *mk};
    float buf[NQ * DK + MK * DK + MK * DV + NQ * DV];
    ra_random_normal(seed_next++, RA_STREAM_Q, 0, (int64_t)(sizeof buf / 4),
                     buf);
    double *dst[4] = {t.q, t.k, t.v, t.dout};
    const int len[4] = {NQ * DK, MK * DK, MK * DV, NQ * DV};
    for (int a = 0, at = 0; a < 4; at += len[a], a++)
        for (int i = 0; i < len[a]; i++)
            dst[a][i] = buf[at + i];
    const ra_ref_score sc = {.score = RA_SCORE_DOT, .scale = 0.8};
    double q[NQ * DK], k[MK * DK], dq[NQ * DK], dk[MK * DK] = {0};
    double dv[MK * DV] = {0}, p[MK];
    memcpy(q, t.q, sizeof q);
    memcpy(k, t.k, sizeof k);
    rope_rows(&t, q, NQ, mk->diag, 1);
    rope_rows(&t, k, MK, 0, 1);
    const ra_ref_grads g = {q, k, t.v, t.dout, DK, DK, DV, DV,
                            dq, dk, dv, DK, DK, DV};
    ra_reference_backward(&sc, NQ, MK, DK, DV, mk, &g, p);
    rope_rows(&t, dq, NQ, mk->diag, -1); /* the transpose of the rotation */
    rope_rows(&t, dk, MK, 0, -1);
    const double e[3] = {fd_rope(&t, &sc, t.q, NQ * DK, dq),
                         fd_rope(&t, &sc, t.k, MK * DK, dk),
                         fd_rope(&t, &sc, t.v, MK * DV, dv)};
    const double worst = fmax(e[0], fmax(e[1], e[2]));
    printf("# rope %-11s causal=%d worst fd error q %.1e k %.1e v %.1e %s\n",
           ra_rope_name(rope), mk->causal, e[0], e[1], e[2],
           worst < 1e-6 ? "PASS" : "FAIL");
    return worst;
}

static void test_rope_fd(void **state)
{
    (void)state;
    const ra_mask none = {.diag = MK - NQ};
    const ra_mask causal = {.causal = 1, .diag = MK - NQ};
    assert_true(check_rope(RA_ROPE_INTERLEAVED, &none) < 1e-6);
    assert_true(check_rope(RA_ROPE_HALF, &none) < 1e-6);
    assert_true(check_rope(RA_ROPE_HALF, &causal) < 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot_fd),
        cmocka_unit_test(test_softcap_fd),
        cmocka_unit_test(test_gaussian_fd),
        cmocka_unit_test(test_additive_fd),
        cmocka_unit_test(test_alibi_fd),
        cmocka_unit_test(test_rope_fd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
