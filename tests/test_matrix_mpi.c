/* test_matrix_mpi.c: the differential test matrix (issue 22). Every
 * strategy against an independent fp64 reference (matrix_ref.c) over the
 * features together rather than one at a time: masks (none, causal,
 * window, both) x (none, q_lens and kv_lens, packed segments) x RoPE
 * (none, interleaved, half) x ALiBi (none, default slopes, caller slopes) x
 * shapes (N == M, N < M, N > M, decoding N = 1, N < P with M tiny) x heads
 * (GQA 6/2 and 4/1, MHA 3/3) x (D, Dv) with Dv != D x scores (dot,
 * gaussian, additive) x layouts x batches x tile sizes x hybrid group sizes
 * x the alignment of queries (the tensor's, or each sequence's own, which
 * the ring alone runs and every other strategy must refuse),
 * forward (o, lse) and then ra_backward (dq, dk, dv) on the strategy's o
 * and lse, as `run --backward --recompute --strategy X` does. Run by ctest
 * under mpiexec at P = 1..4.
 *
 * The cases are a covering design (matrix_gen.c): every strategy with
 * every mask x RoPE x ALiBi combination, and every pair of levels of any
 * two factors in some case, among the cases each strategy must run; then
 * the cases a strategy must refuse (additive or per-sequence alignment off
 * the ring, ulysses with
 * P > H, hybrid groups that do not divide P or exceed H), which must be
 * refused with RA_ERR_ARG on every rank, by a message naming the reason,
 * and the same by ra_call_strategy_check. Each case draws fresh inputs
 * from its own seed (printed when it fails; RA_MATRIX_SEED=n changes the base
 * seed), padding and segments drawn again while they leave no query row
 * two keys to weigh (such a case, "blind", cannot see scores, RoPE or
 * ALiBi; the summary counts those left). Every rank builds the same full
 * problem, passes its layout slices, and compares its own rows (o, lse,
 * dq) and key rows (dk, dv) with the reference; the sums are reduced over
 * the ranks before any verdict. Rank 0 prints one line per failing case
 * and the passed, refused and failed counts per strategy.
 *
 * Tolerances (fp32 kernels against fp64; unit roundoff u = 6e-8). A score
 * sums D <= 16 products of unit-normal inputs scaled to O(1), RoPE rounds
 * the rotated rows to fp32 once, ALiBi adds a bias of at most |slope| *
 * max(N, M) ~ 75: absolute score errors stay near 1e-5 at worst (75 u
 * rounding the bias, a few ulp of the fast exp2), which moves the LSE by as
 * much (a weighted mean of the score errors) and o, a convex combination
 * of v rows, by as much relative to |o|. Hence o's relative Frobenius error
 * < 1e-4 and |lse error| < 1e-4, ten times above that. The gradients add
 * the cancellation of dS = P (dP - rowsum(dO o)) and fp32 sums over up to
 * 101 rows or keys, about ten times more: < 1e-3 relative Frobenius per
 * tensor, against the reference's norm or REL_FLOOR per entry where the
 * reference is smaller (rel_err). Measured on cases that pass (6 seeds,
 * P = 1 and 3): o <= 4e-7, lse <= 2e-6, gradients <= 5e-6. A bug of the
 * kind this matrix hunts (q or k not rotated, a bias left out) moves every
 * affected score by O(1): on the code before issue 22's fix the mildest
 * failing case was 300 times over the limits. Rows that see no key must
 * give o = 0 and lse = -inf exactly. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "call.h"
#include "matrix_gen.h"
#include "matrix_ref.h"
#include "support.h"

#define TOL_O        1e-4
#define TOL_LSE      1e-4
#define TOL_GRAD     1e-3
/* bf16 precision, judged against the fp64 reference on the unrounded
 * inputs: rounding q, k, v and P to 8 significant bits moves o by a few
 * units of 2^-8 relative and lse by about |score| * 2^-8 (worst seen at
 * P = 1..4: 1.5e-2); a wrong mask, position or score is off by O(1). The
 * gradients get a wider limit: rows that see one or two keys have dq and
 * dk near zero by cancellation (dS = P (dP - rowsum(dO o))), where dO
 * rounded for dP against the fp32 o leaves up to 0.12 of the per-entry
 * floor (N = 1..3 cases, seeds 172463 and 489223). */
#define TOL_BF16      5e-2
#define TOL_BF16_GRAD 2.5e-1
#define REL_FLOOR    1e-2
#define SEED_DEFAULT 22002u
#define MAX_CASES    512
#define MASK_DRAWS   8

static int rank, nranks;

/* ---- The factors and their levels ------------------------------------ */

enum {
    F_STRATEGY,
    F_LAYOUT,
    F_MASK,
    F_PAD,
    F_ROPE,
    F_ALIBI,
    F_SHAPE,
    F_HEADS,
    F_DIMS,
    F_SCORE,
    F_BATCH,
    F_GROUP,
    F_TILES,
    F_ALIGN,
    NF
};

static const int nlev[NF] = {6, 5, 4, 3, 3, 3, 5, 3, 2, 3, 2, 3, 3, 2};

static const ra_strategy strategies[6] = {RA_STRATEGY_RING,
                                          RA_STRATEGY_RING_Q,
                                          RA_STRATEGY_ALLGATHER,
                                          RA_STRATEGY_TREE,
                                          RA_STRATEGY_ULYSSES,
                                          RA_STRATEGY_HYBRID};
static const ra_layout layouts[5] = {RA_LAYOUT_CONTIGUOUS, RA_LAYOUT_ZIGZAG,
                                     RA_LAYOUT_STRIPED, RA_LAYOUT_AUTO,
                                     RA_LAYOUT_BALANCED};
static const char *const mask_names[4] = {"none", "causal", "window",
                                          "causal+window"};
static const char *const pad_names[4] = {"none", "lens", "segments",
                                         "lens+segments"};
static const char *const alibi_names[3] = {"none", "default", "caller"};
static const char *const align_names[2] = {"tensor", "sequence"};
static const int64_t heads[3][2] = {{6, 2}, {4, 1}, {3, 3}};
static const int64_t dims[2][2] = {{8, 5}, {16, 11}};
static const ra_score scores[3] = {RA_SCORE_DOT, RA_SCORE_GAUSSIAN,
                                   RA_SCORE_ADDITIVE};
static const int64_t tiles[3][2] = {{0, 0}, {5, 7}, {16, 3}};
/* Window (left, right) pairs, taken in turn by case index. None is (0, 0):
 * a query that sees only the key at its own position is blind to RoPE
 * (both rows turn by the same angle) and to ALiBi (distance 0). */
static const int64_t windows[4][2] = {{5, 2}, {1, 1}, {40, 11}, {3, 0}};

/* ---- One case, concrete ---------------------------------------------- */

typedef struct {
    const char *name; /* a named regression, or NULL (a matrix case) */
    int index;        /* matrix case number */
    ra_strategy strategy;
    ra_layout layout;
    ra_shape s;
    int causal, window;
    int64_t left, right;
    int lens, segs;
    ra_rope rope;
    double rope_base;
    int alibi; /* 0 off, 1 default slopes, 2 the caller's */
    int align; /* 1: per-sequence alignment */
    ra_score score;
    double scale, sigma;
    int64_t A; /* additive: hidden size */
    int64_t ulysses_size, block_q, block_kv;
    int backward;
    int bf16; /* 1: precision bf16 (tolerances TOL_BF16) */
    uint64_t seed;
} mx_case;

static mx_case case_blank(void)
{
    mx_case c = {0};
    c.layout = RA_LAYOUT_CONTIGUOUS;
    c.rope_base = RA_ROPE_BASE_DEFAULT;
    c.scale = NAN;
    c.sigma = 1.0;
    c.A = 6;
    c.backward = 1;
    return c;
}

/* Query and key lengths of shape level l; idx picks between two sizes. */
static void shape_of(int l, int idx, int64_t *N, int64_t *M)
{
    const int alt = idx % 2;
    static const int64_t nm[4][2][2] = {
        {{37, 37}, {13, 13}},  /* N == M */
        {{13, 101}, {7, 37}},  /* N < M */
        {{101, 37}, {37, 13}}, /* N > M */
        {{1, 37}, {1, 101}},   /* decoding */
    };
    if (l < 4) {
        *N = nm[l][alt][0];
        *M = nm[l][alt][1];
        return;
    }
    *N = nranks > 1 ? nranks - 1 : 1; /* fewer queries than ranks */
    *M = alt ? 2 : 7;
}

/* Hybrid's group size of level l: the default (0: the ranks of one node,
 * P under ctest), 1, a divisor of P. */
static int64_t group_of(int l)
{
    const int64_t by_level[3] = {0, 1, nranks % 2 == 0 ? 2 : nranks};
    return by_level[l];
}

/* The smallest group size above 1 that does not divide P. */
static int64_t group_nondivisor(void)
{
    int64_t u = 2;
    while (nranks % u == 0)
        u++;
    return u;
}

/* Which combinations the design holds: only cases every strategy in them
 * must run. The additive score runs on the ring alone and without RoPE;
 * group sizes other than the default mean something to hybrid only;
 * ulysses needs H >= P, hybrid H >= its group size. The cases that must be
 * refused are added apart (refusal_case). */
static int case_allowed(const int *lev, unsigned set)
{
    const int has_st = set >> F_STRATEGY & 1, has_sc = set >> F_SCORE & 1;
    const int has_h = set >> F_HEADS & 1, has_g = set >> F_GROUP & 1;
    const ra_strategy st = strategies[lev[F_STRATEGY]];
    const int64_t H = heads[lev[F_HEADS]][0];
    const int64_t u = group_of(lev[F_GROUP]);
    if (has_sc && scores[lev[F_SCORE]] == RA_SCORE_ADDITIVE &&
        ((has_st && st != RA_STRATEGY_RING) ||
         (set >> F_ROPE & 1 && lev[F_ROPE] != 0)))
        return 0;
    if (has_st && has_g && lev[F_GROUP] != 0 && st != RA_STRATEGY_HYBRID)
        return 0;
    /* per-sequence alignment runs on the ring alone, where group sizes
     * mean nothing */
    if (set >> F_ALIGN & 1 && lev[F_ALIGN] &&
        ((has_st && st != RA_STRATEGY_RING) || (has_g && lev[F_GROUP] != 0)))
        return 0;
    if (has_st && has_h && st == RA_STRATEGY_ULYSSES && H < nranks)
        return 0;
    return !(has_st && has_h && has_g && st == RA_STRATEGY_HYBRID &&
             H < (u ? u : nranks));
}

/* c with only the options its score, encoding and masks apply (the library
 * refuses the others): a scale for the dot score, a bandwidth for the
 * gaussian, a RoPE base with a rotation, per-sequence alignment with a
 * rule to move. */
static mx_case applicable(mx_case c)
{
    if (c.score != RA_SCORE_DOT)
        c.scale = NAN;
    if (c.score != RA_SCORE_GAUSSIAN)
        c.sigma = RA_SIGMA_DEFAULT;
    if (c.rope == RA_ROPE_NONE)
        c.rope_base = RA_ROPE_BASE_DEFAULT;
    if (!c.causal && !c.window && !c.alibi && c.rope == RA_ROPE_NONE)
        c.align = 0;
    return c;
}

static mx_case case_of_levels(int idx, const int *lev, uint64_t seed)
{
    mx_case c = case_blank();
    c.index = idx;
    c.seed = seed + 7919u * (uint64_t)idx;
    c.strategy = strategies[lev[F_STRATEGY]];
    c.layout = layouts[lev[F_LAYOUT]];
    c.causal = lev[F_MASK] & 1;
    c.window = lev[F_MASK] >> 1;
    c.left = windows[idx % 4][0];
    c.right = windows[idx % 4][1];
    c.lens = lev[F_PAD] == 1;
    c.segs = lev[F_PAD] == 2;
    c.rope = (ra_rope)lev[F_ROPE];
    c.rope_base = idx % 3 ? RA_ROPE_BASE_DEFAULT : 500.0;
    c.alibi = lev[F_ALIBI];
    c.s.B = lev[F_BATCH] + 1;
    shape_of(lev[F_SHAPE], idx, &c.s.N, &c.s.M);
    c.s.H = heads[lev[F_HEADS]][0];
    c.s.G = heads[lev[F_HEADS]][1];
    c.s.D = dims[lev[F_DIMS]][0];
    c.s.Dv = dims[lev[F_DIMS]][1];
    c.score = scores[lev[F_SCORE]];
    c.scale = idx % 2 ? 0.3 : NAN;
    c.sigma = sqrt((double)c.s.D) * (idx % 2 ? 0.8 : 1.0);
    c.ulysses_size = group_of(lev[F_GROUP]);
    c.block_q = tiles[lev[F_TILES]][0];
    c.block_kv = tiles[lev[F_TILES]][1];
    c.align = lev[F_ALIGN];
    return applicable(c);
}

/* A word the refusal message must hold, or NULL when the strategy must run
 * the case. The additive score is checked first, then the strategy's own
 * limits; hybrid's default group is the ranks of one node (ctest runs on
 * one). */
static const char *case_refusal(const mx_case *c)
{
    const int64_t u = c->ulysses_size ? c->ulysses_size : nranks;
    if (c->strategy != RA_STRATEGY_RING && c->score == RA_SCORE_ADDITIVE)
        return "additive";
    if (c->strategy != RA_STRATEGY_RING && c->align)
        return "does not support --align-per-sequence";
    if (c->strategy == RA_STRATEGY_ULYSSES && c->s.H < nranks)
        return "ulysses";
    if (c->strategy == RA_STRATEGY_HYBRID && (nranks % u || c->s.H < u))
        return "hybrid";
    return NULL;
}

/* The cases a strategy must refuse (case_refusal), each a design case
 * (base, a row of levels) changed in what makes it unrunnable: the
 * additive score off the ring, per-sequence alignment off the ring, a
 * hybrid group that does not divide P, and at P > 1 fewer heads than
 * ulysses' ranks or than hybrid's group. */
static int refusal_count(void) { return nranks > 1 ? 13 : 11; }

static mx_case refusal_case(int r, int idx, const int *base, uint64_t seed)
{
    mx_case c = case_of_levels(idx, base, seed);
    c.s.H = 6; /* enough heads for every strategy at P <= 4 */
    c.s.G = 2;
    c.ulysses_size = 0;
    if (c.score == RA_SCORE_ADDITIVE)
        c.score = RA_SCORE_DOT;
    c.align = 0;
    if (r < 5) {
        c.strategy = strategies[r + 1];
        c.score = RA_SCORE_ADDITIVE;
        c.rope = RA_ROPE_NONE;
    } else if (r < 10) {
        c.strategy = strategies[r - 4];
        c.causal = 1; /* a rule for the alignment to move */
        c.align = 1;
    } else if (r == 10) {
        c.strategy = RA_STRATEGY_HYBRID;
        c.ulysses_size = group_nondivisor();
    } else {
        c.strategy = r == 11 ? RA_STRATEGY_ULYSSES : RA_STRATEGY_HYBRID;
        c.s.H = nranks - 1;
        c.s.G = 1;
    }
    return applicable(c);
}

static int strategy_index(ra_strategy st)
{
    int k = 0;
    while (strategies[k] != st)
        k++;
    return k;
}

/* ---- Inputs ----------------------------------------------------------- */

/* splitmix64: the test's own stream, the same on every rank. */
static uint64_t rng_next(uint64_t *st)
{
    uint64_t z = (*st += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *st) /* in (0, 1) */
{
    return ((double)(rng_next(st) >> 11) + 0.5) * 0x1.0p-53;
}

static void rng_normal(uint64_t *st, float *x, int64_t n, double sd)
{
    for (int64_t i = 0; i < n; i++) {
        const double r = sqrt(-2.0 * log(rng_uniform(st)));
        x[i] = (float)(sd * r * cos(2.0 * M_PI * rng_uniform(st)));
    }
}

/* Packed-sequence ids of queries (B, N) and keys (B, M): runs of about a
 * fifth of the span over the aligned positions (query i at i + M - N, key
 * j at j), so that a query and the keys at its own positions share an id
 * whatever N and M are; every third id is moved away on the key side, so
 * that some queries see no key. */
static void rng_segments(uint64_t *st, int64_t B, int64_t N, int64_t M,
                         int64_t *qids, int64_t *kids)
{
    const int64_t lo = M - N < 0 ? M - N : 0;
    const double p_new = 5.0 / (double)(M - lo + 4);
    for (int64_t b = 0; b < B; b++) {
        int64_t id = 0;
        for (int64_t pos = lo; pos < M; pos++) {
            id += pos > lo && rng_uniform(st) < p_new;
            if (pos >= M - N)
                qids[b * N + pos - (M - N)] = id;
            if (pos >= 0)
                kids[b * M + pos] = id % 3 == 2 ? id + 1000 : id;
        }
    }
}

/* Ids 0 .. S-1 in runs over len tokens, cut at S - 1 uniform points
 * (runs may be empty), into ids[0..len). */
static void rng_runs(uint64_t *st, int64_t len, int64_t S, int64_t *ids)
{
    int64_t cut[8];
    for (int64_t s = 0; s < S - 1; s++) { /* insertion-sorted */
        const int64_t x = (int64_t)(rng_next(st) % (uint64_t)(len + 1));
        int64_t t = s;
        for (; t > 0 && cut[t - 1] > x; t--)
            cut[t] = cut[t - 1];
        cut[t] = x;
    }
    for (int64_t i = 0, s = 0; i < len; i++) {
        while (s < S - 1 && i >= cut[s])
            s++;
        ids[i] = s;
    }
}

/* Packed-sequence ids for per-sequence alignment: per batch 2 to 5
 * segments, cut on the query and the key side independently, so that a
 * segment's queries and keys end at unrelated places (kend - qend is not
 * M - N); the last id of the keys is moved away, so that some queries see
 * no key. */
static void rng_segments_unequal(uint64_t *st, int64_t B, int64_t N,
                                 int64_t M, int64_t *qids, int64_t *kids)
{
    for (int64_t b = 0; b < B; b++) {
        const int64_t S = 2 + (int64_t)(rng_next(st) % 4);
        rng_runs(st, N, S, qids + b * N);
        rng_runs(st, M, S, kids + b * M);
        for (int64_t j = 0; j < M; j++)
            kids[b * M + j] += kids[b * M + j] == S - 1 ? 1000 : 0;
    }
}

/* Padding lengths of B batches over len tokens: in [ceil(len/2), len],
 * but the first of two batches in [0, len], so that whole batches of
 * empty rows appear without emptying most cases. */
static void rng_lens(uint64_t *st, int64_t B, int64_t len, int64_t *lens)
{
    for (int64_t b = 0; b < B; b++) {
        const int64_t lo = B > 1 && b == 0 ? 0 : (len + 1) / 2;
        lens[b] = lo + (int64_t)(rng_next(st) % (uint64_t)(len - lo + 1));
    }
}

/* ---- One case's data: the full problem and this rank's slices -------- */

typedef struct {
    float *q, *k, *v, *dout;     /* full, natural order */
    float *wq, *wk, *wv;         /* additive weights (A,D) (A,D) (A) */
    double *slopes;              /* (H): the ALiBi slopes the case means */
    int64_t *lens;               /* q_lens (B), then kv_lens (B) */
    int64_t *qseg, *kseg;        /* (B, N), (B, M) */
    ra_slice qs, ks;             /* this rank's tokens */
    float *lq, *lk, *lv, *ldout; /* this rank's slices of q, k, v, dout */
    float *o, *lse;              /* (B, n, H, Dv), (B, H, n) */
    float *dq, *dk, *dv;         /* (B,n,H,D), (B,m,G,D), (B,m,G,Dv) */
    int64_t *lqseg, *lkseg;      /* (B, n), (B, m) */
    ra_additive add;
    int blind;         /* no query row sees two keys */
    void *fmem, *imem; /* the blocks of floats and of integers */
} mx_data;

/* The library's options for a case; d (or NULL, for the layout alone)
 * gives the caller's slopes and the additive weights. */
static ra_params params_of(const mx_case *c, const mx_data *d)
{
    ra_params p;
    ra_params_default(&p);
    p.exec.strategy = c->strategy;
    p.exec.layout = c->layout;
    p.num.causal = c->causal;
    p.num.window = c->window;
    p.num.window_left = c->left;
    p.num.window_right = c->right;
    p.num.score = c->score;
    p.num.scale = c->scale;
    p.num.sigma = c->sigma;
    p.num.additive = d ? &d->add : NULL;
    p.num.rope = c->rope;
    p.num.rope_base = c->rope_base;
    p.num.alibi = c->alibi != 0;
    p.num.alibi_slopes = c->alibi == 2 && d ? d->slopes : NULL;
    p.exec.ulysses_size = c->ulysses_size;
    p.exec.block_q = c->block_q;
    p.exec.block_kv = c->block_kv;
    p.num.align = c->align ? RA_ALIGN_SEQUENCE : RA_ALIGN_TENSOR;
    p.num.precision = c->bf16 ? RA_PRECISION_BF16 : RA_PRECISION_FP32;
    return p;
}

/* Points the arrays into the blocks of floats and of integers, sized for
 * the case (one spare float each: a rank may hold no token). */
static int data_alloc(const mx_case *c, mx_data *d)
{
    const ra_shape *s = &c->s;
    const int64_t B = s->B, H = s->H, G = s->G, D = s->D, Dv = s->Dv;
    const int64_t N = s->N, M = s->M, n = d->qs.count, m = d->ks.count;
    /* the floats of the full tensors, the weights, then this rank's */
    const int64_t len[16] = {B * N * H * D,  B * M * G * D,  B * M * G * Dv,
                             B * N * H * Dv, c->A * D,       c->A * D,
                             c->A,           B * n * H * D,  B * m * G * D,
                             B * m * G * Dv, B * n * H * Dv, B * n * H * Dv,
                             B * H * n,      B * n * H * D,  B * m * G * D,
                             B * m * G * Dv};
    float **at[16] = {&d->q,   &d->k,  &d->v,  &d->dout, &d->wq,    &d->wk,
                      &d->wv,  &d->lq, &d->lk, &d->lv,   &d->ldout, &d->o,
                      &d->lse, &d->dq, &d->dk, &d->dv};
    int64_t nf = 0;
    for (int i = 0; i < 16; i++)
        nf += len[i] + 1;
    d->fmem = malloc(sizeof(float) * (size_t)nf);
    d->imem = malloc(sizeof(int64_t) * (size_t)(B * (2 + N + M + n + m)));
    d->slopes = malloc(sizeof(double) * (size_t)H);
    if (!d->fmem || !d->imem || !d->slopes)
        return -1;
    float *f = d->fmem;
    for (int i = 0; i < 16; i++) {
        *at[i] = f;
        f += len[i] + 1;
    }
    d->lens = d->imem;
    d->qseg = d->lens + 2 * B;
    d->kseg = d->qseg + B * N;
    d->lqseg = d->kseg + B * M;
    d->lkseg = d->lqseg + B * n;
    d->add = (ra_additive){c->A, d->wq, d->wk, d->wv};
    return 0;
}

static void data_free(mx_data *d)
{
    free(d->fmem);
    free(d->imem);
    free(d->slopes);
}

/* The reference's view of a case: the full problem and the masks the
 * case uses. */
static mref_in ref_input(const mx_case *c, const mx_data *d, const ra_params *p)
{
    const mref_in in = {.s = c->s,
                        .p = p,
                        .slopes = d->slopes,
                        .q_lens = c->lens ? d->lens : NULL,
                        .kv_lens = c->lens ? d->lens + c->s.B : NULL,
                        .q_seg = c->segs ? d->qseg : NULL,
                        .kv_seg = c->segs ? d->kseg : NULL,
                        .q = d->q,
                        .k = d->k,
                        .v = d->v,
                        .dout = d->dout};
    return in;
}

/* Draws padding lengths and segment ids, again (up to MASK_DRAWS times)
 * while the case's masks leave no query row two keys to weigh. */
static void data_masks(const mx_case *c, mx_data *d, uint64_t *st)
{
    const ra_shape *s = &c->s;
    const ra_params p = params_of(c, d);
    for (int draw = 0; draw < MASK_DRAWS; draw++) {
        rng_lens(st, s->B, s->N, d->lens);
        rng_lens(st, s->B, s->M, d->lens + s->B);
        if (c->align)
            rng_segments_unequal(st, s->B, s->N, s->M, d->qseg, d->kseg);
        else
            rng_segments(st, s->B, s->N, s->M, d->qseg, d->kseg);
        const mref_in in = ref_input(c, d, &p);
        d->blind = mref_rows_multi(&in) == 0;
        if (!d->blind || !(c->lens || c->segs))
            break;
    }
}

/* Draws the case's inputs from its seed and takes this rank's slices. */
static void data_fill(const mx_case *c, mx_data *d)
{
    const ra_shape *s = &c->s;
    const int64_t B = s->B, D = s->D;
    uint64_t st = c->seed;
    rng_normal(&st, d->q, B * s->N * s->H * D, 1.0);
    rng_normal(&st, d->k, B * s->M * s->G * D, 1.0);
    rng_normal(&st, d->v, B * s->M * s->G * s->Dv, 1.0);
    rng_normal(&st, d->dout, B * s->N * s->H * s->Dv, 1.0);
    rng_normal(&st, d->wq, c->A * D, 1.0 / sqrt((double)D));
    rng_normal(&st, d->wk, c->A * D, 1.0 / sqrt((double)D));
    rng_normal(&st, d->wv, c->A, 1.0);
    mref_alibi_slopes(s->H, d->slopes);
    for (int64_t h = 0; c->alibi == 2 && h < s->H; h++)
        d->slopes[h] = rng_uniform(&st) - 0.25; /* some negative */
    data_masks(c, d, &st);
    slice_gather(d->q, B, s->N, s->H * D, sizeof(float), &d->qs, d->lq);
    slice_gather(d->dout, B, s->N, s->H * s->Dv, sizeof(float), &d->qs,
                 d->ldout);
    slice_gather(d->k, B, s->M, s->G * D, sizeof(float), &d->ks, d->lk);
    slice_gather(d->v, B, s->M, s->G * s->Dv, sizeof(float), &d->ks, d->lv);
    slice_gather(d->qseg, B, s->N, 1, sizeof(int64_t), &d->qs, d->lqseg);
    slice_gather(d->kseg, B, s->M, 1, sizeof(int64_t), &d->ks, d->lkseg);
}

/* The case's data on this rank: 0, or -1 when out of memory (freed). */
static int data_make(const mx_case *c, mx_data *d)
{
    memset(d, 0, sizeof *d);
    const ra_params p = params_of(c, NULL);
    const ra_layout lay = ra_params_layout(&p, c->segs);
    d->qs = ra_params_slice(&p, lay, c->s.N, rank, nranks);
    d->ks = ra_params_slice(&p, lay, c->s.M, rank, nranks);
    if (data_alloc(c, d) != 0) {
        data_free(d);
        return -1;
    }
    data_fill(c, d);
    return 0;
}

/* ---- Running and judging a case --------------------------------------- */

/* Sums over this rank's rows, then over all ranks: squared errors,
 * squares of the reference and entries per tensor (o, dq, dk, dv), rows
 * whose emptiness or finiteness differs from the reference; and the
 * largest lse error. The sums come first, TALLY_SUMS doubles, for one
 * MPI_SUM. */
enum { T_O, T_DQ, T_DK, T_DV, NT };
enum { TALLY_SUMS = 3 * NT + 1 };
typedef struct {
    double err2[NT], ref2[NT], cnt[NT], bad;
    double lse;
} mx_tally;

static void tally_add(mx_tally *t, int which, const float *got,
                      const double *ref, int64_t len)
{
    for (int64_t i = 0; i < len; i++) {
        const double e = (double)got[i] - ref[i];
        t->err2[which] += e * e;
        t->ref2[which] += ref[i] * ref[i];
    }
    t->cnt[which] += (double)len;
}

/* This rank's query rows: o, lse and (backward) dq. */
static void tally_queries(const mx_case *c, const mx_data *d, const mref_out *r,
                          mx_tally *t)
{
    const ra_shape *s = &c->s;
    const int64_t n = d->qs.count, H = s->H, D = s->D, Dv = s->Dv;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t i = 0; i < n; i++) {
            const int64_t gi = ra_slice_pos(&d->qs, i);
            for (int64_t h = 0; h < H; h++) {
                const double want = r->lse[(b * H + h) * s->N + gi];
                const double got = d->lse[(b * H + h) * n + i];
                const float *o = d->o + ((b * n + i) * H + h) * Dv;
                int empty = 1;
                for (int64_t e = 0; e < Dv; e++)
                    empty &= o[e] == 0.0f;
                if (want == -INFINITY)
                    t->bad += !(got == -INFINITY && empty);
                else if (!isfinite(got))
                    t->bad += 1;
                else
                    t->lse = fmax(t->lse, fabs(got - want));
                tally_add(t, T_O, o, r->o + ((b * s->N + gi) * H + h) * Dv, Dv);
                if (c->backward)
                    tally_add(t, T_DQ, d->dq + ((b * n + i) * H + h) * D,
                              r->dq + ((b * s->N + gi) * H + h) * D, D);
            }
        }
}

/* This rank's key rows of dk and dv. */
static void tally_keys(const mx_case *c, const mx_data *d, const mref_out *r,
                       mx_tally *t)
{
    const ra_shape *s = &c->s;
    const int64_t m = d->ks.count, G = s->G, D = s->D, Dv = s->Dv;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t j = 0; j < m; j++) {
            const int64_t row = b * s->M + ra_slice_pos(&d->ks, j);
            tally_add(t, T_DK, d->dk + (b * m + j) * G * D, r->dk + row * G * D,
                      G * D);
            tally_add(t, T_DV, d->dv + (b * m + j) * G * Dv,
                      r->dv + row * G * Dv, G * Dv);
        }
}

/* What a case came to, the same on every rank. */
typedef struct {
    int refused; /* refused as it had to be */
    int failed;
    double err[NT]; /* relative Frobenius errors */
    double lse, bad;
    int blind;     /* ran, but no row saw two keys */
    char why[200]; /* a failure other than the numbers */
} mx_verdict;

/* The error of a tensor relative to its norm, or to REL_FLOOR per entry
 * where the reference is smaller: a gradient the reference makes exactly
 * 0 (a row that sees one key has dS = 0) comes out of fp32 as rounding
 * noise, judged then as an absolute error below REL_FLOOR * TOL_GRAD. */
static double rel_err(const mx_tally *t, int which)
{
    const double floor2 = t->cnt[which] * REL_FLOOR * REL_FLOOR;
    if (t->cnt[which] == 0.0)
        return 0.0;
    return sqrt(t->err2[which] / fmax(t->ref2[which], floor2));
}

/* Compares with the reference and judges, over all ranks. */
static void judge_numbers(const mx_case *c, const mx_data *d,
                          const ra_params *p, mx_verdict *v)
{
    const mref_in in = ref_input(c, d, p);
    mref_out r;
    mx_tally t = {{0}}, g;
    if (mref_compute(&in, &r) != 0)
        t.bad = INFINITY; /* no reference: the case fails */
    else {
        tally_queries(c, d, &r, &t);
        if (c->backward)
            tally_keys(c, d, &r, &t);
    }
    mref_free(&r);
    v->blind = d->blind;
    MPI_Allreduce(&t, &g, TALLY_SUMS, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&t.lse, &g.lse, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < NT; i++)
        v->err[i] = rel_err(&g, i);
    v->lse = g.lse;
    v->bad = g.bad;
    v->failed = !(v->err[T_O] < (c->bf16 ? TOL_BF16 : TOL_O)) ||
                !(v->lse < (c->bf16 ? TOL_BF16 : TOL_LSE)) ||
                !(v->bad == 0.0);
    for (int i = T_DQ; c->backward && i < NT; i++)
        v->failed |= !(v->err[i] < (c->bf16 ? TOL_BF16_GRAD : TOL_GRAD));
}

/* Whether every rank holds `ok`; otherwise the reason, rank 0's words. */
static int all_ok(int ok, mx_verdict *v, const char *what)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all && !v->why[0])
        snprintf(v->why, sizeof v->why, "%s: %s", what, ra_error_message());
    return all;
}

/* The refusal a case must meet on every rank, from ra_call_forward and
 * ra_call_strategy_check alike: RA_ERR_ARG, a message holding `want`. */
static void judge_refusal(ra_status st, ra_status chk, const char *want,
                          mx_verdict *v)
{
    const char *msg = ra_error_message();
    const int ok = st == RA_ERR_ARG && chk == RA_ERR_ARG && strstr(msg, want);
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    v->refused = all;
    v->failed = !all;
    if (!all)
        snprintf(v->why, sizeof v->why,
                 "must be refused naming '%s': "
                 "forward %s, strategy check %s: %s",
                 want, ra_status_str(st), ra_status_str(chk), msg);
}

/* The masks of a case on this rank. */
static ra_masks masks_of(const mx_case *c, const mx_data *d)
{
    return (ra_masks){c->lens ? d->lens : NULL,
                      c->lens ? d->lens + c->s.B : NULL,
                      c->segs ? d->lqseg : NULL, c->segs ? d->lkseg : NULL};
}

/* The forward (status st, strategy check chk) and then the backward of a
 * case that must run, judged against the reference under p. */
static void run_numbers(const mx_case *c, mx_data *d, const ra_params *p,
                        ra_status st, ra_status chk, mx_verdict *v)
{
    const ra_masks mk = masks_of(c, d);
    int ok = all_ok(st == RA_OK && chk == RA_OK, v, "forward or check");
    if (ok && c->backward)
        ok = all_ok(ra_call_backward(MPI_COMM_WORLD, &c->s, p, &mk,
                                     &(ra_qkv){d->lq, d->lk, d->lv},
                                     &(ra_grads){d->o, d->lse, d->ldout,
                                                 d->dq, d->dk, d->dv, NULL},
                                     NULL) == RA_OK,
                    v, "backward");
    if (ok)
        judge_numbers(c, d, p, v);
    else
        v->failed = 1;
}

static mx_verdict run_case(const mx_case *c)
{
    mx_verdict v = {0};
    mx_data d;
    if (!all_ok(data_make(c, &d) == 0, &v, "test data: out of memory")) {
        v.failed = 1;
        return v;
    }
    const ra_params p = params_of(c, &d);
    const ra_masks mk = masks_of(c, &d);
    const char *want = case_refusal(c);
    const ra_status chk = ra_call_strategy_check(MPI_COMM_WORLD, &c->s, &p,
                                                 c->segs);
    /* o and lse start as NaN: rows that see no key must be written too */
    const int64_t no = c->s.B * d.qs.count * c->s.H;
    for (int64_t i = 0; i < no * c->s.Dv; i++)
        d.o[i] = NAN;
    for (int64_t i = 0; i < no; i++)
        d.lse[i] = NAN;
    const ra_status st = ra_call_forward(MPI_COMM_WORLD, &c->s, &p, &mk,
                                         &(ra_qkv){d.lq, d.lk, d.lv},
                                         &(ra_out){d.o, d.lse, NULL}, NULL);
    if (want)
        judge_refusal(st, chk, want, &v);
    else
        run_numbers(c, &d, &p, st, chk, &v);
    data_free(&d);
    return v;
}

/* ---- Reports (rank 0 alone prints) ------------------------------------ */

static void case_describe(const mx_case *c, char *buf, size_t len)
{
    const ra_shape *s = &c->s;
    snprintf(buf, len,
             "%s layout=%s mask=%s pad=%s rope=%s alibi=%s align=%s "
             "score=%s%s B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld "
             "u=%lld tiles=%lldx%lld%s seed=%llu",
             ra_strategy_name(c->strategy), ra_layout_name(c->layout),
             mask_names[c->causal + 2 * c->window],
             pad_names[c->lens + 2 * c->segs], ra_rope_name(c->rope),
             alibi_names[c->alibi], align_names[c->align],
             ra_score_name(c->score), c->bf16 ? " precision=bf16" : "",
             (long long)s->B,
             (long long)s->N, (long long)s->M, (long long)s->H, (long long)s->G,
             (long long)s->D, (long long)s->Dv, (long long)c->ulysses_size,
             (long long)c->block_q, (long long)c->block_kv,
             c->backward ? " +backward" : "", (unsigned long long)c->seed);
}

/* One line per failing matrix case, and for every named case. */
static void report(const mx_case *c, const mx_verdict *v)
{
    if (rank != 0 || (!v->failed && !c->name))
        return;
    char desc[400];
    case_describe(c, desc, sizeof desc);
    const char *verdict = v->failed ? "FAIL" : v->refused ? "REFUSED" : "PASS";
    if (c->name)
        printf("# %-44s %s\n", c->name, verdict);
    else
        printf("FAIL case %d:", c->index);
    printf("  %s\n", desc);
    if (v->why[0])
        printf("    %s\n", v->why);
    else if (!v->refused && c->backward)
        printf("    o %.2e lse %.2e dq %.2e dk %.2e dv %.2e bad rows %g "
               "(limits %.0e %.0e %.0e)\n",
               v->err[T_O], v->lse, v->err[T_DQ], v->err[T_DK], v->err[T_DV],
               v->bad, c->bf16 ? TOL_BF16 : TOL_O,
               c->bf16 ? TOL_BF16 : TOL_LSE,
               c->bf16 ? TOL_BF16_GRAD : TOL_GRAD);
    else if (!v->refused)
        printf("    o %.2e lse %.2e bad rows %g (limits %.0e %.0e)\n",
               v->err[T_O], v->lse, v->bad, c->bf16 ? TOL_BF16 : TOL_O,
               c->bf16 ? TOL_BF16 : TOL_LSE);
}

/* ---- The tests -------------------------------------------------------- */

static uint64_t seed_base(void)
{
    const char *env = getenv("RA_MATRIX_SEED");
    return env && *env ? strtoull(env, NULL, 0) : SEED_DEFAULT;
}

static void test_matrix(void **state)
{
    (void)state;
    static int cases[MAX_CASES * NF];
    const mgen_spec spec = {NF, nlev,
                            1u << F_STRATEGY | 1u << F_MASK | 1u << F_ROPE |
                                1u << F_ALIBI,
                            case_allowed};
    const int n = mgen_cases(&spec, cases, MAX_CASES);
    const int total = n + refusal_count();
    const uint64_t seed = seed_base();
    assert_true(n > 0);
    if (rank == 0)
        printf("# matrix: P=%d, %d cases (%d that must run, %d that must "
               "be refused), base seed %llu\n",
               nranks, total, n, total - n, (unsigned long long)seed);
    int count[6][4] = {{0}}, failed = 0; /* passed, refused, failed, blind */
    int aligned = 0; /* ring cases run with per-sequence alignment */
    const double t0 = MPI_Wtime();
    for (int i = 0; i < total; i++) {
        const mx_case c =
            i < n ? case_of_levels(i, cases + i * NF, seed)
                  : refusal_case(i - n, i, cases + (i - n) * NF, seed);
        const mx_verdict v = run_case(&c);
        report(&c, &v);
        count[strategy_index(c.strategy)][v.failed ? 2 : v.refused]++;
        count[strategy_index(c.strategy)][3] += v.blind;
        aligned += c.align && !v.refused;
        failed += v.failed;
    }
    /* every case that must run, again in bf16 precision */
    int bf16_failed = 0;
    double bf16_worst = 0.0;
    for (int i = 0; i < n; i++) {
        mx_case c = case_of_levels(i, cases + i * NF, seed);
        c.bf16 = 1;
        const mx_verdict v = run_case(&c);
        report(&c, &v);
        bf16_failed += v.failed;
        if (!v.failed)
            bf16_worst = fmax(bf16_worst, fmax(v.err[T_O], v.lse));
    }
    if (rank == 0)
        printf("# matrix bf16: P=%d, %d of %d cases failed, worst o or lse "
               "error %.2e (limit %.0e)\n", nranks, bf16_failed, n,
               bf16_worst, TOL_BF16);
    failed += bf16_failed;
    for (int k = 0; rank == 0 && k < 6; k++)
        printf("# %-9s %3d passed %3d refused %3d failed (%d blind: no row "
               "sees two keys)\n",
               ra_strategy_name(strategies[k]), count[k][0], count[k][1],
               count[k][2], count[k][3]);
    if (rank == 0)
        printf("# matrix: P=%d, %d of %d cases failed (%d ran aligned per "
               "sequence), %.1f s\n", nranks, failed, total, aligned,
               MPI_Wtime() - t0);
    assert_int_equal(failed, 0);
}

/* The library's default ALiBi slopes are those of the paper's rule
 * (mref_alibi_slopes, written from it), for H = 1 .. 64, to 1e-13
 * relative (the rule's sequence is up to 64 rounded products); and two
 * head counts spelled out: 8 (a power of two) and 6 (4's, then 8's first
 * and third). */
static void test_alibi_slopes(void **state)
{
    (void)state;
    double mine[64], lib[64];
    static const double h8[8] = {0x1p-1, 0x1p-2, 0x1p-3, 0x1p-4,
                                 0x1p-5, 0x1p-6, 0x1p-7, 0x1p-8};
    static const double h6[6] = {0x1p-2, 0x1p-4, 0x1p-6,
                                 0x1p-8, 0x1p-1, 0x1p-3};
    int bad = 0, any = 0;
    for (int64_t H = 1; H <= 64; H++) {
        mref_alibi_slopes(H, mine);
        ra_alibi_slopes(H, lib);
        for (int64_t h = 0; h < H; h++)
            bad |= !(fabs(mine[h] - lib[h]) <= 1e-13 * mine[h]);
        for (int64_t h = 0; h < H && (H == 8 || H == 6); h++)
            bad |= mine[h] != (H == 8 ? h8[h] : h6[h]);
    }
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# ALiBi default slopes, H = 1..64, against the paper's "
               "rule: %s\n",
               any ? "FAIL" : "PASS");
    assert_false(any);
}

/* ---- The named regressions of issue 22 -------------------------------- */

/* One regression: a strategy, a shape (Dv = D) and the features it got
 * wrong; ALiBi with the default slopes. */
typedef struct {
    const char *id, *desc;
    ra_strategy strategy;
    int64_t B, N, M, H, G, D;
    ra_rope rope;
    int causal, alibi, backward;
} named_case;

static const named_case regressions[] = {
    {"tree_alibi", "tree + ALiBi", RA_STRATEGY_TREE, 2, 113, 203, 6, 2, 64,
     RA_ROPE_NONE, 0, 1, 0},
    {"allgather_rope_half_causal", "allgather + RoPE half + causal",
     RA_STRATEGY_ALLGATHER, 1, 131, 131, 4, 2, 32, RA_ROPE_HALF, 1, 0, 0},
    {"tree_decoding_rope_half_alibi", "tree, decoding N = 1, RoPE half + ALiBi",
     RA_STRATEGY_TREE, 2, 1, 257, 6, 2, 64, RA_ROPE_HALF, 0, 1, 0},
    {"ulysses_alibi", "ulysses + ALiBi", RA_STRATEGY_ULYSSES, 2, 77, 77, 4, 2,
     32, RA_ROPE_NONE, 0, 1, 0},
    {"backward_ulysses_rope_half_causal",
     "backward: ulysses + RoPE half + causal", RA_STRATEGY_ULYSSES, 2, 77, 77,
     4, 2, 32, RA_ROPE_HALF, 1, 0, 1},
    {"backward_allgather_alibi", "backward: allgather + ALiBi",
     RA_STRATEGY_ALLGATHER, 2, 61, 89, 4, 2, 32, RA_ROPE_NONE, 0, 1, 1},
    {"backward_hybrid_rope", "backward: hybrid + RoPE interleaved",
     RA_STRATEGY_HYBRID, 2, 77, 77, 4, 2, 32, RA_ROPE_INTERLEAVED, 0, 0, 1},
};

#define NREGRESSIONS (sizeof regressions / sizeof regressions[0])

/* state: the named_case to run. */
static void test_regression(void **state)
{
    const named_case *r = *state;
    mx_case c = case_blank();
    c.name = r->desc;
    c.strategy = r->strategy;
    c.s = (ra_shape){r->B, r->N, r->M, r->H, r->G, r->D, r->D, 0};
    c.seed = 22100u + (uint64_t)(r - regressions);
    c.block_q = 16; /* several tiles at these sizes */
    c.block_kv = 24;
    c.rope = r->rope;
    c.causal = r->causal;
    c.alibi = r->alibi;
    c.backward = r->backward;
    if (r->strategy == RA_STRATEGY_HYBRID) /* two groups of 2 at P = 4 */
        c.ulysses_size = nranks % 2 ? 1 : 2;
    const mx_verdict v = run_case(&c);
    report(&c, &v);
    assert_false(v.failed);
}

/* ---- Per-sequence alignment (issue 22 item 5) ------------------------ */

/* A ring case with each sequence aligned on its own lengths: the masks and
 * encodings that place queries, in the combinations the covering design
 * need not hold together; forward and backward against the reference. */
typedef struct {
    const char *id, *desc;
    int64_t B, N, M;
    int causal, window, lens, segs, alibi;
    ra_rope rope;
    ra_layout layout;
} align_named;

static const align_named align_cases[] = {
    {"align_lens_causal_window", "align: lens, causal+window, N < M", 2, 37,
     101, 1, 1, 1, 0, 0, RA_ROPE_NONE, RA_LAYOUT_CONTIGUOUS},
    {"align_segments_causal_rope_half",
     "align: segments (unequal q/k runs), causal, RoPE half, N > M", 2, 101,
     37, 1, 0, 0, 1, 0, RA_ROPE_HALF, RA_LAYOUT_ZIGZAG},
    {"align_segments_window_alibi",
     "align: segments (unequal q/k runs), window, ALiBi, N < M", 2, 37, 101,
     0, 1, 0, 1, 1, RA_ROPE_NONE, RA_LAYOUT_STRIPED},
    {"align_lens_causal_alibi_rope", "align: lens, causal, ALiBi + RoPE "
     "interleaved, N < M", 2, 61, 89, 1, 0, 1, 0, 1, RA_ROPE_INTERLEAVED,
     RA_LAYOUT_ZIGZAG},
    {"align_segments_lens_causal_window",
     "align: segments and lens, causal+window, N < M", 2, 37, 101, 1, 1, 1,
     1, 0, RA_ROPE_HALF, RA_LAYOUT_CONTIGUOUS},
};

#define NALIGN (sizeof align_cases / sizeof align_cases[0])

static mx_case align_case(const align_named *a, int align)
{
    mx_case c = case_blank();
    c.name = a->desc;
    c.strategy = RA_STRATEGY_RING;
    c.layout = a->layout;
    c.s = (ra_shape){a->B, a->N, a->M, 4, 2, 16, 11, 0};
    c.seed = 22200u + (uint64_t)(a - align_cases);
    c.block_q = 16; /* several tiles at these sizes */
    c.block_kv = 24;
    c.causal = a->causal;
    c.window = a->window;
    c.left = 9;
    c.right = 3;
    c.lens = a->lens;
    c.segs = a->segs;
    c.alibi = a->alibi;
    c.rope = a->rope;
    c.align = align;
    return c;
}

/* state: the align_named to run, per-sequence aligned. */
static void test_align(void **state)
{
    const mx_case c = align_case(*state, 1);
    const mx_verdict v = run_case(&c);
    report(&c, &v);
    assert_false(v.failed);
}

/* The regression of the option itself: on one problem (lens, causal,
 * N < M) the tensor's and the sequences' alignments both match their own
 * reference, and their outputs differ (by far more than rounding), so
 * the option does change which keys a query sees. */
static void test_align_differs(void **state)
{
    (void)state;
    mx_case c = align_case(&align_cases[0], 0);
    mx_verdict v[2] = {{0}, {0}};
    mx_data d;
    float *o0 = NULL;
    double diff = 0.0, all = 0.0;
    int ok = data_make(&c, &d) == 0, every = 0;
    const int64_t no = c.s.B * d.qs.count * c.s.H * c.s.Dv;
    ok = ok && (o0 = malloc(sizeof(float) * (size_t)(no + 1)));
    MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    assert_true(every);
    for (int align = 0; align < 2; align++) {
        c.align = align;
        const ra_params p = params_of(&c, &d);
        const ra_masks mk = masks_of(&c, &d);
        const ra_status st = ra_call_forward(MPI_COMM_WORLD, &c.s, &p, &mk,
                                             &(ra_qkv){d.lq, d.lk, d.lv},
                                             &(ra_out){d.o, d.lse, NULL},
                                             NULL);
        run_numbers(&c, &d, &p, st, RA_OK, &v[align]);
        for (int64_t x = 0; x < no; x++)
            diff = align ? fmax(diff, fabs((double)o0[x] - d.o[x])) : diff;
        if (!align)
            memcpy(o0, d.o, sizeof(float) * (size_t)no);
    }
    MPI_Allreduce(&diff, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# align: tensor %s, per-sequence %s, outputs differ by %.3g "
               "(must exceed 0.01)\n", v[0].failed ? "FAIL" : "PASS",
               v[1].failed ? "FAIL" : "PASS", all);
    free(o0);
    data_free(&d);
    assert_false(v[0].failed || v[1].failed);
    assert_true(all > 0.01);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    struct CMUnitTest tests[NREGRESSIONS + NALIGN + 3] = {
        cmocka_unit_test(test_alibi_slopes),
    };
    for (size_t i = 0; i < NREGRESSIONS; i++)
        tests[i + 1] = (struct CMUnitTest){regressions[i].id, test_regression,
                                           NULL, NULL, (void *)&regressions[i]};
    for (size_t i = 0; i < NALIGN; i++)
        tests[NREGRESSIONS + 1 + i] =
            (struct CMUnitTest){align_cases[i].id, test_align, NULL, NULL,
                                (void *)&align_cases[i]};
    tests[NREGRESSIONS + NALIGN + 1] =
        (struct CMUnitTest)cmocka_unit_test(test_align_differs);
    tests[NREGRESSIONS + NALIGN + 2] =
        (struct CMUnitTest)cmocka_unit_test(test_matrix);
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
