/* cmd_verify.c: `ringattn verify`: an output file against the fp64
 * reference, on every query row or on a seeded random sample of rows. The
 * checked rows are split over the ranks; each rank reads the whole K and V of
 * the batches its rows belong to (a checking tool: O(M) memory per rank). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "cli.h"
#include "h5io.h"
#include "internal.h"
#include "compare.h"
#include "kernel.h"
#include "tally.h"

#define RA_STR(x) #x
#define RA_XSTR(x) RA_STR(x) /* a macro's value as a string */

/* This rank's comparison with the reference (the one error tally) and the
 * NaN values of /o and /lse in any row, checked or not. */
typedef struct {
    ra_tally cmp;
    double nans;
} tally;

/* What one check needs besides the tensors: the run's rules and masks. */
typedef struct {
    const ra_shape *s;
    h5io_run_attrs run;
    ra_ref_score score;
    cli_score_inputs weights;
    ra_h5_masks masks;                 /* lens (B) or NULL, validated */
    const int64_t *q_lens, *kv_lens;   /* masks.q_lens, masks.kv_lens */
    const char *q_seg_name, *kv_seg_name; /* datasets, or NULL */
} check_ctx;

/* Query rows to check, as flat indices b * N + i, ascending. */
static int64_t *pick_rows(const ra_shape *s, int64_t want, uint64_t seed,
                          int64_t *count)
{
    const int64_t total = s->B * s->N;
    if (want <= 0 || want >= total) {
        int64_t *all = malloc(sizeof(int64_t) * (size_t)total);
        for (int64_t r = 0; all && r < total; r++)
            all[r] = r;
        *count = total;
        return all;
    }
    /* Selection sampling (Knuth's algorithm S): sorted, distinct, seeded. */
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)want);
    int64_t taken = 0;
    for (int64_t r = 0; rows && r < total && taken < want; r++) {
        double u = (double)(ra_random_u64(seed, RA_STREAM_SAMPLE, (uint64_t)r) >> 11) *
                   0x1.0p-53;
        if ((double)(total - r) * u < (double)(want - taken))
            rows[taken++] = r;
    }
    *count = taken;
    return rows;
}

/* Compares one query row (all heads) of batch b: q (H, D), o (H, Dv),
 * lse (H) against the reference with k (M, G, D), v (M, G, Dv) and the
 * segment ids of the row (q_seg, one) and of every key (k_seg, M). */
static void check_row(const check_ctx *c, int64_t b, int64_t i,
                      const double *q, const double *k, const double *v,
                      const double *o, const double *lse,
                      const int64_t *q_seg, const int64_t *k_seg, double *ref,
                      double *scores, tally *t)
{
    const ra_shape *s = c->s;
    const int64_t Dk = ra_shape_dk(s);
    const ra_mask mk = {.causal = c->run.causal, .diag = s->M - s->N,
                        .window = c->run.window, .left = c->run.window_left,
                        .right = c->run.window_right, .qpos = &i,
                        .q_lens = c->q_lens ? c->q_lens + b : NULL,
                        .kv_lens = c->kv_lens ? c->kv_lens + b : NULL,
                        .q_seg = q_seg, .k_seg = k_seg};
    for (int64_t h = 0; h < s->H; h++) {
        const int64_t g = h / (s->H / s->G);
        double lref;
        ra_reference_scored(&c->score, 1, s->M, s->D, s->Dv, &mk, q + h * s->D,
                          s->D, k + g * Dk, s->G * Dk, v + g * s->Dv,
                          s->G * s->Dv, ref, s->Dv, &lref, scores);
        for (int64_t d = 0; d < s->Dv; d++)
            ra_tally_o(&t->cmp, o[h * s->Dv + d], ref[d]);
        ra_tally_lse(&t->cmp, lse[h], lref);
    }
}

enum { RUN_MAX = 256 }; /* query rows read per request */

/* The buffers of one rank's check: K and V of one batch, and a run of up
 * to RUN_MAX query rows of q, o, lse and their segment ids. */
typedef struct {
    double *k, *v, *q, *o, *lse, *lrow, *ref, *scores;
    int64_t *k_seg, *q_seg;
} check_bufs;

static void bufs_free(check_bufs *b)
{
    free(b->k);
    free(b->v);
    free(b->q);
    free(b->o);
    free(b->lse);
    free(b->lrow);
    free(b->ref);
    free(b->scores);
    free(b->k_seg);
    free(b->q_seg);
}

static ra_status bufs_alloc(const check_ctx *c, check_bufs *b)
{
    const ra_shape *s = c->s;
    const size_t d = sizeof(double);
    b->k = malloc(d * (size_t)(s->M * s->G * ra_shape_dk(s)));
    b->v = malloc(d * (size_t)(s->M * s->G * s->Dv));
    b->q = malloc(d * (size_t)(RUN_MAX * s->H * s->D));
    b->o = malloc(d * (size_t)(RUN_MAX * s->H * s->Dv));
    b->lse = malloc(d * (size_t)(RUN_MAX * s->H));
    b->lrow = malloc(d * RUN_MAX);
    b->ref = malloc(d * (size_t)s->Dv);
    b->scores = malloc(d * (size_t)s->M);
    b->k_seg = c->kv_seg_name ? malloc(sizeof(int64_t) * (size_t)s->M) : NULL;
    b->q_seg = c->q_seg_name ? malloc(sizeof(int64_t) * RUN_MAX) : NULL;
    if (!b->k || !b->v || !b->q || !b->o || !b->lse || !b->lrow || !b->ref ||
        !b->scores || (c->kv_seg_name && (!b->k_seg || !b->q_seg)))
        return ra_error_set(RA_ERR_NOMEM, "verify: cannot allocate K and V of "
                                          "one batch");
    return RA_OK;
}

/* The order the run read q, k, v in when they have no axes attribute. */
static ra_axes verify_axes(const check_ctx *c)
{
    return strcmp(c->run.qkv_layout, "bhnd") == 0 ? RA_AXES_BHND
                                                   : RA_AXES_BNHD;
}

/* The datasets the run read, as its output records them (names point
 * into c->run). */
static ra_h5_source verify_source(const check_ctx *c)
{
    const char *const *m = (const char *const[]){
        c->run.mask_sets[0], c->run.mask_sets[1], c->run.mask_sets[2],
        c->run.mask_sets[3], c->run.mask_sets[4]};
    return (ra_h5_source){
        .q = c->run.names[0], .k = c->run.names[1], .v = c->run.names[2],
        .axes = verify_axes(c), .q_lens = m[0][0] ? m[0] : NULL,
        .kv_lens = m[1][0] ? m[1] : NULL, .segments = m[2][0] ? m[2] : NULL,
        .q_segments = m[3][0] ? m[3] : NULL,
        .kv_segments = m[4][0] ? m[4] : NULL};
}

/* Checks the len consecutive rows i0.. of batch b, reading K and V of the
 * batch unless *loaded_b says they are there. */
static ra_status check_run(const char *in, const char *out, const check_ctx *c,
                           int64_t b, int64_t i0, int64_t len,
                           int64_t *loaded_b, check_bufs *w, tally *t)
{
    const ra_shape *s = c->s;
    const ra_axes qkv = verify_axes(c);
    ra_status st = RA_OK;
    int present;
    if (b != *loaded_b) {
        if ((st = h5io_read_rows_as(in, c->run.names[1], qkv, b, 0, s->M,
                                    w->k)) != RA_OK ||
            (st = h5io_read_rows_as(in, c->run.names[2], qkv, b, 0, s->M,
                                    w->v)) != RA_OK ||
            (w->k_seg && (st = h5io_read_segments(in, c->kv_seg_name, b, 0,
                                                  s->M, w->k_seg, &present))))
            return st;
        *loaded_b = b;
    }
    if ((st = h5io_read_rows_as(in, c->run.names[0], qkv, b, i0, len,
                                w->q)) != RA_OK ||
        (st = h5io_read_o_rows(out, b, i0, len, w->o)) != RA_OK ||
        (w->q_seg && (st = h5io_read_segments(in, c->q_seg_name, b, i0, len,
                                              w->q_seg, &present))))
        return st;
    for (int64_t h = 0; h < s->H; h++) {
        if ((st = h5io_read_lse(out, b, h, i0, len, w->lrow)) != RA_OK)
            return st;
        for (int64_t r = 0; r < len; r++)
            w->lse[r * s->H + h] = w->lrow[r];
    }
    for (int64_t r = 0; r < len; r++)
        check_row(c, b, i0 + r, w->q + r * s->H * s->D, w->k, w->v,
                  w->o + r * s->H * s->Dv, w->lse + r * s->H,
                  w->q_seg ? w->q_seg + r : NULL, w->k_seg, w->ref, w->scores,
                  t);
    return RA_OK;
}

/* Checks this rank's share rows[0..n) (sorted flat indices), in runs of
 * consecutive rows within one batch. */
static ra_status check_share(const char *in, const char *out,
                             const check_ctx *c, const int64_t *rows,
                             int64_t n, tally *t)
{
    const int64_t N = c->s->N;
    check_bufs w = {0};
    int64_t loaded_b = -1;
    ra_status st = bufs_alloc(c, &w);
    for (int64_t a = 0; a < n && st == RA_OK;) {
        const int64_t b = rows[a] / N;
        int64_t len = 1;
        while (a + len < n && len < RUN_MAX && rows[a + len] == rows[a] + len &&
               (rows[a] + len) / N == b)
            len++;
        st = check_run(in, out, c, b, rows[a] % N, len, &loaded_b, &w, t);
        a += len;
    }
    bufs_free(&w);
    return st;
}

/* Counts the NaN values of /o and /lse in the query rows mine (flat
 * indices b * N + i), every one of them whether checked or not: a NaN fails
 * the output even where the sample does not look. */
static ra_status nan_scan(const char *out, const ra_shape *s, ra_range mine,
                          tally *t)
{
    double *o = malloc(sizeof(double) * (size_t)(RUN_MAX * s->H * s->Dv));
    double *l = malloc(sizeof(double) * RUN_MAX);
    ra_status st = o && l ? RA_OK
                          : ra_error_set(RA_ERR_NOMEM, "verify: out of memory");
    const int64_t end = mine.start + mine.count;
    for (int64_t a = mine.start; a < end && st == RA_OK;) {
        const int64_t b = a / s->N, i0 = a % s->N;
        int64_t len = s->N - i0 < RUN_MAX ? s->N - i0 : RUN_MAX;
        len = end - a < len ? end - a : len;
        st = h5io_read_o_rows(out, b, i0, len, o);
        for (int64_t x = 0; st == RA_OK && x < len * s->H * s->Dv; x++)
            t->nans += isnan(o[x]);
        for (int64_t h = 0; st == RA_OK && h < s->H; h++) {
            st = h5io_read_lse(out, b, h, i0, len, l);
            for (int64_t x = 0; st == RA_OK && x < len; x++)
                t->nans += isnan(l[x]);
        }
        a += len;
    }
    free(o);
    free(l);
    return st;
}

/* ---- the driver ---------------------------------------------------------- */

typedef struct {
    const char *in, *out;
    int64_t sample, seed;
    int all;
    double tol;
} verify_opts;

static const cli_opt verify_own[] = {
    {.name = "--in", .kind = CLI_TEXT, .meta = "FILE",
     .offset = CLI_FIELD(verify_opts, in, const char *),
     .help = "the input of the run"},
    {.name = "--out", .kind = CLI_TEXT, .meta = "FILE",
     .offset = CLI_FIELD(verify_opts, out, const char *),
     .help = "the output to check"},
    {.name = "--sample", .kind = CLI_INT, .meta = "K",
     .offset = CLI_FIELD(verify_opts, sample, int64_t),
     .lo = 1, .hi = INT64_MAX,
     .help = "check K random query rows (all heads, all keys)"},
    {.name = "--all", .kind = CLI_FLAG,
     .offset = CLI_FIELD(verify_opts, all, int),
     .help = "check every row, however long it takes"},
    {.name = "--seed", .kind = CLI_INT, .meta = "S",
     .offset = CLI_FIELD(verify_opts, seed, int64_t), .lo = 0, .hi = INT64_MAX,
     .def = "1", .help = "seed of the sample"},
    {.name = "--tol", .kind = CLI_REAL, .meta = "X",
     .offset = CLI_FIELD(verify_opts, tol, double), .rlo = 0, .open_lo = 1,
     .rhi = 1e300, .def = RA_XSTR(RA_TOLERANCE), .help = "tolerance"},
    {0},
};

static const cli_spec verify_spec = {
    .name = "verify",
    .usage =
    "usage: [mpirun -np P] ringattn verify --in IN.h5 --out OUT.h5 [options]\n"
    "\n"
    "Recomputes attention in fp64 for the query rows of OUT.h5 (all of them\n"
    "when that costs under 2^32 multiply-adds, else a random sample) with the\n"
    "causal flag, window, score and scale recorded in OUT.h5 and the mask\n"
    "datasets of IN.h5 (lens, segments), and compares /o and /lse. The\n"
    "recorded parameters and the masks are checked as run checks them.\n"
    "Exit 0 when the relative error ||o - ref|| / ||ref|| and the LSE error\n"
    "max |lse - ref| / max(1, |ref|) are both below the tolerance and no\n"
    "value of /o or /lse is NaN (every row is scanned for NaN, sampled or\n"
    "not), 1 if not.\n",
    .groups = {{verify_own, 0}},
};

/* The run's parameters as OUT.h5 records them, checked as run checks its
 * options, and the score's inputs. */
static ra_status run_params(const char *in, const char *out, check_ctx *c)
{
    ra_params p;
    ra_params_default(&p);
    p.causal = c->run.causal;
    p.window = c->run.window;
    p.window_left = c->run.window_left;
    p.window_right = c->run.window_right;
    p.scale = c->run.scale;
    p.sigma = c->run.sigma;
    ra_status st = ra_score_parse(c->run.score, &p.score);
    if (st != RA_OK)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute score: unknown score "
                            "'%s'", out, c->run.score);
    if ((st = cli_params_check(&p, c->s, out)) != RA_OK ||
        (st = cli_score_setup(in, c->s, &p, &c->weights)) != RA_OK)
        return st;
    c->score = (ra_ref_score){p.score, p.scale, p.sigma,
                              p.score == RA_SCORE_ADDITIVE
                                  ? &c->weights.additive : NULL,
                              ra_shape_dk(c->s)};
    return RA_OK;
}

/* Everything before the check: the shapes of both files agree, the run's
 * parameters and the masks pass run's checks. Collective. */
static ra_status verify_validate(const cli_ctx *ctx, const verify_opts *o,
                                 ra_shape *s, check_ctx *c)
{
    int64_t dims_o[4], dims_l[3];
    ra_status st = ra_agree(ctx->comm, h5io_read_run_attrs(o->out, &c->run));
    if (st != RA_OK)
        return st;
    const ra_h5_source src = verify_source(c);
    if ((st = ra_h5_read_shape_from(ctx->comm, o->in, &src, s, NULL)) !=
        RA_OK)
        return st;
    if ((st = run_params(o->in, o->out, c)) == RA_OK &&
        (st = h5io_read_out_shape(o->out, dims_o, dims_l)) == RA_OK &&
        (dims_o[0] != s->B || dims_o[1] != s->N || dims_o[2] != s->H ||
         dims_o[3] != s->Dv || dims_l[0] != s->B || dims_l[1] != s->H ||
         dims_l[2] != s->N))
        st = ra_error_set(RA_ERR_INPUT, "%s: /o and /lse do not match the "
                          "shape of %s", o->out, o->in);
    if (st == RA_OK)
        st = h5io_segment_names_from(o->in, &src, &c->q_seg_name,
                                     &c->kv_seg_name);
    if ((st = ra_agree(ctx->comm, st)) != RA_OK)
        return st;
    st = ra_h5_read_masks_from(ctx->comm, o->in, &src, s,
                               RA_LAYOUT_CONTIGUOUS, &c->masks);
    c->q_lens = c->masks.q_lens;
    c->kv_lens = c->masks.kv_lens;
    return st;
}

static int verify_report(const cli_ctx *ctx, const verify_opts *o,
                         const check_ctx *c, int64_t nrows, const tally *t)
{
    const ra_shape *s = c->s;
    ra_tally g;
    double nans = 0;
    if (ra_tally_allreduce(ctx->comm, &t->cmp, &g) != RA_OK ||
        MPI_Allreduce(&t->nans, &nans, 1, MPI_DOUBLE, MPI_SUM, ctx->comm) !=
            MPI_SUCCESS)
        return cli_fail(ctx, CLI_EXIT_RUNTIME, "verify: summing the errors "
                                               "over the ranks failed");
    /* a 16-bit /o holds o rounded to its type: the check accepts that
     * rounding (half an ulp relative), never less than --tol */
    const double ulp = strcmp(c->run.out_dtype, "f16") == 0    ? 0x1p-11
                       : strcmp(c->run.out_dtype, "bf16") == 0 ? 0x1p-8
                                                               : 0;
    const double tol = o->tol > ulp ? o->tol : ulp;
    const int pass = ra_tally_ok(&g, tol) && nans == 0;
    const int gauss = strcmp(c->run.score, "gaussian") == 0;
    if (ctx->rank == 0)
        printf("ringattn verify: %s: %lld rows x %lld heads (%s), causal %s, "
               "window %s, masks %s, score %s, %s %.6g: max abs err %.3e, "
               "rel err %.3e, lse err %.3e, bad rows %.0f, NaN values in "
               "all rows %.0f, tolerance %.1e%s: %s\n", o->out,
               (long long)nrows, (long long)s->H,
               nrows == s->B * s->N ? "all" : "sampled",
               c->run.causal ? "yes" : "no", c->run.window ? "yes" : "no",
               c->run.masks[0] ? c->run.masks : "none", c->run.score,
               gauss ? "sigma" : "scale", gauss ? c->run.sigma : c->run.scale,
               g.max_abs_o, g.rel_o, g.max_lse,
               (double)g.bad_inf, nans, tol,
               ulp > o->tol ? " (the rounding of a 16-bit /o)" : "",
               pass ? "PASS" : "FAIL");
    return pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}
int cmd_verify(const cli_ctx *ctx, int argc, char **argv)
{
    verify_opts o = {0};
    int code = cli_parse_or_exit(ctx, &verify_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    if (!o.in || !o.out)
        return cli_fail(ctx, CLI_EXIT_USAGE, "verify: --in and --out are "
                                             "required");
    if (o.all && o.sample)
        return cli_fail(ctx, CLI_EXIT_USAGE, "verify: --all and --sample "
                                             "exclude each other");
    ra_shape s;
    check_ctx c = {.s = &s};
    int64_t *rows = NULL, nrows = 0;
    tally t = {0};
    ra_status st = verify_validate(ctx, &o, &s, &c);
    if (st == RA_OK) {
        const double cost = (double)s.B * s.N * s.H * s.M * (s.D + s.Dv);
        const int64_t want = o.all ? 0 : o.sample ? o.sample
                             : cost <= 4294967296.0 ? 0 : 1024;
        if (!(rows = pick_rows(&s, want, (uint64_t)o.seed, &nrows)))
            st = ra_error_set(RA_ERR_NOMEM, "verify: cannot allocate the row "
                                            "list");
    }
    if ((st = ra_agree(ctx->comm, st)) == RA_OK) {
        const ra_range mine = ra_shard_range(nrows, ctx->rank, ctx->nranks);
        st = check_share(o.in, o.out, &c, rows + mine.start, mine.count, &t);
        if (st == RA_OK)
            st = nan_scan(o.out, &s, ra_shard_range(s.B * s.N, ctx->rank,
                                                    ctx->nranks), &t);
        st = ra_agree(ctx->comm, st);
    }
    code = st == RA_OK ? verify_report(ctx, &o, &c, nrows, &t)
                       : cli_fail_status(ctx, st);
    free(rows);
    ra_h5_masks_free(&c.masks);
    cli_score_free(&c.weights);
    return code;
}
