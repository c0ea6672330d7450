/* verify_fp64.c: the reads of the blocked fp64 recomputation of sampled
 * query rows (see verify.h). Per batch: the rows' q (rotated when the run
 * used RoPE), o and lse are read once; then K and V are read KEY_BLOCK
 * rows at a time, and each block is folded into every head's state by the
 * fp64 passes of engine/ref_block.c (scores, mask and bias, online
 * softmax, P V). Memory: O(ROW_CHUNK * (H * (D + Dv) + KEY_BLOCK)). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "band.h"
#include "centre.h"
#include "ref_block.h"
#include "internal.h"
#include "verify_work.h"

void verify_work_free(vwork *w)
{
    void *p[] = {w->pos, w->qseg, w->qat, w->ids, w->at, w->keys, w->q, w->o, w->lse, w->mx, w->sum, w->acc,
                 w->acc_abs, w->va,
                 w->qa, w->ka, w->lrow, w->k, w->v, w->sc, w->vis, w->kpos,
                 w->kseg, w->bounds, w->centre, w->kf};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
}

/* Whether the run moved q and k by the keys' centre before rounding them
 * to bf16 (the Gaussian score; unrounded, the move changes nothing the
 * fp64 reference can see). */
static int verify_centred(const verify_ctx *c)
{
    return c->p.num.score == RA_SCORE_GAUSSIAN && (c->round_q || c->round_kv);
}

ra_status verify_work_alloc(const verify_ctx *c, int64_t n, vwork *w)
{
    const ra_shape *s = c->s;
    const int64_t Dk = ra_shape_dk(s), H = s->H, G = s->G;
    const int64_t A =
        c->p.num.score == RA_SCORE_ADDITIVE ? c->p.num.additive->A : 0;
    const size_t d = sizeof(double), i8 = sizeof(int64_t);
    w->pos = malloc(i8 * (size_t)n);
    w->qseg = c->q_seg_name ? malloc(i8 * (size_t)n) : NULL;
    w->qat = malloc(i8 * (size_t)n);
    const int ids = c->q_seg_name && c->p.num.align == RA_ALIGN_SEQUENCE;
    w->ids = ids ? malloc(i8 * (size_t)(s->N + s->M)) : NULL;
    w->at = ids ? malloc(i8 * (size_t)s->N) : NULL;
    w->keys = ids ? malloc(sizeof *w->keys * (size_t)(s->N + s->M)) : NULL;
    w->q = malloc(d * (size_t)(n * H * s->D));
    w->o = malloc(d * (size_t)(n * H * s->Dv));
    w->lse = malloc(d * (size_t)(n * H));
    w->mx = malloc(d * (size_t)(n * H));
    w->sum = malloc(d * (size_t)(n * H));
    w->acc = malloc(d * (size_t)(n * H * s->Dv));
    w->acc_abs = c->round_p ? malloc(d * (size_t)(n * H * s->Dv)) : NULL;
    w->va = c->round_p ? malloc(d * (size_t)(KEY_BLOCK * G * s->Dv)) : NULL;
    w->qa = A ? malloc(d * (size_t)(n * H * A)) : NULL;
    w->ka = A ? malloc(d * (size_t)(KEY_BLOCK * G * A)) : NULL;
    w->lrow = malloc(d * (size_t)s->N);
    w->k = malloc(d * (size_t)(KEY_BLOCK * G * Dk));
    w->v = malloc(d * (size_t)(KEY_BLOCK * G * s->Dv));
    w->sc = malloc(d * (size_t)(n * KEY_BLOCK));
    w->vis = malloc((size_t)(n * KEY_BLOCK));
    w->kpos = malloc(i8 * KEY_BLOCK);
    w->kseg = c->kv_seg_name ? malloc(i8 * KEY_BLOCK) : NULL;
    if (verify_centred(c)) {
        w->bounds = malloc(d * (size_t)(2 * G * s->D));
        w->centre = malloc(sizeof(float) * (size_t)(G * s->D));
        w->kf = malloc(sizeof(float) * (size_t)(KEY_BLOCK * G * s->D));
        if (!w->bounds || !w->centre || !w->kf)
            return ra_error_set(RA_ERR_NOMEM, "verify: cannot allocate the "
                                "keys' centres");
    }
    if (!w->pos || !w->q || !w->o || !w->lse || !w->mx || !w->sum ||
        !w->acc || !w->lrow || !w->k || !w->v || !w->sc || !w->vis ||
        !w->kpos || (c->q_seg_name && (!w->qseg || !w->kseg)) ||
        !w->qat || (ids && (!w->ids || !w->at || !w->keys)) ||
        (A && (!w->qa || !w->ka)) ||
        (c->round_p && (!w->acc_abs || !w->va)))
        return ra_error_set(RA_ERR_NOMEM, "verify: cannot allocate the "
                            "buffers of %lld sampled rows", (long long)n);
    return RA_OK;
}

/* The aligned positions of the rows of batch b (ringattn.h, ra_align): the
 * tensor's, each batch's lens', or with segments each id's own ends, from
 * the batch's whole id rows. */
static ra_status rows_align(const char *in, const verify_ctx *c, int64_t b,
                            vwork *w)
{
    const ra_shape *s = c->s;
    int64_t diag = s->M - s->N;
    if (c->p.num.align == RA_ALIGN_SEQUENCE)
        diag = (c->kv_lens ? c->kv_lens[b] : s->M) -
               (c->q_lens ? c->q_lens[b] : s->N);
    for (int64_t r = 0; r < w->nr; r++)
        w->qat[r] = w->pos[r] + diag;
    if (!w->ids)
        return RA_OK;
    int present;
    ra_status st = h5io_read_segments(in, c->q_seg_name, b, 0, s->N, w->ids,
                                      &present);
    if (st == RA_OK)
        st = h5io_read_segments(in, c->kv_seg_name, b, 0, s->M,
                                w->ids + s->N, &present);
    if (st != RA_OK)
        return st;
    ra_align_batch(w->ids, w->ids + s->N, s->N, s->M, s->N, s->M, w->keys,
                   w->at);
    for (int64_t r = 0; r < w->nr; r++)
        w->qat[r] = w->at[w->pos[r]];
    return RA_OK;
}

/* x (rows, heads, D) moved by the centre (G, D) of its kv head, as the
 * run moves its copies (centre.h); nothing without a centre. */
static void centre_rows(const vwork *w, double *x, int64_t rows,
                        int64_t heads, int64_t G, int64_t D)
{
    for (int64_t i = 0; w->centre && i < rows * heads; i++) {
        const float *ch = w->centre + (i % heads) / (heads / G) * D;
        for (int64_t d = 0; d < D; d++)
            x[i * D + d] -= ch[d];
    }
}

/* The centre of batch b's keys (rotated) that padding does not hide, from
 * one pass over them, as the run finds it over its ranks. */
static ra_status batch_centre(const char *in, const verify_ctx *c, int64_t b,
                              vwork *w)
{
    const ra_shape *s = c->s;
    const int64_t G = s->G, D = s->D;
    ra_status st = RA_OK;
    for (int64_t x = 0; x < 2 * G * D; x++)
        w->bounds[x] = -INFINITY;
    for (int64_t j0 = 0; j0 < s->M && st == RA_OK; j0 += KEY_BLOCK) {
        const int64_t kb = s->M - j0 < KEY_BLOCK ? s->M - j0 : KEY_BLOCK;
        st = h5io_read_rows_as(in, c->run.names[1], verify_qkv_axes(c), b, j0,
                               kb, w->k);
        for (int64_t j = 0; j < kb && st == RA_OK; j++) {
            w->kpos[j] = j0 + j;
            for (int64_t g = 0; g < G; g++)
                ra_rope_row_ref(c->p.num.rope, c->p.num.rope_base,
                                w->k + (j * G + g) * D, D, j0 + j);
        }
        for (int64_t x = 0; x < kb * G * D && st == RA_OK; x++)
            w->kf[x] = (float)w->k[x];
        if (st == RA_OK)
            ra_centre_bounds(w->kf, 1, kb, G, D, w->kpos,
                             c->kv_lens ? c->kv_lens + b : NULL, w->bounds);
    }
    if (st == RA_OK)
        ra_centre_of(w->bounds, 1, G, D, w->centre);
    return st;
}

/* Reads tokens [t0, t0 + n) of batch b of one dataset (see
 * verify_read_runs) into out. */
static ra_status read_span(const char *path, const char *name,
                           verify_run_kind kind, const verify_ctx *c,
                           int64_t b, int64_t t0, int64_t n, void *out)
{
    int present;
    return kind == VERIFY_IDS
               ? h5io_read_segments(path, name, b, t0, n, out, &present)
           : kind == VERIFY_O
               ? h5io_read_o_rows(path, b, t0, n, out)
               : h5io_read_rows_as(path, name, kind == VERIFY_GRAD
                                   ? RA_AXES_BNHD : verify_qkv_axes(c), b,
                                   t0, n, out);
}

/* Tokens read at once when scattered: a sample's tokens are read with
 * the span that holds them (each read opens the file; one read of a span
 * costs less than many of its tokens), at most SPAN_VALUES doubles. */
enum { SPAN_VALUES = 1 << 21 };

ra_status verify_read_runs(const char *path, const char *name,
                           verify_run_kind kind, const verify_ctx *c,
                           verify_tokens tok, int64_t width, void *out)
{
    const int64_t b = tok.b, *idx = tok.idx, n = tok.n;
    const size_t size = kind == VERIFY_IDS ? sizeof(int64_t) : sizeof(double);
    const int64_t span = SPAN_VALUES / width > 1 ? SPAN_VALUES / width : 1;
    char *tmp = NULL;
    ra_status st = RA_OK;
    for (int64_t r = 0, z = 0; r < n && st == RA_OK; r = z) {
        for (z = r + 1; z < n && idx[z] - idx[r] < span; z++)
            ;
        const int64_t len = idx[z - 1] - idx[r] + 1;
        char *x = (char *)out + (size_t)(r * width) * size;
        if (len == z - r) { /* consecutive: straight into out */
            st = read_span(path, name, kind, c, b, idx[r], len, x);
            continue;
        }
        if (!tmp && !(tmp = malloc(size * (size_t)(span * width))))
            st = ra_error_set(RA_ERR_NOMEM, "verify: out of memory");
        if (st == RA_OK)
            st = read_span(path, name, kind, c, b, idx[r], len, tmp);
        for (int64_t y = r; y < z && st == RA_OK; y++)
            memcpy(x + (size_t)((y - r) * width) * size,
                   tmp + (size_t)((idx[y] - idx[r]) * width) * size,
                   size * (size_t)width);
    }
    free(tmp);
    return st;
}

/* The rows' /lse of out into w->lse (H, nr). */
static ra_status rows_lse(const char *out, const verify_ctx *c, int64_t b,
                          vwork *w)
{
    ra_status st = RA_OK;
    for (int64_t h = 0; h < c->s->H && st == RA_OK; h++) {
        if ((st = h5io_read_lse(out, b, h, 0, c->s->N, w->lrow)) == RA_OK)
            for (int64_t r = 0; r < w->nr; r++)
                w->lse[h * w->nr + r] = w->lrow[w->pos[r]];
    }
    return st;
}

/* The softmax state of the rows, reset. */
static void rows_reset(const verify_ctx *c, vwork *w)
{
    const int64_t n = w->nr * c->s->H;
    for (int64_t x = 0; x < n; x++) {
        w->mx[x] = -INFINITY;
        w->sum[x] = 0.0;
    }
    memset(w->acc, 0, sizeof(double) * (size_t)(n * c->s->Dv));
    if (w->acc_abs)
        memset(w->acc_abs, 0, sizeof(double) * (size_t)(n * c->s->Dv));
}

ra_status verify_rows_load(const char *in, const char *out,
                           const verify_ctx *c, int64_t b,
                           const int64_t *rows, vwork *w)
{
    const ra_shape *s = c->s;
    const int64_t H = s->H, D = s->D, nr = w->nr;
    for (int64_t r = 0; r < nr; r++)
        w->pos[r] = rows[r] % s->N;
    const verify_tokens rows_at = {b, w->pos, nr};
    ra_status st = verify_read_runs(in, c->run.names[0], VERIFY_TENSOR, c,
                                    rows_at, H * D, w->q);
    if (st == RA_OK && out)
        st = verify_read_runs(out, NULL, VERIFY_O, c, rows_at, H * s->Dv,
                              w->o);
    if (st == RA_OK && w->qseg)
        st = verify_read_runs(in, c->q_seg_name, VERIFY_IDS, c, rows_at, 1,
                              w->qseg);
    if (st == RA_OK)
        st = rows_align(in, c, b, w);
    for (int64_t r = 0; r < nr && st == RA_OK; r++)
        for (int64_t h = 0; h < H; h++)
            ra_rope_row_ref(c->p.num.rope, c->p.num.rope_base,
                            w->q + (r * H + h) * D, D, w->qat[r]);
    if (st == RA_OK && w->centre)
        st = batch_centre(in, c, b, w);
    centre_rows(w, w->q, nr, H, s->G, D);
    if (c->round_q) /* RoPE's rotation is fp64 here, float32 in the run:
                       they agree to float32's rounding before bf16's */
        ra_bf16_round_f64(w->q, nr * H * D);
    if (st == RA_OK && out)
        st = rows_lse(out, c, b, w);
    if (st == RA_OK && w->qa)
        ra_ref_project(c->p.num.additive->w_q, c->p.num.additive->A, D, w->q,
                       nr * H, w->qa);
    rows_reset(c, w);
    return st;
}

void verify_keys_visible(const verify_ctx *c, int64_t b, int64_t kb,
                         vwork *w)
{
    const ra_shape *s = c->s;
    for (int64_t r = 0; r < w->nr; r++) {
        const ra_mask mk = {.causal = c->run.causal, .diag = s->M - s->N,
                            .window = c->run.window,
                            .left = c->run.window_left,
                            .right = c->run.window_right, .qpos = w->pos + r,
                            .kpos = w->kpos,
                            .q_lens = c->q_lens ? c->q_lens + b : NULL,
                            .kv_lens = c->kv_lens ? c->kv_lens + b : NULL,
                            .q_seg = w->qseg ? w->qseg + r : NULL,
                            .k_seg = w->kseg, .qalign = w->qat + r};
        for (int64_t j = 0; j < kb; j++)
            w->vis[r * kb + j] = (unsigned char)ra_ref_visible(&mk, 0, j);
    }
}

ra_status verify_keys_load(const char *in, const verify_ctx *c, int64_t b,
                           int64_t j0, const int64_t *keys, int64_t kb,
                           vwork *w)
{
    const ra_shape *s = c->s;
    const int64_t G = s->G, Dk = ra_shape_dk(s);
    for (int64_t j = 0; j < kb; j++)
        w->kpos[j] = keys ? keys[j] : j0 + j;
    const verify_tokens keys_at = {b, w->kpos, kb};
    ra_status st = verify_read_runs(in, c->run.names[1], VERIFY_TENSOR, c,
                                    keys_at, G * Dk, w->k);
    if (st == RA_OK)
        st = verify_read_runs(in, c->run.names[2], VERIFY_TENSOR, c, keys_at,
                              G * s->Dv, w->v);
    if (st == RA_OK && w->kseg)
        st = verify_read_runs(in, c->kv_seg_name, VERIFY_IDS, c, keys_at, 1,
                              w->kseg);
    if (st != RA_OK)
        return st;
    for (int64_t j = 0; j < kb; j++)
        for (int64_t g = 0; g < G; g++)
            ra_rope_row_ref(c->p.num.rope, c->p.num.rope_base,
                            w->k + (j * G + g) * Dk, Dk, w->kpos[j]);
    centre_rows(w, w->k, kb, G, G, Dk);
    if (c->round_kv) {
        ra_bf16_round_f64(w->k, kb * G * Dk);
        ra_bf16_round_f64(w->v, kb * G * s->Dv);
    }
    for (int64_t x = 0; w->va && x < kb * G * s->Dv; x++)
        w->va[x] = fabs(w->v[x]);
    if (w->ka)
        ra_ref_project(c->p.num.additive->w_k, c->p.num.additive->A, Dk, w->k,
                       kb * G, w->ka);
    verify_keys_visible(c, b, kb, w);
    return RA_OK;
}

int verify_block_seen(const vwork *w, int64_t kb)
{
    for (int64_t x = 0; x < w->nr * kb; x++)
        if (w->vis[x])
            return 1;
    return 0;
}

ra_ref_block verify_block_of(const verify_ctx *c, int64_t kb, vwork *w)
{
    return (ra_ref_block){
        c->s, &c->p, c->score.scale, w->nr, kb, w->q, w->k, w->v, w->qa,
        w->ka, w->va, w->vis, w->kpos, w->qat, w->sc, w->mx, w->sum, w->acc,
        w->acc_abs};
}

/* The reference rows of the batch against /o and /lse, into t. */
static void rows_tally(const verify_ctx *c, const vwork *w, ra_tally *t)
{
    const int64_t H = c->s->H, Dv = c->s->Dv, nr = w->nr;
    for (int64_t r = 0; r < nr; r++)
        for (int64_t h = 0; h < H; h++) {
            double sum = w->sum[h * nr + r], mx = w->mx[h * nr + r];
            const double *acc = w->acc + (h * nr + r) * Dv;
            if (c->p.num.sinks) { /* one more column: logit sink, value 0 */
                const double sink = c->p.num.sinks[h];
                if (!(sum > 0) || sink > mx) {
                    sum = sum > 0 ? sum * exp(mx - sink) : 0.0;
                    mx = sink;
                }
                sum += exp(sink - mx);
            }
            for (int64_t d = 0; d < Dv; d++)
                ra_tally_o(t, w->o[(r * H + h) * Dv + d],
                           sum > 0 ? acc[d] / sum *
                                     exp(w->mx[h * nr + r] - mx) : 0.0);
            for (int64_t d = 0; w->acc_abs && sum > 0 && d < Dv; d++)
                ra_tally_o_abs(t, w->acc_abs[(h * nr + r) * Dv + d] / sum *
                                  exp(w->mx[h * nr + r] - mx));
            ra_tally_lse(t, w->lse[h * nr + r],
                         sum > 0 ? mx + log(sum) : -INFINITY);
        }
}

static ra_status batch_check(const char *in, const char *out,
                             const verify_ctx *c, int64_t b,
                             const int64_t *rows, vwork *w, ra_tally *t)
{
    const ra_shape *s = c->s;
    ra_status st = verify_rows_load(in, out, c, b, rows, w);
    for (int64_t j0 = 0; j0 < s->M && st == RA_OK; j0 += KEY_BLOCK) {
        const int64_t kb = s->M - j0 < KEY_BLOCK ? s->M - j0 : KEY_BLOCK;
        if ((st = verify_keys_load(in, c, b, j0, NULL, kb, w)) != RA_OK)
            break;
        if (!verify_block_seen(w, kb)) /* e.g. above the causal diagonal */
            continue;
        const ra_ref_block x = verify_block_of(c, kb, w);
        for (int64_t h = 0; h < s->H; h++)
            ra_ref_block_fold(&x, h);
    }
    if (st == RA_OK)
        rows_tally(c, w, t);
    return st;
}

ra_status verify_rows(const char *in, const char *out, const verify_ctx *c,
                      const int64_t *rows, int64_t n, ra_tally *t)
{
    vwork w = {0};
    ra_status st = n > 0 ? verify_work_alloc(c, n < ROW_CHUNK ? n : ROW_CHUNK, &w)
                         : RA_OK;
    for (int64_t a = 0; a < n && st == RA_OK;) {
        const int64_t b = rows[a] / c->s->N;
        int64_t z = a;
        while (z < n && z - a < ROW_CHUNK && rows[z] / c->s->N == b)
            z++;
        w.nr = z - a;
        st = batch_check(in, out, c, b, rows + a, &w, t);
        a = z;
    }
    verify_work_free(&w);
    return st;
}
