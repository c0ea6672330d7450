/* cmd_verify.c: `ringattn verify`: an output file against the fp64
 * reference, on every query row or on a seeded random sample of rows. The
 * checked rows are split over the ranks; each rank recomputes its share
 * with blocked fp64 BLAS (io/verify_fp64.c), reading K and V in blocks, and
 * scans its share of all rows for NaN. */
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
#include "verify.h"
#include "verify_cost.h"

/* This rank's comparison with the reference (the one error tally) and the
 * NaN values of /o and /lse in any row, checked or not. */
typedef struct {
    ra_tally cmp;
    double nans;
} tally;

/* What one check needs: the recomputation's context and what it owns. */
typedef struct {
    verify_ctx v;
    h5io_additive weights;
    double *slopes;                    /* /alibi_slopes, or NULL */
    float *sinks;                      /* the run's sinks, or NULL */
    ra_h5_masks masks;                 /* lens (B) or NULL, validated */
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

/* Query rows per read of the NaN scan, and the most values of o read at
 * once. */
enum { SCAN_ROWS = 4096, SCAN_VALUES = 1 << 22 };

/* The datasets the run read, as its output records them (names point
 * into run), read under tuning. */
static ra_h5_source verify_source(const h5io_run_attrs *run,
                                  const ra_h5_tuning *tuning)
{
    const char *const *m = (const char *const[]){
        run->mask_sets[0], run->mask_sets[1], run->mask_sets[2],
        run->mask_sets[3], run->mask_sets[4]};
    return (ra_h5_source){
        .q = run->names[0], .k = run->names[1], .v = run->names[2],
        .axes = h5io_qkv_layout_parse(run->qkv_layout),
        .q_lens = m[0][0] ? m[0] : NULL,
        .kv_lens = m[1][0] ? m[1] : NULL, .segments = m[2][0] ? m[2] : NULL,
        .q_segments = m[3][0] ? m[3] : NULL,
        .kv_segments = m[4][0] ? m[4] : NULL, .tuning = tuning};
}

/* Counts the NaN values of /o and /lse in the query rows mine (flat
 * indices b * N + i), every one of them whether checked or not: a NaN fails
 * the output even where the sample does not look. */
static ra_status nan_scan(const char *out, const ra_shape *s, ra_range mine,
                          tally *t)
{
    /* rows per read: SCAN_ROWS, fewer for wide rows (about 32 MiB of o) */
    const int64_t width = s->H * s->Dv;
    const int64_t rows = width * SCAN_ROWS > SCAN_VALUES
                             ? (SCAN_VALUES / width > 0 ? SCAN_VALUES / width : 1)
                             : SCAN_ROWS;
    double *o = malloc(sizeof(double) * (size_t)(rows * width));
    double *l = malloc(sizeof(double) * (size_t)rows);
    ra_status st = o && l ? RA_OK
                          : ra_error_set(RA_ERR_NOMEM, "verify: out of memory");
    const int64_t end = mine.start + mine.count;
    for (int64_t a = mine.start; a < end && st == RA_OK;) {
        const int64_t b = a / s->N, i0 = a % s->N;
        int64_t len = s->N - i0 < rows ? s->N - i0 : rows;
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

static const cli_spec verify_spec = {
    .name = "verify",
    .usage =
    "usage: [mpirun -np P] ringattn verify --in IN.h5 --out OUT.h5 [options]\n"
    "\n"
    "Recomputes attention in fp64 for the query rows of OUT.h5 (all of them\n"
    "when that costs under 2^32 multiply-adds, else a random sample of 1024\n"
    "rows) with the causal flag, window, score, scale, RoPE and ALiBi\n"
    "recorded in OUT.h5 and the mask datasets of IN.h5 (lens, segments), and\n"
    "compares /o and /lse. Under mpirun each rank checks a share of the rows\n"
    "(blocked fp64 BLAS over key blocks); the check's predicted cost is\n"
    "printed before it starts. The recorded parameters and the\n"
    "masks are checked as run checks them. Outputs of run --mha (/y) and of\n"
    "modes it does not know are refused by name.\n"
    "Exit 0 when the relative error ||o - ref|| / ||ref|| and the LSE error\n"
    "max |lse - ref| / max(1, |ref|) are both below the tolerance, there is\n"
    "no bad row and no value of /o or /lse is NaN (every row is scanned for\n"
    "NaN, sampled or not), 1 if not.\n"
    "\n"
    "bad rows: the checked (row, head) pairs whose /lse is -inf, +inf or NaN\n"
    "where the reference is finite, or not -inf where the reference is -inf\n"
    "(the row sees no key), plus the entries of /o that are NaN where the\n"
    "reference is a number. Any bad row fails the check, whatever the errors.\n",
    .groups = {{cli_check_opts, 0}},
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

/* The output must be run's: /o and /lse. Others are refused by name. */
static ra_status output_kind(const char *out)
{
    static const struct {
        const char *dset, *what;
    } known[] = {
        {"/y", "an output of run --mha (/y); verify checks the attention "
               "outputs /o and /lse of run, not the layer"},
        {"/dq", "a backward output (/dq); verify checks forward outputs "
                "(/o, /lse): check gradients with verify --backward"},
    };
    int rank, present;
    int64_t dims[4], ldims[3];
    ra_status st = h5io_dataset_dims(out, "/o", &rank, dims, &present);
    if (st != RA_OK || present ||
        h5io_read_out_shape(out, dims, ldims) == RA_OK) /* under a group */
        return st;
    ra_error_clear();
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        if ((st = h5io_dataset_dims(out, known[i].dset, &rank, dims,
                                    &present)) != RA_OK)
            return st;
        if (present)
            return ra_error_set(RA_ERR_INPUT, "%s: %s", out, known[i].what);
    }
    return ra_error_set(RA_ERR_INPUT, "%s: no dataset /o: not an output of "
                        "ringattn run, which verify checks", out);
}

/* RoPE, ALiBi, score features and sinks as OUT.h5 records them; the slopes and
 * sinks from IN.h5 when the run took them from there. */
static ra_status run_posenc(const char *in, const char *out, check_ctx *c,
                            ra_params *p)
{
    const h5io_run_attrs *r = &c->v.run;
    if (ra_rope_parse(r->rope, &p->num.rope) != RA_OK)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute rope: unknown "
                            "pairing '%s'", out, r->rope);
    p->num.rope_base = r->rope_base;
    p->num.alibi = r->alibi;
    if (strcmp(r->align, "tensor") != 0 && strcmp(r->align, "sequence") != 0)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute align: unknown "
                            "alignment '%s' (expected tensor or sequence)",
                            out, r->align);
    p->num.align = r->align[0] == 's' ? RA_ALIGN_SEQUENCE : RA_ALIGN_TENSOR;
    ra_features_copy(&p->num, &r->features);
    ra_status st = h5io_sinks_read(in, r->sinks_dataset[0] ? r->sinks_dataset
                                                          : NULL,
                                   c->v.s, p, &c->sinks);
    if (st == RA_OK)
        st = h5io_alibi_read(in, c->v.s, p, &c->slopes);
    if (st == RA_OK && p->num.alibi &&
        (strcmp(r->alibi_slopes, "/alibi_slopes") == 0) !=
            !!p->num.alibi_slopes)
        st = ra_error_set(RA_ERR_INPUT,
                          "%s: attribute alibi_slopes: the run "
                          "used %s slopes, but %s %s /alibi_slopes",
                          out, r->alibi_slopes, in,
                          p->num.alibi_slopes ? "has" : "has no");
    return st;
}

/* The run's parameters as OUT.h5 records them, checked as run checks its
 * options, and the score's inputs. */
static ra_status run_params(const char *in, const char *out, check_ctx *c)
{
    ra_params *p = &c->v.p;
    const h5io_run_attrs *r = &c->v.run;
    ra_params_default(p);
    p->num.causal = r->causal;
    p->num.window = r->window;
    p->num.window_left = r->window_left;
    p->num.window_right = r->window_right;
    p->num.scale = r->scale;
    p->num.sigma = r->sigma;
    ra_status st = ra_score_parse(r->score, &p->num.score);
    if (st != RA_OK)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute score: unknown score "
                            "'%s'", out, r->score);
    if ((st = run_posenc(in, out, c, p)) != RA_OK ||
        (st = h5io_score_dims(in, c->v.s, p)) != RA_OK ||
        (st = cli_params_check(p, c->v.s, out)) != RA_OK ||
        (st = h5io_additive_read(in, c->v.s, p, &c->weights)) != RA_OK)
        return st;
    c->v.score = (ra_ref_score){.score = p->num.score,
                                .scale = p->num.scale,
                                .sigma = p->num.sigma,
                                .additive = p->num.additive,
                                .Dk = ra_shape_dk(c->v.s)};
    return RA_OK;
}

/* The run's arithmetic as OUT.h5 records it (precision, wire) or as
 * --precision says: bf16 precision rounds q, k, v and P; a bf16 wire
 * rounds k and v. */
static ra_status run_numerics(const cli_check *o, check_ctx *c)
{
    const h5io_run_attrs *r = &c->v.run;
    ra_precision prec;
    if (ra_precision_parse(r->precision, &prec) != RA_OK)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute precision: unknown "
                            "precision '%s' (expected fp32 or bf16)", o->out,
                            r->precision);
    if (strcmp(r->wire, "fp32") != 0 && strcmp(r->wire, "bf16") != 0)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute wire: unknown wire "
                            "type '%s' (expected fp32 or bf16)", o->out,
                            r->wire);
    if (o->precision_set)
        prec = (ra_precision)o->precision;
    c->v.p.num.precision = prec;
    c->v.round_q = c->v.round_p = prec == RA_PRECISION_BF16;
    c->v.round_kv = c->v.round_q || strcmp(r->wire, "bf16") == 0;
    return RA_OK;
}

/* Everything before the check: the shapes of both files agree, the run's
 * parameters and the masks pass run's checks. Collective. */
static ra_status verify_validate(const cli_ctx *ctx, const cli_check *o,
                                 ra_shape *s, check_ctx *c)
{
    int64_t dims_o[4], dims_l[3];
    ra_status st = ra_agree(ctx->comm, output_kind(o->out));
    if (st == RA_OK)
        st = ra_agree(ctx->comm, h5io_read_run_attrs(o->out, &c->v.run));
    if (st != RA_OK)
        return st;
    const ra_h5_source src = verify_source(&c->v.run, &ctx->tuning);
    if ((st = ra_h5_read_shape(ctx->comm, o->in, &src, s, NULL)) != RA_OK)
        return st;
    if ((st = run_params(o->in, o->out, c)) == RA_OK &&
        (st = run_numerics(o, c)) == RA_OK &&
        (st = h5io_read_out_shape(o->out, dims_o, dims_l)) == RA_OK &&
        (dims_o[0] != s->B || dims_o[1] != s->N || dims_o[2] != s->H ||
         dims_o[3] != s->Dv || dims_l[0] != s->B || dims_l[1] != s->H ||
         dims_l[2] != s->N))
        st = ra_error_set(RA_ERR_INPUT, "%s: /o and /lse do not match the "
                          "shape of %s", o->out, o->in);
    if (st == RA_OK)
        st = h5io_segment_names_from(o->in, &src, &c->v.q_seg_name,
                                     &c->v.kv_seg_name);
    if ((st = ra_agree(ctx->comm, st)) != RA_OK)
        return st;
    st = ra_h5_read_masks(ctx->comm, o->in, &src, s, RA_LAYOUT_CONTIGUOUS,
                          NULL, &c->masks);
    c->v.q_lens = c->masks.q_lens;
    c->v.kv_lens = c->masks.kv_lens;
    return st;
}

static int verify_report(const cli_ctx *ctx, const cli_check *o,
                         const check_ctx *c, int64_t nrows, const tally *t)
{
    const ra_shape *s = c->v.s;
    const h5io_run_attrs *r = &c->v.run;
    ra_tally g;
    double nans = 0;
    if (ra_tally_allreduce(ctx->comm, &t->cmp, &g) != RA_OK ||
        MPI_Allreduce(&t->nans, &nans, 1, MPI_DOUBLE, MPI_SUM, ctx->comm) !=
            MPI_SUCCESS)
        return cli_fail(ctx, CLI_EXIT_RUNTIME, "verify: summing the errors "
                                               "over the ranks failed");
    /* a 16-bit /o holds o rounded to its type: the check accepts that
     * rounding (half an ulp relative), never less than --tol */
    ra_dtype stored = RA_DTYPE_F32;
    (void)ra_dtype_parse(r->out_dtype, &stored); /* unknown: no rounding */
    const double ulp = stored == RA_DTYPE_F16    ? 0x1p-11
                       : stored == RA_DTYPE_BF16 ? 0x1p-8
                                                 : 0;
    const double tol = o->tol > ulp ? o->tol : ulp;
    const int pass = ra_tally_ok(&g, tol) && nans == 0;
    const double tol_o = ra_tally_tol_o(&g, tol);
    const int gauss = strcmp(r->score, "gaussian") == 0;
    if (ctx->rank == 0)
        printf("ringattn verify: %s: %lld rows x %lld heads (%s), causal %s, "
               "window %s, masks %s, score %s, %s %.6g, rope %s, alibi %s: "
               "max abs err %.3e, rel err %.3e, lse err %.3e, bad rows %.0f, "
               "NaN values in all rows %.0f, tolerance %.1e%s, on o %.1e "
               "(precision %s, K/V %s): %s\n",
               o->out, (long long)nrows, (long long)s->H,
               nrows == s->B * s->N ? "all" : "sampled",
               r->causal ? "yes" : "no", r->window ? "yes" : "no",
               r->masks[0] ? r->masks : "none", r->score,
               gauss ? "sigma" : "scale", gauss ? r->sigma : r->scale, r->rope,
               r->alibi ? r->alibi_slopes : "no", g.max_abs_o, g.rel_o,
               g.max_lse, (double)g.bad_inf, nans, tol,
               ulp > o->tol ? " (the rounding of a 16-bit /o)" : "", tol_o,
               ra_precision_name(c->v.p.num.precision),
               c->v.round_kv ? "rounded to bf16" : "fp32",
               pass ? "PASS" : "FAIL");
    return pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}

/* This rank's share of the sampled rows, then of all rows for NaN. */
static ra_status verify_share(const cli_ctx *ctx, const cli_check *o,
                              const check_ctx *c, const int64_t *rows,
                              int64_t nrows, tally *t)
{
    const ra_shape *s = c->v.s;
    const ra_range mine = ra_shard_range(nrows, ctx->rank, ctx->nranks);
    /* consecutive rows skip the key blocks none of them sees; a sample's
     * rows are spread over them */
    const double f = nrows < s->B * s->N ? 1.0
                     : verify_pair_fraction(c->v.run.causal, c->v.run.window,
                                            c->v.run.window_left,
                                            c->v.run.window_right, s->M);
    const double pairs = (double)mine.count * s->M * s->H * f;
    verify_cost_print(ctx, "verify", pairs * (double)(s->D + s->Dv), pairs);
    const int blas = ra_blas_enter(1); /* one rank per core */
    t->cmp.p_unit = c->v.round_p ? RA_BF16_UNIT : 0.0;
    ra_status st = verify_rows(o->in, o->out, &c->v, rows + mine.start,
                               mine.count, &t->cmp);
    ra_blas_leave(blas);
    if (st == RA_OK)
        st = nan_scan(o->out, s, ra_shard_range(s->B * s->N, ctx->rank,
                                                ctx->nranks), t);
    return ra_agree(ctx->comm, st);
}

int cmd_verify(const cli_ctx *ctx, int argc, char **argv)
{
    cli_check o;
    int code = cli_check_parse(ctx, &verify_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    ra_shape s;
    check_ctx c = {.v.s = &s};
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
    if ((st = ra_agree(ctx->comm, st)) == RA_OK)
        st = verify_share(ctx, &o, &c, rows, nrows, &t);
    code = st == RA_OK ? verify_report(ctx, &o, &c, nrows, &t)
                       : cli_fail_status(ctx, st);
    free(rows);
    free(c.slopes);
    free(c.sinks);
    ra_h5_masks_free(&c.masks);
    h5io_additive_free(&c.weights);
    return code;
}
