/* cmd_verify_backward.c: `ringattn verify --backward`: a gradient file
 * (/dq /dk /dv of run --backward) against fp64 gradients from the
 * definition, on every row or on seeded random samples of query rows (dq)
 * and key rows (dk, dv).
 *
 * Cost: a key row's gradient sums over every query that sees it, and each
 * of those needs its own LSE and Drow, i.e. a pass over all keys. So the
 * check works in units of one (batch, kv head): the unit's fp64 gradients
 * for all its rows are one pass of N M (D + Dv) H/G multiply-adds (the
 * cost of one fp64 forward of those heads), units are split over the ranks,
 * and with a sample only the units holding a sampled row are computed.
 * Each rank holds one batch of q, k, v, dO and the gradients (a checking
 * tool: O(N + M) memory per rank). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "backward.h"
#include "cli.h"
#include "h5io.h"
#include "internal.h"

enum { VB_SAMPLE = 256 }; /* rows of each side checked without --sample */

typedef struct {
    cli_check check;
    int backward;
} vb_opts;

static const cli_spec vb_spec = {
    .name = "verify --backward",
    .usage =
    "usage: [mpirun -np P] ringattn verify --backward --in IN.h5 --out G.h5\n"
    "                                     [--all | --sample K]\n"
    "\n"
    "Recomputes dq, dk, dv in fp64 with the mask rules, score and scale that\n"
    "G.h5 records and the mask datasets of IN.h5, and compares the checked\n"
    "rows of each: exit 0 when every relative error ||g - ref|| / ||ref||\n"
    "is below the tolerance and no checked value is NaN or infinite.\n"
    "Without --sample or --all: 256 random query rows and 256 key rows.\n",
    .groups = {{cli_backward_opts, offsetof(vb_opts, backward)},
               {cli_check_opts, offsetof(vb_opts, check)}},
};

/* The problem: shape, rules and masks (lens whole, segment names). */
typedef struct {
    ra_shape s;
    h5io_run_attrs run;
    ra_ref_score score;
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
}

static ra_status vb_bufs_alloc(const ra_shape *s, vb_bufs *w)
{
    const int64_t N = s->N, M = s->M;
    const int64_t len[15] = {N * s->H * s->D, M * s->G * s->D,
                             M * s->G * s->Dv, N * s->H * s->Dv,
                             N * s->H * s->D, M * s->G * s->D,
                             M * s->G * s->Dv, N * s->D, M * s->D, M * s->Dv,
                             N * s->Dv, N * s->D, M * s->D, M * s->Dv, M};
    double **d[15] = {&w->q, &w->k, &w->v, &w->dout, &w->dq, &w->dk, &w->dv,
                      &w->hq, &w->hk, &w->hv, &w->hdo, &w->rq, &w->rk,
                      &w->rv, &w->p};
    int ok = 1;
    for (int i = 0; i < 15; i++)
        ok &= (*d[i] = malloc(sizeof(double) * (size_t)(len[i] + 1))) != NULL;
    w->qseg = malloc(sizeof(int64_t) * (size_t)(N + 1));
    w->kseg = malloc(sizeof(int64_t) * (size_t)(M + 1));
    if (!ok || !w->qseg || !w->kseg)
        return ra_error_set(RA_ERR_NOMEM, "verify --backward: cannot allocate "
                            "one batch of the tensors");
    return RA_OK;
}

/* Batch b of the input and the gradient file, all heads, in double. */
static ra_status vb_read(const cli_check *o, const vb_ctx *c, int64_t b,
                         vb_bufs *w)
{
    const int64_t N = c->s.N, M = c->s.M;
    int present = 0;
    ra_status st;
    if ((st = h5io_read_rows(o->in, "/q", b, 0, N, w->q)) != RA_OK ||
        (st = h5io_read_rows(o->in, "/k", b, 0, M, w->k)) != RA_OK ||
        (st = h5io_read_rows(o->in, "/v", b, 0, M, w->v)) != RA_OK ||
        (st = h5io_read_rows(o->in, "/do", b, 0, N, w->dout)) != RA_OK ||
        (st = h5io_read_rows(o->out, "/dq", b, 0, N, w->dq)) != RA_OK ||
        (st = h5io_read_rows(o->out, "/dk", b, 0, M, w->dk)) != RA_OK ||
        (st = h5io_read_rows(o->out, "/dv", b, 0, M, w->dv)) != RA_OK)
        return st;
    if (c->q_seg &&
        ((st = h5io_read_segments(o->in, c->q_seg, b, 0, N, w->qseg,
                                  &present)) != RA_OK ||
         (st = h5io_read_segments(o->in, c->kv_seg, b, 0, M, w->kseg,
                                  &present)) != RA_OK))
        return st;
    return RA_OK;
}

/* Head h of a (len, heads, dim) row block as a (len, dim) array. */
static void head_of(const double *x, int64_t len, int64_t heads, int64_t h,
                    int64_t dim, double *out)
{
    for (int64_t i = 0; i < len; i++)
        memcpy(out + i * dim, x + (i * heads + h) * dim,
               sizeof(double) * (size_t)dim);
}

/* Adds the picked rows of got (len, heads, dim; head h) against ref
 * (len, dim) to err2, ref2 and the non-finite count t[6]. */
static void compare(const double *got, const double *ref, int64_t len,
                    int64_t heads, int64_t h, int64_t dim,
                    const unsigned char *picked, int which, double *t)
{
    for (int64_t i = 0; i < len; i++) {
        if (!picked[i])
            continue;
        for (int64_t d = 0; d < dim; d++) {
            const double g = got[(i * heads + h) * dim + d];
            const double r = ref[i * dim + d];
            t[6] += !isfinite(g);
            t[which] += (g - r) * (g - r);
            t[3 + which] += r * r;
        }
    }
}

/* The fp64 gradients of unit (b, g) against the file's picked rows. */
static void vb_unit(const vb_ctx *c, vb_bufs *w, int64_t b, int64_t g,
                    double *t)
{
    const ra_shape *s = &c->s;
    const int64_t N = s->N, M = s->M, D = s->D, Dv = s->Dv;
    const int64_t per = s->H / s->G;
    const ra_mask mk = {.causal = c->run.causal, .diag = M - N,
                        .window = c->run.window, .left = c->run.window_left,
                        .right = c->run.window_right,
                        .q_lens = c->masks.q_lens ? c->masks.q_lens + b : NULL,
                        .kv_lens = c->masks.kv_lens ? c->masks.kv_lens + b
                                                    : NULL,
                        .q_seg = c->q_seg ? w->qseg : NULL,
                        .k_seg = c->q_seg ? w->kseg : NULL};
    head_of(w->k, M, s->G, g, D, w->hk);
    head_of(w->v, M, s->G, g, Dv, w->hv);
    memset(w->rk, 0, sizeof(double) * (size_t)(M * D));
    memset(w->rv, 0, sizeof(double) * (size_t)(M * Dv));
    for (int64_t h = g * per; h < (g + 1) * per; h++) {
        head_of(w->q, N, s->H, h, D, w->hq);
        head_of(w->dout, N, s->H, h, Dv, w->hdo);
        const ra_ref_grads gr = {w->hq, w->hk, w->hv, w->hdo, D, D, Dv, Dv,
                                 w->rq, w->rk, w->rv, D, D, Dv};
        ra_reference_backward(&c->score, N, M, D, Dv, &mk, &gr, w->p);
        compare(w->dq, w->rq, N, s->H, h, D, c->pick_q + b * N, 0, t);
    }
    compare(w->dk, w->rk, M, s->G, g, D, c->pick_k + b * M, 1, t);
    compare(w->dv, w->rv, M, s->G, g, Dv, c->pick_k + b * M, 2, t);
}

/* Whether unit (b, any g) holds a picked row. */
static int unit_needed(const vb_ctx *c, int64_t b)
{
    for (int64_t i = 0; i < c->s.N; i++)
        if (c->pick_q[b * c->s.N + i])
            return 1;
    for (int64_t j = 0; j < c->s.M; j++)
        if (c->pick_k[b * c->s.M + j])
            return 1;
    return 0;
}

/* This rank's units: (b, g) with (b G + g) mod P == rank. */
static ra_status vb_check(const cli_ctx *ctx, const cli_check *o,
                          const vb_ctx *c, double *t)
{
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

/* Shapes of both files, the recorded rules, the masks; collective. */
static ra_status vb_validate(const cli_ctx *ctx, const cli_check *o, vb_ctx *c)
{
    ra_shape *s = &c->s;
    ra_status st = ra_h5_read_shape(ctx->comm, o->in, s);
    if (st != RA_OK)
        return st;
    const int64_t qd[4] = {s->B, s->N, s->H, s->D};
    const int64_t kd[4] = {s->B, s->M, s->G, s->D};
    const int64_t vd[4] = {s->B, s->M, s->G, s->Dv};
    ra_score score = RA_SCORE_DOT;
    if ((st = h5io_read_run_attrs(o->out, &c->run)) == RA_OK &&
        (st = dims_match(o->out, "/dq", qd, o->in)) == RA_OK &&
        (st = dims_match(o->out, "/dk", kd, o->in)) == RA_OK &&
        (st = dims_match(o->out, "/dv", vd, o->in)) == RA_OK &&
        (ra_score_parse(c->run.score, &score) != RA_OK ||
         score == RA_SCORE_ADDITIVE))
        st = ra_error_set(RA_ERR_INPUT, "%s: attribute score: '%s' has no "
                          "gradient check (dot and gaussian only)", o->out,
                          c->run.score);
    if (st == RA_OK && score == RA_SCORE_DOT &&
        !(c->run.scale > 0 && isfinite(c->run.scale)))
        st = ra_error_set(RA_ERR_INPUT, "%s: attribute scale: %g is not a "
                          "finite number > 0", o->out, c->run.scale);
    c->score = (ra_ref_score){.score = score, .scale = c->run.scale,
                              .sigma = c->run.sigma};
    if (st == RA_OK)
        st = h5io_segment_names(o->in, &c->q_seg, &c->kv_seg);
    if ((st = ra_agree(ctx->comm, st)) != RA_OK)
        return st;
    st = ra_h5_read_masks(ctx->comm, o->in, s, RA_LAYOUT_CONTIGUOUS,
                          &c->masks);
    if (st != RA_OK)
        return st;
    const int64_t k = o->sample ? o->sample : VB_SAMPLE;
    c->pick_q = pick(s->B * s->N, k, o->all, (uint64_t)o->seed, 0);
    c->pick_k = pick(s->B * s->M, k, o->all, (uint64_t)o->seed, 1);
    return ra_agree(ctx->comm, c->pick_q && c->pick_k ? RA_OK
                    : ra_error_set(RA_ERR_NOMEM, "verify --backward: cannot "
                                   "allocate the row samples"));
}

static int vb_report(const cli_ctx *ctx, const cli_check *o, const vb_ctx *c,
                     const double *t)
{
    double g[7];
    if (MPI_Allreduce(t, g, 7, MPI_DOUBLE, MPI_SUM, ctx->comm) != MPI_SUCCESS)
        return cli_fail(ctx, CLI_EXIT_RUNTIME, "verify --backward: summing "
                                               "the errors failed");
    double e[3];
    int pass = g[6] == 0;
    for (int i = 0; i < 3; i++) {
        e[i] = g[3 + i] > 0 ? sqrt(g[i] / g[3 + i]) : sqrt(g[i]);
        pass &= e[i] < o->tol;
    }
    if (ctx->rank == 0)
        printf("ringattn verify --backward: %s: %s rows, causal %s, window "
               "%s, masks %s, score %s: rel err dq %.3e, dk %.3e, dv %.3e, "
               "non-finite %.0f, tolerance %.1e: %s\n", o->out,
               o->all ? "all" : "sampled", c->run.causal ? "yes" : "no",
               c->run.window ? "yes" : "no",
               c->run.masks[0] ? c->run.masks : "none", c->run.score, e[0],
               e[1], e[2], g[6], o->tol, pass ? "PASS" : "FAIL");
    return pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}

int cmd_verify_backward(const cli_ctx *ctx, int argc, char **argv)
{
    vb_opts o = {0};
    int code = cli_parse_or_exit(ctx, &vb_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    if (cli_check_finish("verify --backward", &o.check) != RA_OK)
        return cli_fail_status(ctx, RA_ERR_ARG);
    vb_ctx c = {0};
    double t[7] = {0};
    ra_status st = vb_validate(ctx, &o.check, &c);
    if (st == RA_OK)
        st = ra_agree(ctx->comm, vb_check(ctx, &o.check, &c, t));
    code = st == RA_OK ? vb_report(ctx, &o.check, &c, t) : cli_fail_status(ctx, st);
    free(c.pick_q);
    free(c.pick_k);
    ra_h5_masks_free(&c.masks);
    return code;
}
