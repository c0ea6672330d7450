/* bench_check.c: what `ringattn bench` regenerates and checks: the random
 * masks of a configuration, the exact count of visible pairs, and a sampled
 * fp64 check of the output against inputs regenerated from the seed
 * (bench_check.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "band.h"
#include "bench_check.h"
#include "internal.h"
#include "kernel.h"
#include "model.h"

void bench_masks_free(bench_masks *bm)
{
    free(bm->q_lens);
    free(bm->kv_lens);
    free(bm->q_seg);
    free(bm->kv_seg);
    memset(bm, 0, sizeof *bm);
}

/* The key side's segment stream: the query one when /segments serves both. */
static uint64_t kv_segment_stream(const ra_shape *s)
{
    return s->N == s->M ? RA_STREAM_Q_SEGMENTS : RA_STREAM_KV_SEGMENTS;
}

ra_status bench_masks_make(const bench_gen *gen, const ra_shape *s,
                           const ra_slice *qs, const ra_slice *ks,
                           bench_masks *bm)
{
    memset(bm, 0, sizeof *bm);
    const uint64_t seed = gen->seed;
    if (gen->lens) {
        bm->q_lens = malloc(sizeof(int64_t) * (size_t)s->B);
        bm->kv_lens = malloc(sizeof(int64_t) * (size_t)s->B);
        if (!bm->q_lens || !bm->kv_lens)
            return ra_error_set(RA_ERR_NOMEM, "bench: out of memory for lens");
        ra_random_lens(seed, RA_STREAM_Q_LENS, s->B, s->N, bm->q_lens);
        ra_random_lens(seed, RA_STREAM_KV_LENS, s->B, s->M, bm->kv_lens);
    }
    if (gen->segment_avg > 0) {
        bm->q_seg = malloc(sizeof(int64_t) * (size_t)(s->B * qs->count + 1));
        bm->kv_seg = malloc(sizeof(int64_t) * (size_t)(s->B * ks->count + 1));
        if (!bm->q_seg || !bm->kv_seg)
            return ra_error_set(RA_ERR_NOMEM, "bench: out of memory for "
                                              "segments");
        ra_random_segments(seed, RA_STREAM_Q_SEGMENTS, s->B, s->N,
                           gen->segment_avg, qs, bm->q_seg);
        ra_random_segments(seed, kv_segment_stream(s), s->B, s->M,
                           gen->segment_avg, ks, bm->kv_seg);
    }
    bm->view = (ra_masks){bm->q_lens, bm->kv_lens, bm->q_seg, bm->kv_seg};
    return RA_OK;
}

/* Segment ids of all len tokens of batch b (contiguous) from stream, for
 * checks and counts; NULL without segments or memory. */
static int64_t *all_segments(const bench_gen *gen, const ra_shape *s,
                             uint64_t stream, int64_t len, int64_t b)
{
    if (gen->segment_avg <= 0)
        return NULL;
    const ra_slice all = {1, {{0, len, 1}}, len};
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(s->B * len));
    if (ids)
        ra_random_segments(gen->seed, stream, s->B, len,
                           gen->segment_avg, &all, ids);
    if (ids && b > 0)
        memmove(ids, ids + b * len, sizeof(int64_t) * (size_t)len);
    return ids;
}

/* The segment ids of all M keys of batch b. */
static int64_t *all_kv_segments(const bench_gen *gen, const ra_shape *s,
                                int64_t b)
{
    return all_segments(gen, s, kv_segment_stream(s), s->M, b);
}

/* Visible pairs of the local queries of batch b: each row's keys are an
 * interval (causal, window, lens) intersected with its segment's run; the
 * model counts them with the same function. */
static double batch_pairs(const bench_gen *gen, const ra_shape *s,
                          const ra_slice *qs, const bench_masks *bm,
                          const int64_t *kseg, int64_t b)
{
    const ra_params *p = gen->p;
    const int64_t ql = bm->q_lens ? bm->q_lens[b] : s->N;
    const int64_t kl = bm->kv_lens ? bm->kv_lens[b] : s->M;
    /* per-sequence alignment: the batch's own diagonal (with segments the
     * count keeps it, an estimate of the segments' own) */
    const ra_band band =
        p->num.align == RA_ALIGN_SEQUENCE
            ? ra_band_make(p->num.causal, p->num.window, p->num.window_left,
                           p->num.window_right, kl - ql)
            : ra_band_of(p, s);
    return model_slice_pairs(band, qs, NULL, s->M, ql, kl,
                             kseg ? bm->q_seg + b * qs->count : NULL, kseg);
}

double bench_local_pairs(const bench_gen *gen, const ra_shape *s,
                         const ra_slice *qs, const bench_masks *bm)
{
    double pairs = 0;
    for (int64_t b = 0; b < s->B; b++) {
        int64_t *kseg = all_kv_segments(gen, s, b);
        if (gen->segment_avg > 0 && !kseg)
            return NAN;
        pairs += batch_pairs(gen, s, qs, bm, kseg, b);
        free(kseg);
    }
    return pairs;
}

/* ---- the fp64 check ---------------------------------------------------- */

/* Scratch of the check: K (M, D) and V (M, Dv) of one kv head, one query
 * row, its reference and scores, the key segment ids of one batch, and for
 * per-sequence alignment the batch's query ids (with segments), the
 * aligned positions of its queries (N) and their scratch (N + M). */
typedef struct {
    double *kd, *vd, *qd, *ref, *sc;
    double *vabs, *rabs; /* bf16 precision: |V| and the reference on it
                            (the tolerance, compare.h), else NULL */
    float *tmp;
    int64_t *kseg, *qseg, *qat;
    ra_key_id *keys;
} check_scratch;

/* One sampled check: the configuration, the masks of its inputs, the
 * output (o, lse) of the local queries, the tally it adds to, its
 * scratch. */
typedef struct {
    const bench_gen *gen;
    const ra_shape *s;
    const ra_slice *qs;
    const bench_masks *bm;
    const float *out, *lse;
    ra_tally *t;
    check_scratch w;
} check_run;

/* A random tensor (B, len, heads, dim) of one stream of the seed. */
typedef struct {
    uint64_t stream;
    int64_t len, heads, dim;
} regen_tensor;

/* Regenerates row j of (b, *, head, *) of tensor x as doubles. */
static void regen_row(const bench_gen *gen, regen_tensor x, int64_t b,
                      int64_t j, int64_t head, float *tmp, double *out)
{
    ra_random_normal(gen->seed, x.stream,
                     (uint64_t)(((b * x.len + j) * x.heads + head) * x.dim),
                     x.dim, tmp);
    for (int64_t d = 0; d < x.dim; d++)
        out[d] = tmp[d];
}

/* Compares local row i, head h of batch b with its reference. */
static void check_one(check_run *c, int64_t b, int64_t h, int64_t i)
{
    const ra_shape *s = c->s;
    const ra_params *p = c->gen->p;
    const bench_masks *bm = c->bm;
    check_scratch *w = &c->w;
    const ra_ref_score score = {p->num.score,
                                ra_params_scale(p, s),
                                p->num.sigma,
                                p->num.additive,
                                s->D,
                                p->num.alibi,
                                p->num.alibi ? ra_params_alibi_slope(p, s->H, h)
                                             : 0.0,
                                ra_features_of(&p->num),
                                p->num.sinks != NULL,
                                p->num.sinks ? p->num.sinks[h] : 0.0};
    const int64_t n = c->qs->count;
    int64_t gi = ra_slice_pos(c->qs, i);
    int64_t at = w->qat ? w->qat[gi] : gi + s->M - s->N;
    regen_row(c->gen, (regen_tensor){RA_STREAM_Q, s->N, s->H, s->D}, b, gi,
              h, w->tmp, w->qd);
    ra_rope_row_ref(p->num.rope, p->num.rope_base, w->qd, s->D, at);
    if (p->num.precision == RA_PRECISION_BF16)
        ra_bf16_round_f64(w->qd, s->D);
    const ra_mask mk = {.causal = p->num.causal,
                        .diag = s->M - s->N,
                        .window = p->num.window,
                        .left = p->num.window_left,
                        .right = p->num.window_right,
                        .qpos = &gi,
                        .q_lens = bm->q_lens ? bm->q_lens + b : NULL,
                        .kv_lens = bm->kv_lens ? bm->kv_lens + b : NULL,
                        .q_seg = w->kseg ? bm->q_seg + b * n + i : NULL,
                        .k_seg = w->kseg,
                        .qalign = &at};
    double lref;
    const ra_ref_rows rr = {1, s->M, s->D, s->Dv, w->qd, s->D, w->kd, s->D,
                            w->vd, s->Dv, w->ref, s->Dv, &lref};
    ra_reference_scored(&score, &mk, &rr, w->sc);
    const float *orow = c->out + ((b * n + i) * s->H + h) * s->Dv;
    for (int64_t d = 0; d < s->Dv; d++)
        ra_tally_o(c->t, orow[d], w->ref[d]);
    if (w->vabs) {
        ra_ref_rows ra = rr;
        ra.v = w->vabs;
        ra.o = w->rabs;
        ra_reference_scored(&score, &mk, &ra, w->sc);
        for (int64_t d = 0; d < s->Dv; d++)
            ra_tally_o_abs(c->t, w->rabs[d]);
    }
    ra_tally_lse(c->t, c->lse[(b * s->H + h) * n + i], lref);
}

/* Batch b: every kv head's K and V regenerated once, then the sampled rows
 * of its query heads, spread as first, last, then evenly between. */
static void check_batch(check_run *c, int64_t b)
{
    const ra_shape *s = c->s;
    const bench_gen *gen = c->gen;
    const int64_t n = c->qs->count, rep = s->H / s->G;
    const regen_tensor k = {RA_STREAM_K, s->M, s->G, s->D};
    const regen_tensor v = {RA_STREAM_V, s->M, s->G, s->Dv};
    for (int64_t g = 0; g < s->G; g++) {
        for (int64_t j = 0; j < s->M; j++) {
            regen_row(gen, k, b, j, g, c->w.tmp, c->w.kd + j * s->D);
            ra_rope_row_ref(gen->p->num.rope, gen->p->num.rope_base,
                            c->w.kd + j * s->D, s->D, j);
            regen_row(gen, v, b, j, g, c->w.tmp, c->w.vd + j * s->Dv);
        }
        if (gen->p->num.precision == RA_PRECISION_BF16 ||
            gen->p->exec.wire == RA_WIRE_BF16) {
            ra_bf16_round_f64(c->w.kd, s->M * s->D);
            ra_bf16_round_f64(c->w.vd, s->M * s->Dv);
        }
        for (int64_t x = 0; c->w.vabs && x < s->M * s->Dv; x++)
            c->w.vabs[x] = fabs(c->w.vd[x]);
        for (int64_t h = g * rep; h < (g + 1) * rep; h++)
            for (int64_t r = 0; r < gen->check_rows && r < n; r++) {
                const int64_t i = r == 0 ? 0 : r == 1 ? n - 1
                                  : (r * n) / (gen->check_rows + 1);
                check_one(c, b, h, i);
            }
    }
}

/* Whether the check lacks segment ids it needs (out of memory). */
static int segs_missing(const bench_gen *gen, const check_scratch *w)
{
    return gen->segment_avg > 0 &&
           (!w->kseg || (gen->p->num.align == RA_ALIGN_SEQUENCE && !w->qseg));
}

/* Per-sequence alignment: the aligned positions of batch b's queries into
 * w->qat (ra_align_batch), from its lens or its whole id rows. */
static void batch_align(const bench_gen *gen, const ra_shape *s,
                        const bench_masks *bm, check_scratch *w, int64_t b)
{
    ra_align_batch(w->kseg ? w->qseg : NULL, w->kseg, s->N, s->M,
                   bm->q_lens ? bm->q_lens[b] : s->N,
                   bm->kv_lens ? bm->kv_lens[b] : s->M, w->keys, w->qat);
}

void bench_check_output(const bench_gen *gen, const ra_shape *s,
                        const ra_slice *qs, const bench_masks *bm,
                        const float *out, const float *lse, ra_tally *t)
{
    if (qs->count == 0 || gen->check_rows == 0)
        return;
    const int64_t Dmax = s->D > s->Dv ? s->D : s->Dv;
    check_run c = {gen, s, qs, bm, out, lse, t, {
        .kd = malloc(sizeof(double) * (size_t)(s->M * s->D)),
        .vd = malloc(sizeof(double) * (size_t)(s->M * s->Dv)),
        .qd = malloc(sizeof(double) * (size_t)s->D),
        .ref = malloc(sizeof(double) * (size_t)s->Dv),
        .sc = malloc(sizeof(double) * (size_t)s->M),
        .tmp = malloc(sizeof(float) * (size_t)Dmax)}};
    check_scratch *w = &c.w;
    const int bf16 = gen->p->num.precision == RA_PRECISION_BF16;
    w->vabs = bf16 ? malloc(sizeof(double) * (size_t)(s->M * s->Dv)) : NULL;
    w->rabs = bf16 ? malloc(sizeof(double) * (size_t)s->Dv) : NULL;
    t->p_unit = bf16 ? RA_BF16_UNIT : 0.0;
    const int seq = gen->p->num.align == RA_ALIGN_SEQUENCE;
    w->qat = seq ? malloc(sizeof(int64_t) * (size_t)s->N) : NULL;
    w->keys = seq ? malloc(sizeof(ra_key_id) * (size_t)(s->N + s->M)) : NULL;
    const int64_t batches[2] = {0, s->B - 1};
    const int ok = w->kd && w->vd && w->qd && w->ref && w->sc && w->tmp &&
                   (!seq || (w->qat && w->keys)) &&
                   (!bf16 || (w->vabs && w->rabs));
    for (int bi = 0; ok && bi < (s->B > 1 ? 2 : 1); bi++) {
        free(w->kseg);
        free(w->qseg);
        w->kseg = all_kv_segments(gen, s, batches[bi]);
        w->qseg = seq ? all_segments(gen, s, RA_STREAM_Q_SEGMENTS, s->N,
                                     batches[bi])
                      : NULL;
        if (segs_missing(gen, w))
            break;
        if (w->qat)
            batch_align(gen, s, bm, w, batches[bi]);
        check_batch(&c, batches[bi]);
    }
    if (!ok || segs_missing(gen, w))
        t->bad_inf++; /* could not check: fails the verdict */
    void *all[] = {w->kseg, w->qseg, w->qat, w->keys, w->kd, w->vd, w->qd,
                   w->ref, w->sc, w->tmp, w->vabs, w->rabs};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}
