/* cmd_verify_backward.c: `ringattn verify --backward`: a gradient file
 * (/dq /dk /dv of run --backward) against fp64 gradients from the
 * definition, on every row or on seeded random samples of query rows (dq)
 * and key rows (dk, dv).
 *
 * Cost: a gradient entry needs its query row's LSE and Drow, i.e. a pass
 * over all keys, and a key's dk and dv sum over every query that sees it.
 * So each rank takes its share of every sampled batch's query rows, finds
 * their statistics with one blocked fp64 forward of them, and adds their
 * pairs with the sampled keys to the keys' dk and dv (summed over the
 * ranks) and their sampled rows' dq (io/verify_grads.c): the check costs
 * one fp64 forward of the batches that hold a sampled row plus a share
 * that grows with the samples, split over the ranks, printed before it
 * starts. The additive score's weights' gradients are sums over every
 * pair: with that score the check works in units of one (batch, kv head)
 * with the naive reference (one row at a time, each rank holding a batch),
 * and /dw_q, /dw_k, /dw_v are checked whole. RoPE is applied to the fp64
 * rows and the gradients taken back by the rotation at minus the
 * positions; ALiBi comes from the reference. With sinks (the run's record
 * sinks_dataset of IN.h5) every row joins the check of /dsinks, whole:
 * d sink_h = -sum_i exp(sink_h - lse_i) (do_i . o_i) from the fp64 lse and
 * o, which include the sink's column; so every batch is folded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "backward.h"
#include "band.h"
#include "cli.h"
#include "h5io.h"
#include "internal.h"
#include "verify.h"
#include "verify_cost.h"

enum { VB_SAMPLE = 256 }; /* rows of each side checked without --sample */


static const cli_spec vb_spec = {
    .name = "verify --backward",
    .usage =
    "usage: [mpirun -np P] ringattn verify --backward --in IN.h5 --out G.h5\n"
    "                                     [--all | --sample K]\n"
    "\n"
    "Recomputes dq, dk, dv in fp64 with the mask rules, score, RoPE and\n"
    "ALiBi that G.h5 records and the masks, /additive weights and\n"
    "/alibi_slopes of IN.h5, and compares the checked rows of each (and\n"
    "for the additive score /dw_q, /dw_k, /dw_v whole, with sinks /dsinks\n"
    "whole, from a fold of every batch): exit 0 when every\n"
    "relative error ||g - ref|| / ||ref|| is below the tolerance and no\n"
    "checked value is NaN or infinite.\n"
    "Without --sample or --all: 256 random query rows and 256 key rows. The\n"
    "check costs one fp64 forward of the batches holding a sampled row plus\n"
    "the samples' share, split over the ranks; its predicted cost is printed\n"
    "before it starts. An entry outside the sample is not looked at: a wrong\n"
    "entry is found with the chance its row is sampled, K / (B N) for dq,\n"
    "K / (B M) for dk and dv.\n",
    .groups = {{cli_check_opts, 0}},
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

/* The problem: shape, rules and masks (lens whole, segment names). */
typedef struct {
    ra_shape s;
    h5io_run_attrs run;
    ra_params p;          /* score, weights, RoPE, ALiBi of the run */
    ra_ref_score score;
    h5io_additive score_in;
    double *slopes;       /* /alibi_slopes of the input, or NULL */
    float *sinks;         /* the run's sinks from the input, or NULL */
    double *dw;           /* additive: this rank's dw_q | dw_k | dw_v */
    ra_h5_masks masks;
    const char *q_seg, *kv_seg;
    unsigned char *pick_q, *pick_k; /* (B N), (B M): rows to compare */
} vb_ctx;

/* Marks want random rows of total (all when want >= total or all). */
static unsigned char *pick(int64_t total, int64_t want, int all,
                           uint64_t seed, uint64_t salt)
{
    unsigned char *m = calloc((size_t)total + 1, 1);
    for (int64_t r = 0, taken = 0; m && r < total; r++) {
        const double u = (double)(ra_random_u64(seed, RA_STREAM_SAMPLE + salt,
                                                (uint64_t)r) >> 11) *
                         0x1.0p-53;
        if (all || want >= total ||
            (double)(total - r) * u < (double)(want - taken)) {
            m[r] = 1;
            taken++;
        }
    }
    return m;
}

/* One unit's tensors of batch b, kv head g, in double. */
typedef struct {
    double *q, *k, *v, *dout, *dq, *dk, *dv; /* file rows of batch b */
    double *hq, *hk, *hv, *hdo, *rq, *rk, *rv, *p; /* one head's */
    int64_t *qseg, *kseg;
    int64_t *qat;   /* (N) the queries' aligned positions (ra_align) */
    ra_key_id *keys; /* (N + M) scratch of ra_align_batch */
} vb_bufs;

static void vb_bufs_free(vb_bufs *w)
{
    double **d[15] = {&w->q, &w->k, &w->v, &w->dout, &w->dq, &w->dk, &w->dv,
                      &w->hq, &w->hk, &w->hv, &w->hdo, &w->rq, &w->rk,
                      &w->rv, &w->p};
    for (int i = 0; i < 15; i++)
        free(*d[i]);
    free(w->qseg);
    free(w->kseg);
    free(w->qat);
    free(w->keys);
}

static ra_status vb_bufs_alloc(const ra_shape *s, vb_bufs *w)
{
    const int64_t N = s->N, M = s->M, Dk = ra_shape_dk(s);
    const int64_t len[15] = {N * s->H * s->D, M * s->G * Dk,
                             M * s->G * s->Dv, N * s->H * s->Dv,
                             N * s->H * s->D, M * s->G * Dk,
                             M * s->G * s->Dv, N * s->D, M * Dk, M * s->Dv,
                             N * s->Dv, N * s->D, M * Dk, M * s->Dv, M};
    double **d[15] = {&w->q, &w->k, &w->v, &w->dout, &w->dq, &w->dk, &w->dv,
                      &w->hq, &w->hk, &w->hv, &w->hdo, &w->rq, &w->rk,
                      &w->rv, &w->p};
    int ok = 1;
    for (int i = 0; i < 15; i++)
        ok &= (*d[i] = malloc(sizeof(double) * (size_t)(len[i] + 1))) != NULL;
    w->qseg = malloc(sizeof(int64_t) * (size_t)(N + 1));
    w->kseg = malloc(sizeof(int64_t) * (size_t)(M + 1));
    w->qat = malloc(sizeof(int64_t) * (size_t)(N + 1));
    w->keys = malloc(sizeof(ra_key_id) * (size_t)(N + M + 1));
    if (!ok || !w->qseg || !w->kseg || !w->qat || !w->keys)
        return ra_error_set(RA_ERR_NOMEM, "verify --backward: cannot allocate "
                            "one batch of the tensors");
    return RA_OK;
}

/* Batch b of the input and the gradient file, all heads, in double. */
static ra_status vb_read(const cli_check *o, const vb_ctx *c, int64_t b,
                         vb_bufs *w)
{
    const int64_t N = c->s.N, M = c->s.M;
    const ra_axes ax = h5io_qkv_layout_parse(c->run.qkv_layout);
    int present = 0;
    ra_status st;
    if ((st = h5io_read_rows_as(o->in, "/q", ax, b, 0, N, w->q)) != RA_OK ||
        (st = h5io_read_rows_as(o->in, "/k", ax, b, 0, M, w->k)) != RA_OK ||
        (st = h5io_read_rows_as(o->in, "/v", ax, b, 0, M, w->v)) != RA_OK ||
        (st = h5io_read_rows_as(o->in, "/do", ax, b, 0, N,
                                w->dout)) != RA_OK ||
        (st = h5io_read_rows_as(o->out, "/dq", RA_AXES_BNHD, b, 0, N,
                                w->dq)) != RA_OK ||
        (st = h5io_read_rows_as(o->out, "/dk", RA_AXES_BNHD, b, 0, M,
                                w->dk)) != RA_OK ||
        (st = h5io_read_rows_as(o->out, "/dv", RA_AXES_BNHD, b, 0, M,
                                w->dv)) != RA_OK)
        return st;
    if (c->q_seg &&
        ((st = h5io_read_segments(o->in, c->q_seg, b, 0, N, w->qseg,
                                  &present)) != RA_OK ||
         (st = h5io_read_segments(o->in, c->kv_seg, b, 0, M, w->kseg,
                                  &present)) != RA_OK))
        return st;
    const int seq = c->p.num.align == RA_ALIGN_SEQUENCE;
    ra_align_batch(seq && c->q_seg ? w->qseg : NULL, w->kseg, N, M,
                   seq && c->masks.q_lens ? c->masks.q_lens[b] : N,
                   seq && c->masks.kv_lens ? c->masks.kv_lens[b] : M, w->keys,
                   w->qat);
    return RA_OK;
}

/* A (len, heads, dim) block of rows. */
typedef struct {
    const double *x;
    int64_t len, heads, dim;
} row_block;

/* Head h of block a as a (len, dim) array. */
static void head_of(row_block a, int64_t h, double *out)
{
    for (int64_t i = 0; i < a.len; i++)
        memcpy(out + i * a.dim, a.x + (i * a.heads + h) * a.dim,
               sizeof(double) * (size_t)a.dim);
}

/* Adds the picked rows of head h of got against ref (len, dim) to err2,
 * ref2 and the non-finite count t[6]. */
static void compare(row_block got, int64_t h, const double *ref,
                    const unsigned char *picked, int which, double *t)
{
    for (int64_t i = 0; i < got.len; i++) {
        if (!picked[i])
            continue;
        for (int64_t d = 0; d < got.dim; d++) {
            const double g = got.x[(i * got.heads + h) * got.dim + d];
            const double r = ref[i * got.dim + d];
            t[6] += !isfinite(g);
            t[which] += (g - r) * (g - r);
            t[3 + which] += r * r;
        }
    }
}

/* RoPE on the len rows (dim D) of one head at positions pos[i] (NULL:
 * 0, 1, 2, ...) times sign (-1: the transpose, for gradients). */
static void rope_rows(const vb_ctx *c, double *x, int64_t len,
                      const int64_t *pos, int64_t sign)
{
    for (int64_t i = 0; i < len && c->p.num.rope != RA_ROPE_NONE; i++)
        ra_rope_row_ref(c->p.num.rope, c->p.num.rope_base, x + i * c->s.D,
                        c->s.D, sign * (pos ? pos[i] : i));
}

/* The fp64 gradients of unit (b, g) against the file's picked rows. */
static void vb_unit(const vb_ctx *c, vb_bufs *w, int64_t b, int64_t g,
                    double *t)
{
    const ra_shape *s = &c->s;
    const int64_t N = s->N, M = s->M, D = s->D, Dv = s->Dv;
    const int64_t Dk = ra_shape_dk(s), per = s->H / s->G;
    const int64_t A = c->p.num.additive ? c->p.num.additive->A : 0;
    const ra_mask mk = {.causal = c->run.causal, .diag = M - N,
                        .window = c->run.window, .left = c->run.window_left,
                        .right = c->run.window_right,
                        .q_lens = c->masks.q_lens ? c->masks.q_lens + b : NULL,
                        .kv_lens = c->masks.kv_lens ? c->masks.kv_lens + b
                                                    : NULL,
                        .q_seg = c->q_seg ? w->qseg : NULL,
                        .k_seg = c->q_seg ? w->kseg : NULL, .qalign = w->qat};
    ra_ref_score sc = c->score;
    head_of((row_block){w->k, M, s->G, Dk}, g, w->hk);
    head_of((row_block){w->v, M, s->G, Dv}, g, w->hv);
    rope_rows(c, w->hk, M, NULL, 1);
    memset(w->rk, 0, sizeof(double) * (size_t)(M * Dk));
    memset(w->rv, 0, sizeof(double) * (size_t)(M * Dv));
    for (int64_t h = g * per; h < (g + 1) * per; h++) {
        head_of((row_block){w->q, N, s->H, D}, h, w->hq);
        head_of((row_block){w->dout, N, s->H, Dv}, h, w->hdo);
        rope_rows(c, w->hq, N, w->qat, 1);
        sc.alibi_slope = ra_params_alibi_slope(&c->p, s->H, h);
        const ra_ref_grads gr = {w->hq, w->hk, w->hv, w->hdo, D, Dk, Dv, Dv,
                                 w->rq, w->rk, w->rv, D, Dk, Dv,
                                 c->dw, A ? c->dw + A * D : NULL,
                                 A ? c->dw + A * (D + Dk) : NULL};
        ra_reference_backward(&sc, N, M, D, Dv, &mk, &gr, w->p);
        rope_rows(c, w->rq, N, w->qat, -1);
        compare((row_block){w->dq, N, s->H, D}, h, w->rq, c->pick_q + b * N,
                0, t);
    }
    rope_rows(c, w->rk, M, NULL, -1);
    compare((row_block){w->dk, M, s->G, Dk}, g, w->rk, c->pick_k + b * M, 1,
            t);
    compare((row_block){w->dv, M, s->G, Dv}, g, w->rv, c->pick_k + b * M, 2,
            t);
}

/* Whether unit (b, any g) holds a picked row. */
static int unit_needed(const vb_ctx *c, int64_t b)
{
    if (c->dw) /* the weights' gradients sum over every unit */
        return 1;
    for (int64_t i = 0; i < c->s.N; i++)
        if (c->pick_q[b * c->s.N + i])
            return 1;
    for (int64_t j = 0; j < c->s.M; j++)
        if (c->pick_k[b * c->s.M + j])
            return 1;
    return 0;
}

/* This rank's units of the naive check: (b, g) with (b G + g) mod P ==
 * rank; its predicted cost printed first. */
static ra_status vb_units(const cli_ctx *ctx, const cli_check *o,
                          const vb_ctx *c, double *t)
{
    const ra_shape *s = &c->s;
    const double units = ceil((double)(s->B * s->G) / ctx->nranks);
    const double pairs = (double)s->N * s->M * (s->H / s->G) * units;
    verify_cost_print(ctx, "verify --backward (additive score, every pair)",
                      pairs * (double)(3 * s->D + 2 * s->Dv), 2 * pairs);
    vb_bufs w = {0};
    ra_status st = vb_bufs_alloc(&c->s, &w);
    int64_t loaded = -1;
    for (int64_t u = ctx->rank; st == RA_OK && u < c->s.B * c->s.G;
         u += ctx->nranks) {
        const int64_t b = u / c->s.G, g = u % c->s.G;
        if (!unit_needed(c, b))
            continue;
        if (b != loaded && (st = vb_read(o, c, b, &w)) == RA_OK)
            loaded = b;
        if (st == RA_OK)
            vb_unit(c, &w, b, g, t);
    }
    vb_bufs_free(&w);
    return st;
}

/* The recorded problem as the fp64 passes of verify see it (fp32: nothing
 * rounded). */
static verify_ctx vb_verify_ctx(const vb_ctx *c)
{
    verify_ctx v = {.s = &c->s, .run = c->run, .p = c->p, .score = c->score,
                    .q_lens = c->masks.q_lens, .kv_lens = c->masks.kv_lens,
                    .q_seg_name = c->q_seg, .kv_seg_name = c->kv_seg};
    v.p.num.sigma = c->run.sigma;
    return v;
}

/* x[0..n) summed over the ranks, in pieces an int counts. */
static ra_status sum_ranks(MPI_Comm comm, double *x, int64_t n)
{
    for (int64_t a = 0; a < n; a += 1 << 26) {
        const int len = (int)(n - a < (1 << 26) ? n - a : (1 << 26));
        if (MPI_Allreduce(MPI_IN_PLACE, x + a, len, MPI_DOUBLE, MPI_SUM,
                          comm) != MPI_SUCCESS)
            return ra_error_set(RA_ERR_MPI, "verify --backward: summing the "
                                            "keys' gradients failed");
    }
    return RA_OK;
}

/* The sampled rows and keys of batch b: keys[0..*nk), and how many query
 * rows of it are sampled. */
static int64_t batch_picks(const vb_ctx *c, int64_t b, int64_t *keys,
                           int64_t *nk)
{
    int64_t nq = 0;
    *nk = 0;
    for (int64_t j = 0; j < c->s.M; j++)
        if (c->pick_k[b * c->s.M + j])
            keys[(*nk)++] = j;
    for (int64_t i = 0; i < c->s.N; i++)
        nq += c->pick_q[b * c->s.N + i];
    return nq;
}

/* The sampled check's predicted cost on the most loaded rank. */
static void vb_cost(const cli_ctx *ctx, const vb_ctx *c, int64_t *keys)
{
    const ra_shape *s = &c->s;
    const double f = verify_pair_fraction(c->run.causal, c->run.window,
                                          c->run.window_left,
                                          c->run.window_right, s->M);
    const double rows = ceil((double)s->N / ctx->nranks), H = (double)s->H;
    const double D = (double)s->D, Dv = (double)s->Dv;
    double madds = 0, exps = 0;
    for (int64_t b = 0, nk; b < s->B; b++) {
        const double nq = (double)batch_picks(c, b, keys, &nk);
        if (nq == 0 && nk == 0 && !c->p.num.sinks)
            continue;
        const double q = ceil(nq / ctx->nranks) * s->M * f * H;
        const double k = rows * (double)nk * f * H;
        const double all = rows * s->M * f * H;
        madds += all * (D + Dv) + k * (2 * D + 2 * Dv) + q * (2 * D + Dv);
        exps += all + k + q;
    }
    verify_cost_print(ctx, "verify --backward", madds, exps);
}

/* The ranks' sums of d sinks ref (H) against the file's /dsinks: t[9],
 * t[10] get the squared error and norm, t[6] the non-finite entries.
 * Collective. */
static ra_status vb_dsinks(const cli_ctx *ctx, const cli_check *o,
                           const vb_ctx *c, double *ref, double *t)
{
    const int64_t H = c->s.H;
    float *got = malloc(sizeof(float) * (size_t)H);
    int present = 0;
    ra_status st = got ? h5io_read_weights(o->out, "/dsinks", 1, &H, got,
                                           &present)
                       : ra_error_set(RA_ERR_NOMEM, "verify --backward: out "
                                      "of memory");
    if (st == RA_OK && !present)
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset /dsinks: not found (the "
                          "run recorded sinks_dataset %s)", o->out,
                          c->run.sinks_dataset);
    if ((st = ra_agree(ctx->comm, st)) == RA_OK)
        st = sum_ranks(ctx->comm, ref, H);
    for (int64_t h = 0; st == RA_OK && ctx->rank == 0 && h < H; h++) {
        t[6] += !isfinite(got[h]);
        t[9] += (got[h] - ref[h]) * (got[h] - ref[h]);
        t[10] += ref[h] * ref[h];
    }
    free(got);
    return st;
}

/* The sampled check: every batch holding a sampled row (with sinks every
 * batch), each rank taking
 * its share of the query rows; collective. */
static ra_status vb_sampled(const cli_ctx *ctx, const cli_check *o,
                            const vb_ctx *c, double *t)
{
    const ra_shape *s = &c->s;
    const int64_t G = s->G, Dk = ra_shape_dk(s), Dv = s->Dv;
    const verify_ctx v = vb_verify_ctx(c);
    int64_t *keys = malloc(sizeof(int64_t) * (size_t)(s->M + 1));
    const int64_t nkv = s->M * G * (Dk + Dv);
    double *dkv = calloc((size_t)(nkv + s->H + 1), sizeof(double));
    ra_status st = ra_agree(ctx->comm, keys && dkv ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "verify --backward: "
                                           "cannot allocate the keys' "
                                           "gradients"));
    if (st == RA_OK)
        vb_cost(ctx, c, keys);
    const ra_range mine = ra_shard_range(s->N, ctx->rank, ctx->nranks);
    const int blas = ra_blas_enter(1); /* one rank per core */
    for (int64_t b = 0, nk = 0; b < s->B && st == RA_OK; b++) {
        if (batch_picks(c, b, keys, &nk) == 0 && nk == 0 && !c->p.num.sinks)
            continue;
        memset(dkv, 0, sizeof(double) * (size_t)(nk * G * (Dk + Dv)));
        const verify_bwd_batch x = {o->out, c->pick_q + b * s->N, keys, nk,
                                    dkv, dkv + nk * G * Dk, t, dkv + nkv};
        st = ra_agree(ctx->comm, verify_grads_share(o->in, &v, b, mine, &x));
        if (st == RA_OK)
            st = sum_ranks(ctx->comm, dkv, nk * G * (Dk + Dv));
        if (st == RA_OK && ctx->rank == 0)
            st = verify_grads_keys(&v, b, &x);
        st = ra_agree(ctx->comm, st);
    }
    ra_blas_leave(blas);
    if (st == RA_OK && c->p.num.sinks)
        st = vb_dsinks(ctx, o, c, dkv + nkv, t);
    free(keys);
    free(dkv);
    return st;
}

/* The additive score's check works in naive units, the others sampled. */
static ra_status vb_check(const cli_ctx *ctx, const cli_check *o,
                          const vb_ctx *c, double *t)
{
    return c->dw ? ra_agree(ctx->comm, vb_units(ctx, o, c, t))
                 : vb_sampled(ctx, o, c, t);
}

/* One gradient dataset of out has the dims the input's shape gives. */
static ra_status dims_match(const char *out, const char *name,
                            const int64_t want[4], const char *in)
{
    int rank = 0, present = 0;
    int64_t dims[4];
    ra_status st = h5io_dataset_dims(out, name, &rank, dims, &present);
    if (st != RA_OK)
        return st;
    if (!present)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: not found (not a "
                            "gradient file?)", out, name);
    for (int i = 0; i < 4; i++)
        if (rank != 4 || dims[i] != want[i])
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s does not match "
                                "the shape of %s", out, name, in);
    return RA_OK;
}

/* The score, RoPE and ALiBi that out records, with the input's additive
 * weights and ALiBi slopes; not collective. */
static ra_status vb_rules(const cli_check *o, vb_ctx *c)
{
    const h5io_run_attrs *r = &c->run;
    ra_params_default(&c->p);
    if (ra_score_parse(r->score, &c->p.num.score) != RA_OK)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute score: '%s' is not "
                            "a score", o->out, r->score);
    if (ra_rope_parse(r->rope, &c->p.num.rope) != RA_OK ||
        !(r->rope_base > 0 && isfinite(r->rope_base)))
        return ra_error_set(RA_ERR_INPUT, "%s: attributes rope, rope_base: "
                            "'%s', %g is no rotary embedding", o->out,
                            r->rope, r->rope_base);
    c->p.num.rope_base = r->rope_base;
    c->p.num.alibi = r->alibi != 0;
    if (strcmp(r->align, "tensor") != 0 && strcmp(r->align, "sequence") != 0)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute align: unknown "
                            "alignment '%s' (expected tensor or sequence)",
                            o->out, r->align);
    c->p.num.align = r->align[0] == 's' ? RA_ALIGN_SEQUENCE : RA_ALIGN_TENSOR;
    if (c->p.num.score == RA_SCORE_DOT && !(r->scale > 0 && isfinite(r->scale)))
        return ra_error_set(RA_ERR_INPUT, "%s: attribute scale: %g is not a "
                            "finite number > 0", o->out, r->scale);
    ra_status st = h5io_score_dims(o->in, &c->s, &c->p);
    if (st == RA_OK)
        st = h5io_additive_read(o->in, &c->s, &c->p, &c->score_in);
    if (st == RA_OK)
        st = h5io_sinks_read(o->in, r->sinks_dataset[0] ? r->sinks_dataset
                                                        : NULL,
                             &c->s, &c->p, &c->sinks);
    if (st == RA_OK && c->p.num.sinks && c->p.num.additive)
        st = ra_error_set(RA_ERR_INPUT, "verify --backward: %s: the additive "
                          "score with sinks (attribute sinks_dataset) is not "
                          "checked: its naive reference gives no /dsinks",
                          o->out);
    if (st == RA_OK && c->p.num.alibi && strcmp(r->alibi_slopes, "standard"))
        st = h5io_alibi_read(o->in, &c->s, &c->p, &c->slopes);
    const int64_t A = c->p.num.additive ? c->p.num.additive->A : 0;
    if (st == RA_OK && A &&
        !(c->dw = calloc((size_t)(A * (c->s.D + ra_shape_dk(&c->s) + 1)),
                         sizeof(double))))
        st = ra_error_set(RA_ERR_NOMEM, "verify --backward: cannot allocate "
                          "the weights' gradients");
    ra_features_copy(&c->p.num, &r->features);
    c->score = (ra_ref_score){.score = c->p.num.score,
                              .scale = r->scale,
                              .sigma = r->sigma,
                              .additive = c->p.num.additive,
                              .Dk = ra_shape_dk(&c->s),
                              .alibi = c->p.num.alibi,
                              .features = ra_features_of(&c->p.num)};
    return st;
}

/* Shapes of both files, the recorded rules, the masks; collective. */
static ra_status vb_validate(const cli_ctx *ctx, const cli_check *o, vb_ctx *c)
{
    ra_shape *s = &c->s;
    /* the gradients record the order the run read q, k, v in */
    ra_status st = ra_agree(ctx->comm, h5io_read_run_attrs(o->out, &c->run));
    const ra_h5_source src = {
        .axes = h5io_qkv_layout_parse(c->run.qkv_layout),
        .tuning = &ctx->tuning};
    if (st == RA_OK && (o->precision_set || strcmp(c->run.precision, "fp32") ||
                        strcmp(c->run.wire, "fp32")))
        st = ra_error_set(RA_ERR_ARG, "verify --backward: %s: judges fp32 "
                          "gradients only (--precision, or attributes "
                          "precision %s, wire %s)", o->out, c->run.precision,
                          c->run.wire);
    if (st == RA_OK)
        st = ra_h5_read_shape(ctx->comm, o->in, &src, s, NULL);
    if (st != RA_OK)
        return st;
    const int64_t qd[4] = {s->B, s->N, s->H, s->D};
    const int64_t kd[4] = {s->B, s->M, s->G, ra_shape_dk(s)};
    const int64_t vd[4] = {s->B, s->M, s->G, s->Dv};
    if ((st = dims_match(o->out, "/dq", qd, o->in)) == RA_OK &&
        (st = dims_match(o->out, "/dk", kd, o->in)) == RA_OK &&
        (st = dims_match(o->out, "/dv", vd, o->in)) == RA_OK)
        st = vb_rules(o, c);
    if (st == RA_OK)
        st = h5io_segment_names(o->in, &c->q_seg, &c->kv_seg);
    if ((st = ra_agree(ctx->comm, st)) != RA_OK)
        return st;
    st = ra_h5_read_masks(ctx->comm, o->in, &src, s, RA_LAYOUT_CONTIGUOUS,
                          NULL, &c->masks);
    if (st != RA_OK)
        return st;
    const int64_t k = o->sample ? o->sample : VB_SAMPLE;
    c->pick_q = pick(s->B * s->N, k, o->all, (uint64_t)o->seed, 0);
    c->pick_k = pick(s->B * s->M, k, o->all, (uint64_t)o->seed, 1);
    return ra_agree(ctx->comm, c->pick_q && c->pick_k ? RA_OK
                    : ra_error_set(RA_ERR_NOMEM, "verify --backward: cannot "
                                   "allocate the row samples"));
}

/* The additive weights' gradients: the ranks' sums against the file's
 * /dw_q, /dw_k, /dw_v; t[7], t[8] get the squared error and norm, t[6]
 * the non-finite entries. Collective. */
static ra_status vb_weights(const cli_ctx *ctx, const cli_check *o,
                            const vb_ctx *c, double *t)
{
    const int64_t A = c->p.num.additive->A, D = c->s.D, Dk = ra_shape_dk(&c->s);
    const int64_t len = A * (D + Dk + 1);
    float *got = malloc(sizeof(float) * (size_t)(len + 1));
    const int64_t dq[2] = {A, D}, dk[2] = {A, Dk}, dv[1] = {A};
    const char *const names[3] = {"/dw_q", "/dw_k", "/dw_v"};
    const int64_t *const dims[3] = {dq, dk, dv};
    const int64_t at[3] = {0, A * D, A * (D + Dk)};
    ra_status st = got ? RA_OK : ra_error_set(RA_ERR_NOMEM, "verify "
                                              "--backward: out of memory");
    for (int i = 0; i < 3 && st == RA_OK; i++) {
        int present = 0;
        st = h5io_read_weights(o->out, names[i], i == 2 ? 1 : 2, dims[i],
                               got + at[i], &present);
        if (st == RA_OK && !present)
            st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: not found (the "
                              "additive score's weight gradients)", o->out,
                              names[i]);
    }
    if ((st = ra_agree(ctx->comm, st)) == RA_OK &&
        MPI_Allreduce(MPI_IN_PLACE, c->dw, (int)len, MPI_DOUBLE, MPI_SUM,
                      ctx->comm) != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "verify --backward: summing the "
                                      "weights' gradients failed");
    for (int64_t i = 0; st == RA_OK && ctx->rank == 0 && i < len; i++) {
        t[6] += !isfinite(got[i]);
        t[7] += (got[i] - c->dw[i]) * (got[i] - c->dw[i]);
        t[8] += c->dw[i] * c->dw[i];
    }
    free(got);
    return st;
}

static int vb_report(const cli_ctx *ctx, const cli_check *o, const vb_ctx *c,
                     const double *t)
{
    double g[11];
    if (MPI_Allreduce(t, g, 11, MPI_DOUBLE, MPI_SUM, ctx->comm) != MPI_SUCCESS)
        return cli_fail(ctx, CLI_EXIT_RUNTIME, "verify --backward: summing "
                                               "the errors failed");
    double e[5];
    int pass = g[6] == 0;
    for (int i = 0; i < 5; i++) {
        static const int at[5][2] = {{0, 3}, {1, 4}, {2, 5}, {7, 8}, {9, 10}};
        const double err = g[at[i][0]], ref = g[at[i][1]];
        e[i] = ref > 0 ? sqrt(err / ref) : sqrt(err);
        pass &= e[i] < o->tol;
    }
    char dw[80] = "";
    if (c->dw)
        snprintf(dw, sizeof dw, ", weights %.3e", e[3]);
    if (c->p.num.sinks)
        snprintf(dw + strlen(dw), sizeof dw - strlen(dw), ", dsinks %.3e",
                 e[4]);
    if (ctx->rank == 0)
        printf("ringattn verify --backward: %s: %s rows, causal %s, window "
               "%s, masks %s, score %s, rope %s, alibi %s: rel err dq %.3e, "
               "dk %.3e, dv %.3e%s, non-finite %.0f, tolerance %.1e: %s\n",
               o->out, o->all ? "all" : "sampled",
               c->run.causal ? "yes" : "no", c->run.window ? "yes" : "no",
               c->run.masks[0] ? c->run.masks : "none", c->run.score,
               c->run.rope, c->run.alibi ? "yes" : "no", e[0], e[1], e[2], dw,
               g[6], o->tol, pass ? "PASS" : "FAIL");
    return pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}

int cmd_verify_backward(const cli_ctx *ctx, int argc, char **argv)
{
    cli_check o;
    int code = cli_check_parse(ctx, &vb_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    vb_ctx c = {0};
    double t[11] = {0};
    ra_status st = vb_validate(ctx, &o, &c);
    if (st == RA_OK)
        st = vb_check(ctx, &o, &c, t);
    if (st == RA_OK && c.dw)
        st = vb_weights(ctx, &o, &c, t);
    code = st == RA_OK ? vb_report(ctx, &o, &c, t)
                       : cli_fail_status(ctx, st);
    free(c.pick_q);
    free(c.pick_k);
    free(c.dw);
    free(c.slopes);
    free(c.sinks);
    h5io_additive_free(&c.score_in);
    ra_h5_masks_free(&c.masks);
    return code;
}
