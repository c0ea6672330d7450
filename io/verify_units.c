/* verify_units.c: verify --backward's check of the additive score (see
 * verify.h). Its weights' gradients are sums over every pair, so the check
 * works in units of one (batch, kv head) with the naive reference
 * (ra_reference_backward, one row at a time), the units dealt round the
 * ranks, and compares the picked rows of dq, dk, dv and /dw_q, /dw_k,
 * /dw_v whole (summed over the ranks). RoPE is applied to the fp64 rows
 * and the gradients taken back by the rotation at minus the positions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "backward.h"
#include "band.h"
#include "verify.h"

/* One unit's tensors: the file rows of batch b (q, k, v, do, dq, dk, dv)
 * and one head's (hq ... p), in double. */
enum { U_Q, U_K, U_V, U_DO, U_DQ, U_DK, U_DV, U_HQ, U_HK, U_HV, U_HDO,
       U_RQ, U_RK, U_RV, U_P, U_N };
typedef struct {
    double *x[U_N];
    int64_t *qseg, *kseg;
    int64_t *qat;    /* (N) the queries' aligned positions (ra_align) */
    ra_key_id *keys; /* (N + M) scratch of ra_align_batch */
} ubufs;

static void ubufs_free(ubufs *w)
{
    for (int i = 0; i < U_N; i++)
        free(w->x[i]);
    free(w->qseg);
    free(w->kseg);
    free(w->qat);
    free(w->keys);
}

static ra_status ubufs_alloc(const ra_shape *s, ubufs *w)
{
    const int64_t N = s->N, M = s->M, Dk = ra_shape_dk(s), D = s->D;
    const int64_t len[U_N] = {N * s->H * D, M * s->G * Dk, M * s->G * s->Dv,
                              N * s->H * s->Dv, N * s->H * D, M * s->G * Dk,
                              M * s->G * s->Dv, N * D, M * Dk, M * s->Dv,
                              N * s->Dv, N * D, M * Dk, M * s->Dv, M};
    int ok = 1;
    for (int i = 0; i < U_N; i++)
        ok &= (w->x[i] = malloc(sizeof(double) * (size_t)(len[i] + 1))) !=
              NULL;
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
static ra_status unit_read(const verify_job *j, int64_t b, ubufs *w)
{
    const ra_shape *s = &j->s;
    const verify_ctx *c = &j->v;
    const ra_axes ax = verify_qkv_axes(c);
    const char *in = j->rq.in, *out = j->rq.out;
    const char *names[7] = {c->run.names[0], c->run.names[1],
                            c->run.names[2], "/do", "/dq", "/dk", "/dv"};
    int present = 0;
    ra_status st = RA_OK;
    for (int i = U_Q; i <= U_DV && st == RA_OK; i++)
        st = h5io_read_rows_as(i <= U_DO ? in : out, names[i],
                               i <= U_DO ? ax : RA_AXES_BNHD, b, 0,
                               i == U_Q || i == U_DO || i == U_DQ ? s->N
                                                                  : s->M,
                               w->x[i]);
    if (st == RA_OK && c->q_seg_name &&
        (st = h5io_read_segments(in, c->q_seg_name, b, 0, s->N, w->qseg,
                                 &present)) == RA_OK)
        st = h5io_read_segments(in, c->kv_seg_name, b, 0, s->M, w->kseg,
                                &present);
    const int seq = c->p.num.align == RA_ALIGN_SEQUENCE;
    if (st == RA_OK)
        ra_align_batch(seq && c->q_seg_name ? w->qseg : NULL, w->kseg, s->N,
                       s->M, seq && c->q_lens ? c->q_lens[b] : s->N,
                       seq && c->kv_lens ? c->kv_lens[b] : s->M, w->keys,
                       w->qat);
    return st;
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

/* Adds the picked rows of head h of got against ref (len, dim) to
 * t[which], t[3 + which] and the non-finite count t[6]. */
static void compare(row_block got, int64_t h, const double *ref,
                    const unsigned char *picked, int which, double *t)
{
    for (int64_t i = 0; i < got.len; i++)
        for (int64_t d = 0; picked[i] && d < got.dim; d++) {
            const double g = got.x[(i * got.heads + h) * got.dim + d];
            const double r = ref[i * got.dim + d];
            t[6] += !isfinite(g);
            t[which] += (g - r) * (g - r);
            t[3 + which] += r * r;
        }
}

/* RoPE on the len rows (dim D) of one head at positions pos[i] (NULL:
 * 0, 1, 2, ...) times sign (-1: the transpose, for gradients). */
static void rope_rows(const verify_ctx *c, double *x, int64_t len,
                      const int64_t *pos, int64_t sign)
{
    for (int64_t i = 0; i < len && c->p.num.rope != RA_ROPE_NONE; i++)
        ra_rope_row_ref(c->p.num.rope, c->p.num.rope_base, x + i * c->s->D,
                        c->s->D, sign * (pos ? pos[i] : i));
}

/* The picks and the weights' gradients (A (D + Dk + 1)) of the check. */
typedef struct {
    const unsigned char *pick_q, *pick_k;
    double *dw;
} unit_sums;

/* The fp64 gradients of unit (b, g) against the file's picked rows. */
static void unit_check(const verify_job *j, ubufs *w, int64_t b, int64_t g,
                       const unit_sums *u, double *t)
{
    const ra_shape *s = &j->s;
    const verify_ctx *c = &j->v;
    const int64_t N = s->N, M = s->M, D = s->D, Dv = s->Dv;
    const int64_t Dk = ra_shape_dk(s), per = s->H / s->G;
    const int64_t A = c->p.num.additive->A;
    double **x = w->x;
    const ra_mask mk = {.causal = c->run.causal, .diag = M - N,
                        .window = c->run.window, .left = c->run.window_left,
                        .right = c->run.window_right,
                        .q_lens = c->q_lens ? c->q_lens + b : NULL,
                        .kv_lens = c->kv_lens ? c->kv_lens + b : NULL,
                        .q_seg = c->q_seg_name ? w->qseg : NULL,
                        .k_seg = c->q_seg_name ? w->kseg : NULL,
                        .qalign = w->qat};
    ra_ref_score sc = c->score;
    head_of((row_block){x[U_K], M, s->G, Dk}, g, x[U_HK]);
    head_of((row_block){x[U_V], M, s->G, Dv}, g, x[U_HV]);
    rope_rows(c, x[U_HK], M, NULL, 1);
    memset(x[U_RK], 0, sizeof(double) * (size_t)(M * Dk));
    memset(x[U_RV], 0, sizeof(double) * (size_t)(M * Dv));
    for (int64_t h = g * per; h < (g + 1) * per; h++) {
        head_of((row_block){x[U_Q], N, s->H, D}, h, x[U_HQ]);
        head_of((row_block){x[U_DO], N, s->H, Dv}, h, x[U_HDO]);
        rope_rows(c, x[U_HQ], N, w->qat, 1);
        sc.alibi_slope = ra_params_alibi_slope(&c->p, s->H, h);
        const ra_ref_grads gr = {x[U_HQ], x[U_HK], x[U_HV], x[U_HDO], D, Dk,
                                 Dv, Dv, x[U_RQ], x[U_RK], x[U_RV], D, Dk,
                                 Dv, u->dw, u->dw + A * D,
                                 u->dw + A * (D + Dk)};
        ra_reference_backward(&sc, N, M, D, Dv, &mk, &gr, x[U_P]);
        rope_rows(c, x[U_RQ], N, w->qat, -1);
        compare((row_block){x[U_DQ], N, s->H, D}, h, x[U_RQ],
                u->pick_q + b * N, 0, t);
    }
    rope_rows(c, x[U_RK], M, NULL, -1);
    compare((row_block){x[U_DK], M, s->G, Dk}, g, x[U_RK], u->pick_k + b * M,
            1, t);
    compare((row_block){x[U_DV], M, s->G, Dv}, g, x[U_RV], u->pick_k + b * M,
            2, t);
}

/* This rank's units (b, g) with (b G + g) mod P == rank, its predicted
 * cost told first. */
static ra_status units_mine(const verify_job *j, const unit_sums *u,
                            double *t)
{
    const ra_shape *s = &j->s;
    const double units = ceil((double)(s->B * s->G) / j->nranks);
    const double pairs = (double)s->N * s->M * (s->H / s->G) * units;
    verify_cost_tell(j, "verify --backward (additive score, every pair)",
                     pairs * (double)(3 * s->D + 2 * s->Dv), 2 * pairs);
    ubufs w = {0};
    ra_status st = ubufs_alloc(s, &w);
    int64_t loaded = -1;
    for (int64_t x = j->rank; st == RA_OK && x < s->B * s->G;
         x += j->nranks) {
        const int64_t b = x / s->G, g = x % s->G;
        if (b != loaded && (st = unit_read(j, b, &w)) == RA_OK)
            loaded = b;
        if (st == RA_OK)
            unit_check(j, &w, b, g, u, t);
    }
    ubufs_free(&w);
    return st;
}

/* The ranks' sums of the weights' gradients u->dw against the file's
 * /dw_q, /dw_k, /dw_v into t[7], t[8] (error, norm) and t[6]. */
static ra_status weights_check(const verify_job *j, const unit_sums *u,
                               double *t)
{
    const int64_t A = j->v.p.num.additive->A, D = j->s.D;
    const int64_t Dk = ra_shape_dk(&j->s), len = A * (D + Dk + 1);
    float *got = malloc(sizeof(float) * (size_t)(len + 1));
    const int64_t dims[3][2] = {{A, D}, {A, Dk}, {A, 1}};
    const char *const names[3] = {"/dw_q", "/dw_k", "/dw_v"};
    const int64_t at[3] = {0, A * D, A * (D + Dk)};
    ra_status st = got ? RA_OK : ra_error_set(RA_ERR_NOMEM, "verify "
                                              "--backward: out of memory");
    for (int i = 0; i < 3 && st == RA_OK; i++) {
        int present = 0;
        st = h5io_read_weights(j->rq.out, names[i], i == 2 ? 1 : 2, dims[i],
                               got + at[i], &present);
        if (st == RA_OK && !present)
            st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: not found (the "
                              "additive score's weight gradients)",
                              j->rq.out, names[i]);
    }
    if ((st = ra_agree(j->rq.comm, st)) == RA_OK)
        st = verify_sum(j->rq.comm, u->dw, len);
    for (int64_t i = 0; st == RA_OK && j->rank == 0 && i < len; i++) {
        t[6] += !isfinite(got[i]);
        t[7] += (got[i] - u->dw[i]) * (got[i] - u->dw[i]);
        t[8] += u->dw[i] * u->dw[i];
    }
    free(got);
    return st;
}

ra_status verify_units(const verify_job *j, const unsigned char *pick_q,
                       const unsigned char *pick_k, double *t)
{
    const int64_t A = j->v.p.num.additive->A;
    const unit_sums u = {pick_q, pick_k,
                         calloc((size_t)(A * (j->s.D + ra_shape_dk(&j->s) +
                                              1)), sizeof(double))};
    ra_status st = ra_agree(j->rq.comm, u.dw ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "verify --backward: "
                                           "cannot allocate the weights' "
                                           "gradients"));
    if (st == RA_OK)
        st = ra_agree(j->rq.comm, units_mine(j, &u, t));
    if (st == RA_OK)
        st = weights_check(j, &u, t);
    free(u.dw);
    return st;
}
