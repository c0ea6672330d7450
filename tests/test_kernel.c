/* test_kernel.c: ra_kernel_forward_block in one process against the fp64
 * reference, and the shape helpers the kernel is sized with.
 *
 * Every case folds key blocks of a fresh random problem into a reset state
 * the way one rank of the ring does (queries and keys given as global row
 * ranges, positions as global indices) and checks the rows with check_rows.
 * Each case prints one '#' line with its verdict; the worst errors of a test
 * are printed at its end. No MPI call is made. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "support.h"

/* Seeds never repeat within a run, so every case draws fresh inputs. */
static uint64_t seed_next = 1000;

/* Worst errors seen by the current test, over the cases it checked. */
static double worst_rel_o, worst_lse;

static void worst_reset(void) { worst_rel_o = worst_lse = 0.0; }

static void worst_print(const char *test)
{
    printf("# %s: worst rel_o=%.3e lse=%.3e\n", test, worst_rel_o, worst_lse);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Copies rows [start, start + count) of each batch of x (B, len, width) into a
 * new (B, count, width) array that the caller frees. */
static float *rows_copy(const float *x, int64_t B, int64_t len, int64_t width,
                        ra_range r)
{
    float *out = malloc(sizeof(float) * (size_t)(B * r.count * width + 1));
    for (int64_t b = 0; b < B; b++)
        memcpy(out + b * r.count * width, x + (b * len + r.start) * width,
               sizeof(float) * (size_t)(r.count * width));
    return out;
}

/* Tile sizes of a case; 0 picks the library default for the shape. */
typedef struct {
    int64_t bq, bkv;
} tiles;

static tiles tiles_resolve(tiles t, const ra_shape *s)
{
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.block_q = t.bq;
    prm.exec.block_kv = t.bkv;
    tiles r;
    ra_params_tiles(&prm, s, &r.bq, &r.bkv);
    return r;
}

static void count_progress(void *ctx) { ++*(int64_t *)ctx; }

/* The engine of the folds' tile products (test_gemm: RINGATTN_GEMM's, else
 * the build's; main sets it). */
static ra_gemm fold_gemm = RA_GEMM_AUTO;

/* The stride of the rows checked against fp64 (check_rows): 1, all, but in
 * the long case of test_kernel_engines, whose fp64 reference of every row
 * cost more than the rest of that test, and under valgrind (quick). 7 is
 * prime to every tile size, so each position within a tile is checked in
 * some tile, each row against all its keys. */
static int64_t check_every = 1;

/* The rows of [n0, n0 + n) check_rows picks in one head of one batch. */
static int64_t rows_picked(int64_t n0, int64_t n, int64_t N, int64_t every)
{
    int64_t picked = 0;
    for (int64_t i = n0; i < n0 + n; i++)
        picked += i % every == 0 || i == N - 1;
    return picked;
}

/* The least and most busy threads' times of the last fold (seconds). */
static double fold_busy_min, fold_busy_max;

/* Folds keys kr of p into the state of queries qr, as one ra_kernel_forward_
 * block call: o (B, qr.count, H, Dv), lse (B, H, qr.count). Returns how many
 * times the kernel called its progress hook. */
static int64_t fold(const problem *p, int causal, double scale, ra_range qr,
                    ra_range kr, tiles t, int threads, float *o, float *lse)
{
    const ra_shape *s = &p->s;
    t = tiles_resolve(t, s);
    float *q = rows_copy(p->q, s->B, s->N, s->H * s->D, qr);  /* B,n,H,D */
    float *k = rows_copy(p->k, s->B, s->M, s->G * s->D, kr);  /* B,m,G,D */
    float *v = rows_copy(p->v, s->B, s->M, s->G * s->Dv, kr); /* B,m,G,Dv */
    int64_t *qpos = malloc(sizeof(int64_t) * (size_t)(qr.count + 1));
    int64_t *kpos = malloc(sizeof(int64_t) * (size_t)(kr.count + 1));
    for (int64_t i = 0; i < qr.count; i++)
        qpos[i] = qr.start + i;
    for (int64_t j = 0; j < kr.count; j++)
        kpos[j] = kr.start + j;
    ra_block blk = {
        .B = s->B, .n = qr.count, .m = kr.count, .H = s->H, .G = s->G,
        .D = s->D, .Dv = s->Dv, .alpha = (float)(scale * M_LOG2E),
        .block_q = t.bq, .block_kv = t.bkv,
        .mask = {.causal = causal, .diag = s->M - s->N, .qpos = qpos,
                 .kpos = kpos},
        .gemm = fold_gemm,
    };
    ra_workspace *ws = ra_workspace_create(threads, t.bq, t.bkv, s->Dv);
    assert_non_null(ws);
    assert_int_equal(ra_workspace_threads(ws), threads);
    int64_t calls = 0;
    const ra_fwd_ops ops = {q, k, v, o, lse, count_progress, &calls};
    ra_kernel_forward_block(&blk, &ops, ws);
    ra_workspace_busy(ws, &fold_busy_min, &fold_busy_max);
    ra_workspace_free(ws);
    free(q);
    free(k);
    free(v);
    free(qpos);
    free(kpos);
    return calls;
}

/* Asserts the invariants that hold whatever the precision: no NaN anywhere,
 * no infinity in o, and rows of the query slice qr that see no key (causal:
 * global row i sees keys j <= i + M - N) have o exactly 0 and lse -inf. */
static void expect_sane(const problem *p, int causal, ra_range qr,
                        const float *o, const float *lse)
{
    const ra_shape *s = &p->s;
    const int64_t n = qr.count;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < s->H; h++) {
                const float *oi = o + ((b * n + i) * s->H + h) * s->Dv;
                float li = lse[(b * s->H + h) * n + i];
                int blind = causal && qr.start + i + s->M - s->N < 0;
                assert_false(isnan(li));
                assert_true(blind ? li == -INFINITY : isfinite(li));
                for (int64_t d = 0; d < s->Dv; d++) {
                    assert_true(isfinite(oi[d]));
                    if (blind)
                        assert_true(oi[d] == 0.0f);
                }
            }
}

/* Checks (o, lse) of the query slice qr against the reference: rel_o below
 * tol_o, lse error below 1e-5, no bad row. Prints the case line and records
 * the worst errors. */
static void expect_checked(const problem *p, int causal, double scale,
                           ra_range qr, tiles t, int threads, uint64_t seed,
                           const char *what, double tol_o, const float *o,
                           const float *lse)
{
    const ra_shape *s = &p->s;
    expect_sane(p, causal, qr, o, lse);
    check_result c = check_rows(p, causal, scale, qr.start, qr.count, o, lse,
                                check_every);
    int ok = c.rel_o < tol_o && c.max_lse < RA_TOLERANCE && c.bad_inf == 0;
    tiles r = tiles_resolve(t, s);
    printf("# B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld causal=%d "
           "bq=%lld bkv=%lld threads=%d seed=%llu %s rel_o=%.3e lse=%.3e "
           "bad=%lld %s\n",
           (long long)s->B, (long long)s->N, (long long)s->M, (long long)s->H,
           (long long)s->G, (long long)s->D, (long long)s->Dv, causal,
           (long long)r.bq, (long long)r.bkv, threads,
           (unsigned long long)seed, what, c.rel_o, c.max_lse,
           (long long)c.bad_inf, ok ? "PASS" : "FAIL");
    assert_int_equal(c.rows, s->B * s->H *
                                 rows_picked(qr.start, qr.count, s->N,
                                             check_every));
    worst_rel_o = fmax(worst_rel_o, c.rel_o);
    worst_lse = fmax(worst_lse, c.max_lse);
    assert_true(ok);
}

/* The whole problem as one block from a reset state, checked within the
 * default tolerance (rel_o < 1e-5, lse < 1e-5, no bad row). */
static void expect_case(ra_shape s, int causal, tiles t, int threads)
{
    problem p;
    uint64_t seed = seed_next++;
    problem_make(&p, &s, seed);
    double scale = 1.0 / sqrt((double)s.D);
    ra_range qr = {0, s.N}, kr = {0, s.M};
    float *o = malloc(sizeof(float) * (size_t)(s.B * s.N * s.H * s.Dv));
    float *lse = malloc(sizeof(float) * (size_t)(s.B * s.H * s.N));
    ra_state_reset(s.B, s.N, s.H, s.Dv, o, lse);
    fold(&p, causal, scale, qr, kr, t, threads, o, lse);
    expect_checked(&p, causal, scale, qr, t, threads, seed, "one-block",
                   RA_TOLERANCE, o, lse);
    free(o);
    free(lse);
    problem_free(&p);
}

static const int64_t lens[4] = {1, 7, 127, 1001};

/* Every (N, M) pair of lens at every head dim, causal and not; the tiles
 * rotate so that each size meets several of them. */
static void test_kernel_sizes(void **state)
{
    (void)state;
    static const int64_t dims[5] = {1, 8, 64, 80, 128};
    static const tiles rot[5] = {{0, 0}, {7, 33}, {33, 7}, {1, 1}, {128, 256}};
    int turn = 0;
    worst_reset();
    for (int di = 0; di < 5; di++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                for (int causal = 0; causal <= 1; causal++) {
                    ra_shape s = {1, lens[a], lens[b], 1, 1, dims[di],
                                  dims[di]};
                    expect_case(s, causal, rot[turn++ % 5], 1);
                }
    worst_print("sizes");
}

/* Grouped heads (H=4 over G=2 and G=1), Dv != D, batches, cross lengths. */
static void test_kernel_gqa_dv(void **state)
{
    (void)state;
    static const ra_shape shapes[4] = {
        {2, 0, 0, 4, 2, 64, 32},
        {1, 0, 0, 4, 1, 80, 48},
        {1, 0, 0, 4, 2, 8, 128},
        {2, 0, 0, 4, 4, 128, 1},
    };
    static const int64_t nm[5][2] = {
        {1001, 127}, {127, 1001}, {7, 1001}, {1001, 7}, {1, 1}};
    static const tiles rot[3] = {{0, 0}, {7, 33}, {33, 1}};
    int turn = 0;
    worst_reset();
    for (int si = 0; si < 4; si++)
        for (int x = 0; x < 5; x++)
            for (int causal = 0; causal <= 1; causal++) {
                ra_shape s = shapes[si];
                s.N = nm[x][0];
                s.M = nm[x][1];
                expect_case(s, causal, rot[turn++ % 3], 1);
            }
    worst_print("gqa_dv");
}

/* Both tile engines (engine/gemm.c) against the reference: OpenBLAS, and
 * oneDNN when the build has it (ra_gemm_available), on odd sizes, GQA,
 * Dv != D, odd tiles and two threads, causal and not; the long case on
 * every 7th row (check_every). */
static void test_kernel_engines(void **state)
{
    (void)state;
    static const ra_shape shapes[3] = {
        {1, 1001, 777, 4, 2, 64, 32},
        {2, 7, 1001, 2, 1, 128, 128},
        {1, 3816, 3816, 1, 1, 80, 80},
    };
    static const tiles rot[3] = {{0, 0}, {7, 33}, {100, 300}};
    const ra_gemm chosen = fold_gemm;
    for (ra_gemm g = RA_GEMM_OPENBLAS; g <= RA_GEMM_ONEDNN; g++) {
        if (!ra_gemm_available(g)) {
            print_message("engines: %s not in this build\n", ra_gemm_name(g));
            continue;
        }
        fold_gemm = g;
        worst_reset();
        for (int si = 0; si < 3; si++)
            for (int causal = 0; causal <= 1; causal++) {
                check_every = shapes[si].N > 2000 ? 7 : 1;
                expect_case(shapes[si], causal, rot[(si + causal) % 3],
                            1 + causal);
            }
        check_every = 1;
        worst_print(ra_gemm_name(g));
    }
    fold_gemm = chosen;
}

/* Every pair of query and key tiles among 1, 7, 33 and the defaults, on a
 * shape whose lengths are multiples of none of them. With N > M and causal,
 * the first N - M rows see nothing and whole query tiles are skipped. */
static void test_kernel_tiles(void **state)
{
    (void)state;
    static const int64_t bqs[4] = {1, 7, 33, 0}, bkvs[4] = {1, 7, 33, 0};
    worst_reset();
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            tiles t = {bqs[a], bkvs[b]};
            expect_case((ra_shape){1, 300, 517, 2, 1, 64, 64}, 0, t, 1);
            expect_case((ra_shape){1, 300, 517, 2, 1, 64, 64}, 1, t, 1);
            expect_case((ra_shape){1, 517, 300, 2, 1, 64, 64}, 1, t, 1);
        }
    worst_print("tiles");
}

/* Relative distance of two states: ||o_a - o_b|| / ||o_b|| and the largest
 * |lse_a - lse_b| / max(1, |lse_b|); equal -inf entries count as 0. */
static void state_diff(int64_t no, int64_t nl, const float *oa,
                       const float *la, const float *ob, const float *lb,
                       double *rel_o, double *d_lse)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < no; i++) {
        double e = (double)oa[i] - (double)ob[i];
        num += e * e;
        den += (double)ob[i] * (double)ob[i];
    }
    *rel_o = den > 0.0 ? sqrt(num / den) : sqrt(num);
    *d_lse = 0.0;
    for (int64_t i = 0; i < nl; i++) {
        if (la[i] == lb[i])
            continue;
        double e = fabs((double)la[i] - (double)lb[i]) /
                   fmax(1.0, fabs((double)lb[i]));
        *d_lse = fmax(*d_lse, isnan(e) ? INFINITY : e);
    }
}

/* Keys split into two blocks at `cut` (in either order) against one block:
 * the LSE merge of the kernel must agree with the one-pass softmax. */
static void expect_split(ra_shape s, int causal, int64_t cut, tiles t)
{
    problem p;
    uint64_t seed = seed_next++;
    problem_make(&p, &s, seed);
    double scale = 1.0 / sqrt((double)s.D);
    const int64_t no = s.B * s.N * s.H * s.Dv, nl = s.B * s.H * s.N;
    ra_range qr = {0, s.N}, all = {0, s.M};
    ra_range lo = {0, cut}, hi = {cut, s.M - cut};
    float *o1 = malloc(sizeof(float) * (size_t)no);
    float *l1 = malloc(sizeof(float) * (size_t)nl);
    float *o2 = malloc(sizeof(float) * (size_t)no);
    float *l2 = malloc(sizeof(float) * (size_t)nl);
    ra_state_reset(s.B, s.N, s.H, s.Dv, o1, l1);
    fold(&p, causal, scale, qr, all, t, 1, o1, l1);
    for (int order = 0; order <= 1; order++) {
        ra_state_reset(s.B, s.N, s.H, s.Dv, o2, l2);
        fold(&p, causal, scale, qr, order ? hi : lo, t, 1, o2, l2);
        fold(&p, causal, scale, qr, order ? lo : hi, t, 1, o2, l2);
        char what[64];
        snprintf(what, sizeof what, "split@%lld%s", (long long)cut,
                 order ? "-reversed" : "");
        expect_checked(&p, causal, scale, qr, t, 1, seed, what, RA_TOLERANCE, o2, l2);
        double rel_o, d_lse;
        state_diff(no, nl, o2, l2, o1, l1, &rel_o, &d_lse);
        printf("#   split vs one block: rel_o=%.3e lse=%.3e\n", rel_o, d_lse);
        assert_true(rel_o < RA_TOLERANCE);
        assert_true(d_lse < RA_TOLERANCE);
        for (int64_t i = 0; i < nl; i++)
            assert_true((l1[i] == -INFINITY) == (l2[i] == -INFINITY));
    }
    free(o1);
    free(l1);
    free(o2);
    free(l2);
    problem_free(&p);
}

static void test_kernel_split_blocks(void **state)
{
    (void)state;
    static const tiles rot[3] = {{0, 0}, {7, 33}, {33, 7}};
    worst_reset();
    for (int causal = 0; causal <= 1; causal++)
        for (int x = 0; x < 3; x++) {
            tiles t = rot[x];
            expect_split((ra_shape){1, 1001, 1001, 2, 1, 64, 64}, causal, 333,
                         t);
            expect_split((ra_shape){2, 1001, 1001, 2, 2, 8, 16}, causal, 1, t);
            expect_split((ra_shape){1, 127, 1001, 4, 2, 80, 80}, causal, 999,
                         t);
            expect_split((ra_shape){1, 1001, 127, 4, 1, 128, 64}, causal, 63,
                         t);
            expect_split((ra_shape){2, 1001, 7, 2, 1, 64, 64}, causal, 3, t);
        }
    worst_print("split_blocks");
}

/* Asserts that every row of the query slice that sees no key of kr kept its
 * (o, lse) bit for bit; returns how many rows that was. */
static int64_t expect_blind_rows_kept(const ra_shape *s, ra_range qr,
                                      ra_range kr, const float *o0,
                                      const float *l0, const float *o,
                                      const float *lse)
{
    const int64_t n = qr.count;
    int64_t kept = 0;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t i = 0; i < n; i++) {
            if (kr.start <= qr.start + i + s->M - s->N)
                continue; /* sees key kr.start */
            for (int64_t h = 0; h < s->H; h++) {
                size_t at = (size_t)(((b * n + i) * s->H + h) * s->Dv);
                assert_memory_equal(o + at, o0 + at,
                                    sizeof(float) * (size_t)s->Dv);
                size_t li = (size_t)((b * s->H + h) * n + i);
                assert_memory_equal(lse + li, l0 + li, sizeof(float));
                kept++;
            }
        }
    return kept;
}

/* Causal, as a middle rank of the ring sees it: queries [100, 200) of 300
 * against key blocks wholly above the diagonal (a no-op, bit for bit), then
 * a block that only some rows see (the others keep their bits), and finally
 * the full answer. A masked block on a reset state leaves it reset. */
static void test_kernel_empty_partial(void **state)
{
    (void)state;
    static const tiles rot[4] = {{0, 0}, {7, 33}, {1, 1}, {33, 7}};
    worst_reset();
    for (int x = 0; x < 4; x++) {
        ra_shape s = {2, 300, 300, 2, 1, 64, 32};
        problem p;
        uint64_t seed = seed_next++;
        problem_make(&p, &s, seed);
        double scale = 1.0 / sqrt((double)s.D);
        ra_range qr = {100, 100};
        const int64_t no = s.B * qr.count * s.H * s.Dv, nl = s.B * s.H * qr.count;
        float *o = malloc(sizeof(float) * (size_t)no);
        float *lse = malloc(sizeof(float) * (size_t)nl);
        float *o0 = malloc(sizeof(float) * (size_t)no);
        float *l0 = malloc(sizeof(float) * (size_t)nl);

        ra_state_reset(s.B, qr.count, s.H, s.Dv, o, lse);
        ra_state_reset(s.B, qr.count, s.H, s.Dv, o0, l0);
        fold(&p, 1, scale, qr, (ra_range){200, 100}, rot[x], 1, o, lse);
        assert_memory_equal(o, o0, sizeof(float) * (size_t)no);
        assert_memory_equal(lse, l0, sizeof(float) * (size_t)nl);

        fold(&p, 1, scale, qr, (ra_range){0, 150}, rot[x], 1, o, lse);
        memcpy(o0, o, sizeof(float) * (size_t)no);
        memcpy(l0, lse, sizeof(float) * (size_t)nl);
        fold(&p, 1, scale, qr, (ra_range){250, 50}, rot[x], 1, o, lse);
        assert_memory_equal(o, o0, sizeof(float) * (size_t)no);
        assert_memory_equal(lse, l0, sizeof(float) * (size_t)nl);

        /* rows 100..149 see none of keys 150..199 */
        ra_range mid = {150, 50};
        fold(&p, 1, scale, qr, mid, rot[x], 1, o, lse);
        int64_t kept = expect_blind_rows_kept(&s, qr, mid, o0, l0, o, lse);
        assert_int_equal(kept, s.B * s.H * 50);

        fold(&p, 1, scale, qr, (ra_range){200, 50}, rot[x], 1, o, lse);
        expect_checked(&p, 1, scale, qr, rot[x], 1, seed, "slice+empty-blocks",
                       RA_TOLERANCE, o, lse);
        free(o);
        free(lse);
        free(o0);
        free(l0);
        problem_free(&p);
    }
    worst_print("empty_partial");
}

/* Two threads must give the same bits as one: each work item is computed by
 * one thread with the same arithmetic whichever thread it is. The busy time
 * of the least busy thread, summed over the cases, shows that the second
 * thread really took items (per case it may not: a small case can be over
 * before the second thread wakes); thread 0 runs the progress hook, with
 * one thread exactly as often as there are (item, key tile) pairs. */
static void test_kernel_threads(void **state)
{
    (void)state;
    static const ra_shape shapes[3] = {
        {2, 1001, 777, 3, 1, 64, 32},
        {1, 1001, 1001, 4, 2, 128, 128},
        {2, 517, 300, 2, 2, 8, 8},
    };
    static const tiles rot[3] = {{33, 7}, {0, 0}, {7, 33}};
    int64_t total[2] = {0, 0};
    double idle_thread = 0.0, one_thread = 0.0;
    worst_reset();
    for (int si = 0; si < 3; si++)
        for (int causal = 0; causal <= 1; causal++) {
            ra_shape s = shapes[si];
            problem p;
            uint64_t seed = seed_next++;
            problem_make(&p, &s, seed);
            double scale = 1.0 / sqrt((double)s.D);
            const int64_t no = s.B * s.N * s.H * s.Dv, nl = s.B * s.H * s.N;
            ra_range qr = {0, s.N}, kr = {0, s.M};
            float *o[2], *lse[2];
            for (int th = 0; th < 2; th++) {
                o[th] = malloc(sizeof(float) * (size_t)no);
                lse[th] = malloc(sizeof(float) * (size_t)nl);
                ra_state_reset(s.B, s.N, s.H, s.Dv, o[th], lse[th]);
                total[th] += fold(&p, causal, scale, qr, kr, rot[si], th + 1,
                                  o[th], lse[th]);
                if (th == 0) { /* one thread: its time is both ends */
                    assert_true(fold_busy_min == fold_busy_max);
                    one_thread += fold_busy_min;
                } else {
                    assert_true(fold_busy_min <= fold_busy_max);
                    idle_thread += fold_busy_min;
                }
            }
            expect_checked(&p, causal, scale, qr, rot[si], 2, seed, "threads",
                           RA_TOLERANCE, o[1], lse[1]);
            assert_memory_equal(o[0], o[1], sizeof(float) * (size_t)no);
            assert_memory_equal(lse[0], lse[1], sizeof(float) * (size_t)nl);
            for (int th = 0; th < 2; th++) {
                free(o[th]);
                free(lse[th]);
            }
            problem_free(&p);
        }
    printf("# threads: %lld progress calls with 1 thread, %lld on thread 0 "
           "of 2; least busy thread %.3g s (1 thread: %.3g s)\n",
           (long long)total[0], (long long)total[1], idle_thread, one_thread);
    assert_true(total[0] > 0 && total[1] > 0);
    assert_true(one_thread > 0.0 && idle_thread > 0.0);
    worst_print("threads");
}

/* With one thread and no mask, the hook runs once per (item, key tile). */
static void test_kernel_progress(void **state)
{
    (void)state;
    ra_shape s = {2, 100, 70, 3, 1, 8, 8};
    problem p;
    problem_make(&p, &s, seed_next++);
    float *o = malloc(sizeof(float) * (size_t)(s.B * s.N * s.H * s.Dv));
    float *lse = malloc(sizeof(float) * (size_t)(s.B * s.H * s.N));
    ra_state_reset(s.B, s.N, s.H, s.Dv, o, lse);
    int64_t calls = fold(&p, 0, 0.5, (ra_range){0, s.N}, (ra_range){0, s.M},
                         (tiles){33, 16}, 1, o, lse);
    assert_int_equal(calls, s.B * s.H * 4 * 5);
    free(o);
    free(lse);
    problem_free(&p);
}

/* Queries multiplied by c so that scores reach about 1e4 in magnitude: the
 * softmax is then nearly one-hot and exp of any unshifted score overflows,
 * so only correct max-subtraction keeps o finite. */
static void expect_large(ra_shape s, int causal, tiles t, int split)
{
    problem p;
    uint64_t seed = seed_next++;
    problem_make(&p, &s, seed);
    double scale = 1.0 / sqrt((double)s.D);
    const float c = 3000.0f;
    for (int64_t i = 0; i < s.B * s.N * s.H * s.D; i++)
        p.q[i] *= c;
    double smax = 0.0; /* the largest |score| of (b, h) = (0, 0) */
    for (int64_t i = 0; i < s.N; i += check_every)
        for (int64_t j = 0; j < s.M; j++) {
            double dot = 0.0;
            for (int64_t d = 0; d < s.D; d++)
                dot += (double)p.q[i * s.H * s.D + d] *
                       (double)p.k[j * s.G * s.D + d];
            smax = fmax(smax, fabs(dot * scale));
        }
    assert_true(smax > 1e4);
    const int64_t no = s.B * s.N * s.H * s.Dv, nl = s.B * s.H * s.N;
    float *o = malloc(sizeof(float) * (size_t)no);
    float *lse = malloc(sizeof(float) * (size_t)nl);
    ra_range qr = {0, s.N};
    ra_state_reset(s.B, s.N, s.H, s.Dv, o, lse);
    if (split) {
        fold(&p, causal, scale, qr, (ra_range){0, s.M / 2}, t, 1, o, lse);
        fold(&p, causal, scale, qr, (ra_range){s.M / 2, s.M - s.M / 2}, t, 1,
             o, lse);
    } else {
        fold(&p, causal, scale, qr, (ra_range){0, s.M}, t, 1, o, lse);
    }
    char what[64];
    snprintf(what, sizeof what, "large max|s|=%.2e%s", smax,
             split ? " split" : "");
    /* o holds to 1e-4 here, not 1e-5: an fp32 dot product of 64-128 terms
     * of size ~3000 is off by ~1e-2 in the score, hence by ~1% in the
     * weight of any key whose score is near the row max. A plain fp32 dot
     * followed by an exact fp64 softmax gives the same 1e-5..5e-5 on these
     * inputs, so this is the fp32 inputs' floor, not the kernel's. The lse
     * error is relative to |lse| ~ 1e4 and keeps the usual bound. */
    expect_checked(&p, causal, scale, qr, t, 1, seed, what, 1e-4, o, lse);
    free(o);
    free(lse);
    problem_free(&p);
}

static void test_kernel_large_scores(void **state)
{
    (void)state;
    worst_reset();
    for (int causal = 0; causal <= 1; causal++)
        for (int split = 0; split <= 1; split++) {
            expect_large((ra_shape){1, 257, 257, 2, 1, 64, 64}, causal,
                         (tiles){0, 0}, split);
            expect_large((ra_shape){1, 300, 129, 2, 2, 128, 32}, causal,
                         (tiles){7, 33}, split);
        }
    worst_print("large_scores");
}

/* ---- shape helpers ------------------------------------------------------ */

static void test_shard_range(void **state)
{
    (void)state;
    static const int64_t lengths[5] = {0, 1, 3, 7, 1001};
    for (int li = 0; li < 5; li++)
        for (int P = 1; P <= 5; P++) {
            int64_t next = 0, lo = lengths[li], hi = 0;
            for (int r = 0; r < P; r++) {
                ra_range g = ra_shard_range(lengths[li], r, P);
                assert_int_equal(g.start, next); /* no gap, no overlap */
                assert_true(g.count >= 0);
                next = g.start + g.count;
                lo = min64(lo, g.count);
                hi = g.count > hi ? g.count : hi;
            }
            assert_int_equal(next, lengths[li]);
            assert_true(hi - lo <= 1);
        }
}

/* Keys a query at position i of a self-attention of length len sees,
 * counted one key at a time (the balanced cut's weight, written out). */
static int64_t keys_seen(const ra_numerics *num, int64_t len, int64_t i)
{
    int64_t n = 0;
    for (int64_t j = 0; j < len; j++)
        n += !(num->causal && j > i) &&
             !(num->window &&
               (j < i - num->window_left || j > i + num->window_right));
    return n;
}

/* Balanced runs tile the axis in rank order; the first and the last
 * rank's work (the keys their queries see) lies within one row's of the
 * mean, the ranks between split their tokens evenly, and while the ramps
 * of the window lie within the first and last rank every rank's work is
 * within a row's of the mean; with neither causal nor window, and for a
 * NULL num, they are the contiguous cut. */
static void test_balanced_cut(void **state)
{
    (void)state;
    static const int64_t lengths[] = {0, 1, 7, 64, 1001, 3816};
    static const int64_t rules[][3] = {/* causal, window left, right; -1: none */
                                       {0, -1, -1}, {1, -1, -1}, {1, 5, 0},
                                       {1, 600, 0}, {0, 9, 3},   {0, 0, 0},
                                       {1, 0, 0},   {0, 4000, 4000}};
    int64_t *w = malloc(sizeof(int64_t) * 3817);
    assert_non_null(w);
    double worst = 0.0;
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
        for (size_t ri = 0; ri < sizeof rules / sizeof *rules; ri++) {
            const int64_t len = lengths[li];
            ra_numerics num;
            ra_numerics_default(&num);
            num.causal = (int)rules[ri][0];
            num.window = rules[ri][1] >= 0;
            num.window_left = num.window ? rules[ri][1] : 0;
            num.window_right = num.window ? rules[ri][2] : 0;
            int64_t total = 0, heaviest = 0;
            for (int64_t i = 0; i < len; i++) {
                w[i] = keys_seen(&num, len, i);
                total += w[i];
                heaviest = w[i] > heaviest ? w[i] : heaviest;
            }
            /* the ramps: rows [0, ramp_lo) and [ramp_hi, len) see fewer
             * keys than the rows between */
            int64_t ramp_lo = 0, ramp_hi = len;
            while (ramp_lo < len && w[ramp_lo] < heaviest)
                ramp_lo++;
            while (ramp_hi > ramp_lo && w[ramp_hi - 1] < heaviest)
                ramp_hi--;
            for (int P = 1; P <= 9; P++) {
                const ra_slice s0 =
                    ra_layout_slice(RA_LAYOUT_BALANCED, &num, len, 0, P);
                const ra_slice sz =
                    ra_layout_slice(RA_LAYOUT_BALANCED, &num, len, P - 1, P);
                /* exact while the ramps lie within the first and last rank */
                const int inside = P <= 2 || (s0.count >= ramp_lo &&
                                              sz.run[0].start <= ramp_hi);
                int64_t next = 0, mid_lo = len, mid_hi = 0;
                for (int r = 0; r < P; r++) {
                    const ra_slice sl =
                        ra_layout_slice(RA_LAYOUT_BALANCED, &num, len, r, P);
                    assert_int_equal(sl.nruns, 1);
                    assert_int_equal(sl.run[0].stride, 1);
                    assert_int_equal(sl.run[0].start, next);
                    assert_int_equal(sl.count, sl.run[0].count);
                    assert_true(sl.count >= 0);
                    int64_t work = 0;
                    for (int64_t t = 0; t < sl.count; t++)
                        work += w[next + t];
                    next += sl.count;
                    const double off = fabs((double)work - (double)total / P);
                    if (inside || r == 0 || r == P - 1)
                        assert_true(off <= (double)heaviest);
                    if (r > 0 && r < P - 1) { /* the middle: an even split */
                        mid_lo = sl.count < mid_lo ? sl.count : mid_lo;
                        mid_hi = sl.count > mid_hi ? sl.count : mid_hi;
                    }
                    if (inside && len >= 1001)
                        worst = fmax(worst, off * P / (double)total);
                    if (!num.causal && !num.window) {
                        const ra_range g = ra_shard_range(len, r, P);
                        const ra_slice n0 = ra_layout_slice(
                            RA_LAYOUT_BALANCED, NULL, len, r, P);
                        assert_int_equal(sl.run[0].start, g.start);
                        assert_int_equal(sl.count, g.count);
                        assert_int_equal(n0.run[0].start, g.start);
                        assert_int_equal(n0.count, g.count);
                    }
                }
                assert_int_equal(next, len);
                assert_true(P <= 2 || mid_hi - mid_lo <= 1);
            }
        }
    free(w);
    printf("# balanced cut, len >= 1001, ramps inside the end ranks: the "
           "worst rank's work is off the mean by %.4f of it\n", worst);
}

/* Asserts that s is rejected with a message containing `needle`. */
static void expect_rejected(ra_shape s, const char *needle)
{
    ra_error_clear();
    assert_int_equal(ra_shape_check(&s), RA_ERR_ARG);
    const char *msg = ra_error_message();
    printf("# rejected B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld: %s\n",
           (long long)s.B, (long long)s.N, (long long)s.M, (long long)s.H,
           (long long)s.G, (long long)s.D, (long long)s.Dv, msg);
    assert_string_not_equal(msg, "no error recorded");
    assert_non_null(strstr(msg, needle));
}

static void test_shape_check(void **state)
{
    (void)state;
    static const char *letters[7] = {"B", "N", "M", "H", "G", "D", "Dv"};
    const ra_shape good = {2, 1001, 777, 8, 2, 64, 32};
    assert_int_equal(ra_shape_check(&good), RA_OK);
    for (int f = 0; f < 7; f++)
        for (int64_t bad = 0; bad >= -1; bad--) {
            ra_shape s = good;
            int64_t *field[7] = {&s.B, &s.N, &s.M, &s.H, &s.G, &s.D, &s.Dv};
            *field[f] = bad;
            char needle[16];
            snprintf(needle, sizeof needle, "%s must", letters[f]);
            expect_rejected(s, needle);
        }
    expect_rejected((ra_shape){1, 8, 8, 4, 3, 8, 8}, "G=3");
    expect_rejected((ra_shape){1, 8, 8, 6, 4, 8, 8}, "H=6");
    const int64_t big = (int64_t)1 << 20;
    expect_rejected((ra_shape){big, big, 1, big, 1, big, 1}, "overflow");
    expect_rejected((ra_shape){1, 1, big, big, big, big, big}, "overflow");
    expect_rejected((ra_shape){1, 1, 1, 1, 1, INT64_MAX / 8 + 1, 1},
                    "overflow");
}

static double flops_of(const ra_shape *s, int causal)
{
    ra_params p;
    ra_params_default(&p);
    p.num.causal = causal;
    return ra_params_forward_flops(s, &p, NULL);
}

static void test_forward_flops(void **state)
{
    (void)state;
    static const ra_shape shapes[4] = {
        {1, 1, 1, 1, 1, 1, 1},
        {2, 1001, 777, 8, 2, 64, 64},
        {3, 127, 1001, 4, 4, 128, 128},
        {1, 4096, 4096, 32, 8, 128, 128},
    };
    for (int i = 0; i < 4; i++) {
        const ra_shape *s = &shapes[i];
        double full = 4.0 * s->B * s->H * s->N * s->M * s->D;
        assert_true(flops_of(s, 0) == full);
        ra_shape sq = *s;
        sq.M = sq.N;
        sq.Dv = sq.D + 16;
        double tri = 2.0 * (sq.D + sq.Dv) * sq.B * sq.H * sq.N * (sq.N + 1) / 2;
        assert_true(flops_of(&sq, 1) == tri);
    }
    /* N > M causal: row i sees max(0, i + M - N + 1) keys. */
    ra_shape tall = {1, 10, 4, 1, 1, 2, 2};
    assert_true(flops_of(&tall, 1) == 2.0 * 4 * (1 + 2 + 3 + 4));
    /* Window 2 to the left, causal, with lens 3 (queries) and 5 (keys):
     * rows 0, 1, 2 see keys [max(0, i-2), i]: 1 + 2 + 3 pairs. */
    ra_shape w = {1, 8, 8, 1, 1, 1, 1};
    ra_params p;
    ra_params_default(&p);
    p.num.causal = 1;
    p.num.window = 1;
    p.num.window_left = 2;
    int64_t ql = 3, kl = 5;
    ra_masks mk = {.q_lens = &ql, .kv_lens = &kl};
    assert_true(ra_params_forward_flops(&w, &p, &mk) ==
                2.0 * 2 * (1 + 2 + 3));
    /* Window (1, 1), no lens: every row sees 3 keys but the two ends 2. */
    p.num.causal = 0;
    p.num.window_left = 1;
    p.num.window_right = 1;
    assert_true(ra_params_forward_flops(&w, &p, NULL) ==
                2.0 * 2 * (3 * 8 - 2));
}

int main(int argc, char **argv)
{
    /* `test_kernel quick`: the tests that finish in about a minute under
     * valgrind memcheck (every kernel path: masks, tiles, merges, threads,
     * exp), for CI; the size sweeps run natively. */
    const struct CMUnitTest quick[] = {
        cmocka_unit_test(test_kernel_empty_partial),
        cmocka_unit_test(test_kernel_progress),
        cmocka_unit_test(test_kernel_large_scores),
        cmocka_unit_test(test_shard_range),
        cmocka_unit_test(test_shape_check),
        cmocka_unit_test(test_forward_flops),
    };
    fold_gemm = test_gemm();
    if (argc > 1 && strcmp(argv[1], "quick") == 0) {
        /* on OpenBLAS: under valgrind, oneDNN's JIT kernels (AVX2 there,
         * as valgrind hides AVX-512) read up to 32 bytes past the end of
         * the packing buffers they allocate themselves, which memcheck
         * reports; the oneDNN engine is checked natively (test_kernel's
         * engines test, the MPI tests) */
        fold_gemm = RA_GEMM_OPENBLAS;
        /* every 7th row against fp64: under memcheck the test's own fp64
         * reference and score scan were a quarter of its CPU time; every
         * row's numbers are checked by the native run of the same cases */
        check_every = 7;
        return cmocka_run_group_tests(quick, NULL, NULL) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_sizes),
        cmocka_unit_test(test_kernel_gqa_dv),
        cmocka_unit_test(test_kernel_engines),
        cmocka_unit_test(test_kernel_tiles),
        cmocka_unit_test(test_kernel_split_blocks),
        cmocka_unit_test(test_kernel_empty_partial),
        cmocka_unit_test(test_kernel_threads),
        cmocka_unit_test(test_kernel_progress),
        cmocka_unit_test(test_kernel_large_scores),
        cmocka_unit_test(test_shard_range),
        cmocka_unit_test(test_balanced_cut),
        cmocka_unit_test(test_shape_check),
        cmocka_unit_test(test_forward_flops),
    };
    printf("# exp path: %s\n", ra_exp2_impl());
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
