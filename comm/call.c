/* call.c: the life of one call, whatever its strategy: open once
 * (checks, agreement, the layout, threads, the global positions of this
 * rank's queries and keys, the position encodings, the inputs' range),
 * one row of the strategy table (its forward, or its backward), close
 * once (the end token, the frees, the timing). ra_forward and
 * ra_backward (and the internal ra_call_forward, ra_call_backward of
 * call.h) all come through here; the public ones join the caller's
 * ra_numerics and ra_exec into one ra_params first.
 *
 * Discipline: validate locally, agree over the ranks (ra_agree), then start
 * the collectives, so that a refusal on one rank never leaves the others
 * waiting in one. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "align.h"
#include "call.h"
#include "centre.h"
#include "gemm_env.h"
#include "internal.h"
#include "logits.h"
#include "nodes.h"
#include "range.h"
#include "strategy.h"

enum { TAG_END = 7332 };

static ra_status check_score(const ra_shape *s, const ra_params *p)
{
    if (p->num.score == RA_SCORE_GAUSSIAN &&
        !(p->num.sigma > 0 && isfinite(p->num.sigma)))
        return ra_error_set(RA_ERR_ARG, "score gaussian: sigma must be a "
                                        "finite number > 0");
    if (p->num.score == RA_SCORE_ADDITIVE &&
        (!p->num.additive || p->num.additive->A < 1 || !p->num.additive->w_q ||
         !p->num.additive->w_k || !p->num.additive->w_v))
        return ra_error_set(RA_ERR_ARG, "score additive: weights w_q (A, D), "
                                        "w_k (A, Dk), w_v (A) are required");
    if (!ra_shape_dk_allowed(s, p->num.score))
        return ra_error_set(RA_ERR_ARG, "shape: keys of dim Dk=%lld differ "
                            "from queries of dim D=%lld, which only the "
                            "additive score allows", (long long)ra_shape_dk(s),
                            (long long)s->D);
    if (p->num.score != RA_SCORE_ADDITIVE && !isnan(p->num.scale) &&
        !isfinite(p->num.scale))
        return ra_error_set(RA_ERR_ARG, "scale: %g is not a finite number",
                            p->num.scale);
    /* a value the score does not apply is refused, never ignored */
    if (p->num.score != RA_SCORE_DOT && !isnan(p->num.scale))
        return ra_error_set(RA_ERR_ARG, "scale: the %s score takes no scale "
                            "(it applies to the dot score only)",
                            ra_score_name(p->num.score));
    if (p->num.score != RA_SCORE_GAUSSIAN && p->num.sigma != RA_SIGMA_DEFAULT)
        return ra_error_set(RA_ERR_ARG, "sigma: the %s score takes no "
                            "bandwidth (it applies to the gaussian score only)",
                            ra_score_name(p->num.score));
    return RA_OK;
}

/* RoPE and ALiBi: the pairing and base, the slopes the caller gave. */
static ra_status check_posenc(const ra_shape *s, const ra_params *p)
{
    if (p->num.rope != RA_ROPE_NONE && p->num.score == RA_SCORE_ADDITIVE)
        return ra_error_set(RA_ERR_ARG, "rope: the additive score projects q "
                            "and k itself; rotary embeddings apply to the dot "
                            "and gaussian scores");
    if (p->num.rope != RA_ROPE_NONE && s->D % 2 != 0)
        return ra_error_set(RA_ERR_ARG, "rope: the head dim D=%lld must be "
                            "even (dims are rotated in pairs)",
                            (long long)s->D);
    if (p->num.rope != RA_ROPE_NONE &&
        !(p->num.rope_base > 0 && isfinite(p->num.rope_base)))
        return ra_error_set(RA_ERR_ARG, "rope: the base must be a finite "
                            "number > 0");
    if (p->num.rope == RA_ROPE_NONE &&
        p->num.rope_base != RA_ROPE_BASE_DEFAULT)
        return ra_error_set(RA_ERR_ARG, "rope_base: no rotary embedding to "
                            "apply it to (it needs rope interleaved or half)");
    if (p->num.align == RA_ALIGN_SEQUENCE && !p->num.causal &&
        !p->num.window && !p->num.alibi && p->num.rope == RA_ROPE_NONE)
        return ra_error_set(RA_ERR_ARG, "align per sequence: no rule to align "
                            "(it moves the queries of causal, window, alibi "
                            "and rope)");
    for (int64_t h = 0; p->num.alibi && p->num.alibi_slopes && h < s->H; h++)
        if (!isfinite(p->num.alibi_slopes[h]))
            return ra_error_set(RA_ERR_ARG, "alibi: slope %lld is not a "
                                "finite number", (long long)h);
    return RA_OK;
}

static ra_status check_masks(const ra_shape *s, const ra_masks *mk)
{
    if (mk && (!mk->q_segments) != (!mk->kv_segments))
        return ra_error_set(RA_ERR_ARG, "masks: q_segments and kv_segments "
                                        "go together");
    for (int64_t b = 0; mk && b < s->B; b++) {
        if (mk->q_lens && (mk->q_lens[b] < 0 || mk->q_lens[b] > s->N))
            return ra_error_set(RA_ERR_ARG, "masks: q_lens[%lld] = %lld is "
                                "outside [0, N=%lld]", (long long)b,
                                (long long)mk->q_lens[b], (long long)s->N);
        if (mk->kv_lens && (mk->kv_lens[b] < 0 || mk->kv_lens[b] > s->M))
            return ra_error_set(RA_ERR_ARG, "masks: kv_lens[%lld] = %lld is "
                                "outside [0, M=%lld]", (long long)b,
                                (long long)mk->kv_lens[b], (long long)s->M);
    }
    return RA_OK;
}

/* The shared checks: shape, the enums (ra_call_check_enums), score,
 * position encodings, score features and sinks (logits.c), window, ra_exec
 * (ra_call_check_exec), masks; RA_OK or the first problem. */
ra_status ra_call_check_params(const ra_shape *s, const ra_params *p,
                               const ra_masks *mk)
{
    ra_status st = ra_shape_check(s);
    if (st == RA_OK)
        st = ra_call_check_enums(p);
    if (st == RA_OK)
        st = check_score(s, p);
    if (st == RA_OK)
        st = check_posenc(s, p);
    if (st == RA_OK)
        st = ra_logits_check(s, p);
    if (st != RA_OK)
        return st;
    if (p->num.window && (p->num.window_left < 0 || p->num.window_right < 0))
        return ra_error_set(RA_ERR_ARG, "window: left and right must be >= 0");
    st = ra_call_check_exec(p);
    return st == RA_OK ? check_masks(s, mk) : st;
}

static ra_status check_map(const ra_shape *s, const ra_attn_map *map)
{
    if (!map || map->i0 < 0 || map->i1 > s->N || map->i0 >= map->i1)
        return ra_error_set(RA_ERR_ARG, "attention map: rows [%lld, %lld) "
                            "must lie within [0, N=%lld) and be non-empty",
                            map ? (long long)map->i0 : 0LL,
                            map ? (long long)map->i1 : 0LL, (long long)s->N);
    if (map->nheads < 1 || !map->heads || !map->out)
        return ra_error_set(RA_ERR_ARG, "attention map: heads and out are "
                                        "required");
    for (int64_t i = 0; i < map->nheads; i++)
        if (map->heads[i] < 0 || map->heads[i] >= s->H)
            return ra_error_set(RA_ERR_ARG, "attention map: head %lld is "
                                "outside [0, H=%lld)",
                                (long long)map->heads[i], (long long)s->H);
    return RA_OK;
}

ra_status strat_takes(const strat_row *row, const ra_params *p)
{
    const char *name = ra_strategy_name(row->id);
    if (!row->additive && p->num.score == RA_SCORE_ADDITIVE)
        return ra_error_set(RA_ERR_ARG, "strategy %s: the additive score "
                            "runs on strategy ring only", name);
    if (p->exec.strategy != RA_STRATEGY_HYBRID && p->exec.ulysses_size)
        return ra_error_set(RA_ERR_ARG, "ulysses_size: the %s strategy has "
                            "no head-parallel groups (it applies to strategy "
                            "hybrid)", ra_strategy_name(p->exec.strategy));
    if (row->id != RA_STRATEGY_RING && p->num.align == RA_ALIGN_SEQUENCE)
        return ra_error_set(RA_ERR_ARG, "strategy %s does not support "
                            "--align-per-sequence (per-sequence alignment "
                            "runs on strategy ring only)", name);
    if (p->exec.wire == RA_WIRE_BF16 &&
        (row->id != RA_STRATEGY_RING || p->num.score == RA_SCORE_ADDITIVE))
        return ra_error_set(RA_ERR_ARG, "strategy %s: --wire bf16 (K/V in "
                            "bf16 between ranks) runs on strategy ring with "
                            "the dot or gaussian score only", name);
    return RA_OK;
}

/* What the row refuses before any work: the shared checks, then the
 * options the row does not take (strat_takes), then checkpoints where
 * none are taken (strat_ckpt_takes). */
static ra_status call_check(const strat_row *row, const strat_call *c)
{
    ra_status st = ra_call_check_params(c->shape, c->params, c->masks);
    if (st == RA_OK)
        st = ra_logits_check_map(c->params, c->map);
    if (st == RA_OK)
        st = strat_takes(row, c->params);
    return st == RA_OK ? strat_ckpt_takes(c) : st;
}

typedef struct {
    strat_call *c;
    float *qr, *kr;   /* the call's own q and k (call_owns_qk): rotated by
                         RoPE, centred for the Gaussian, rounded in place */
    float *qb, *kb, *vb; /* bf16-rounded copies of q, k (not owned), v */
    double *slopes;
    double *bounds;   /* Gaussian: the keys' bounds (centre.h) */
    float *centre;    /* Gaussian: their centres (B, G, D) */
} call_arrays;

/* Whether the call works on copies of q and k of its own: RoPE rotates
 * them, the Gaussian score centres them (centre.h). */
static int call_owns_qk(const ra_params *p)
{
    return p->num.rope != RA_ROPE_NONE || p->num.score == RA_SCORE_GAUSSIAN;
}

/* Whether the call rounds q (bf16 precision) and k, v (bf16 precision or
 * K/V in bf16 on the wire) to bf16 before any row runs. */
static int call_rounds_q(const ra_params *p)
{
    return p->num.precision == RA_PRECISION_BF16;
}

static int call_rounds_kv(const ra_params *p)
{
    return p->num.precision == RA_PRECISION_BF16 ||
           p->exec.wire == RA_WIRE_BF16;
}

/* The call's block (c->mem): the positions, RoPE's rotated q and k,
 * ALiBi's slopes; those a call does not use are not carved. */
static void call_carve(void *arg, ra_carver *cv)
{
    call_arrays *a = arg;
    strat_call *c = a->c;
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    c->qpos = ra_carve(cv, c->n, sizeof(int64_t));
    c->kpos = ra_carve(cv, c->m_own, sizeof(int64_t));
    if (call_owns_qk(p)) {
        a->qr = ra_carve(cv, s->B * c->n * s->H * s->D, sizeof(float));
        a->kr = ra_carve(cv, s->B * c->m_own * s->G * s->D, sizeof(float));
    }
    if (p->num.score == RA_SCORE_GAUSSIAN) {
        a->bounds = ra_carve(cv, 2 * s->B * s->G * s->D, sizeof(double));
        a->centre = ra_carve(cv, s->B * s->G * s->D, sizeof(float));
    }
    if (call_rounds_q(p) && !call_owns_qk(p))
        a->qb = ra_carve(cv, s->B * c->n * s->H * s->D, sizeof(float));
    if (call_rounds_kv(p)) {
        if (!call_owns_qk(p))
            a->kb = ra_carve(cv, s->B * c->m_own * s->G * ra_shape_dk(s),
                             sizeof(float));
        a->vb = ra_carve(cv, s->B * c->m_own * s->G * s->Dv, sizeof(float));
    }
    if (p->num.alibi)
        a->slopes = ra_carve(cv, s->H, sizeof(double));
    if (p->num.align == RA_ALIGN_SEQUENCE)
        c->qalign = ra_carve(cv, s->B * c->n, sizeof(int64_t));
}

/* The global positions of this rank's queries and keys: the one place a
 * call resolves them; every row and mask reads c->qpos and c->kpos. */
static void call_positions(strat_call *c)
{
    strat_slice_pos(c, c->shape->N, c->r, c->qpos);
    strat_slice_pos(c, c->shape->M, c->r, c->kpos);
}

/* This rank's sizes under the resolved layout, the threads, whether the
 * kernel may poll, the call's block and the positions. */
static ra_status call_size(strat_call *c, call_arrays *a)
{
    int level = MPI_THREAD_SINGLE;
    if (MPI_Comm_size(c->comm, &c->P) != MPI_SUCCESS ||
        MPI_Comm_rank(c->comm, &c->r) != MPI_SUCCESS ||
        MPI_Query_thread(&level) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: cannot query the communicator",
                            c->name);
    c->segs = c->masks && c->masks->q_segments;
    c->lay = ra_params_layout(c->params, c->segs);
    c->n = ra_params_slice(c->params, c->lay, c->shape->N, c->r, c->P).count;
    c->m_own = ra_params_slice(c->params, c->lay, c->shape->M, c->r, c->P).count;
    c->threads = ra_params_threads(c->params);
    /* only the thread that called MPI may poll, and only if MPI allows it
     * while other threads run */
    c->may_poll = !c->params->no_poll &&
                  (c->threads == 1 || level >= MPI_THREAD_FUNNELED);
    /* every strategy sends a slice's rows with int counts (each refuses
     * more precisely later); found here before the positions' allocation */
    if (c->shape->B * (c->n > c->m_own ? c->n : c->m_own) > INT_MAX)
        return ra_error_set(RA_ERR_ARG, "%s: a slice of %lld rows cannot "
                            "be described to MPI (counts are int); use more "
                            "ranks", c->name,
                            (long long)(c->shape->B *
                                        (c->n > c->m_own ? c->n : c->m_own)));
    a->c = c;
    c->mem = ra_carve_alloc(call_carve, a);
    if (!c->mem)
        return ra_error_set(RA_ERR_NOMEM, "%s: cannot allocate the "
                            "positions and the rotated or rounded q, k, v",
                            c->name);
    call_positions(c);
    return RA_OK;
}

/* Refuses, on every rank alike, inputs whose scores or accumulators would
 * leave float32 (range.h) for kernel calls on the largest K/V slice:
 * local bounds, their maxima over the ranks (watched), one verdict.
 * Inputs that may hold NaN or inf (params->nonfinite) are the caller's to
 * judge. */
static ra_status call_check_range(strat_call *c)
{
    if (c->params->num.nonfinite)
        return RA_OK;
    const ra_input_bounds mine = ra_input_bounds_of(c->shape, c->n, c->m_own,
                                                    c->q, c->k, c->v,
                                                    c->threads);
    double in[3] = {mine.q_norm, mine.k_norm, mine.v_abs}, all[3];
    MPI_Request req;
    if (MPI_Iallreduce(in, all, 3, MPI_DOUBLE, MPI_MAX, c->comm, &req) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Iallreduce of the input "
                            "bounds failed", c->name);
    const strat_watch w = {"the check of the inputs' range", NULL, 0};
    ra_status st = strat_wait(c, 1, &req, &w);
    if (st != RA_OK)
        return st;
    const ra_input_bounds bounds = {all[0], all[1], all[2]};
    return ra_input_bounds_check(c->shape, c->params, &bounds,
                                 strat_slice_most(c, c->shape->M));
}

void call_rope_queries(const strat_call *c, float *x, double sign)
{
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    ra_rope_rows r = {p->num.rope, p->num.rope_base, s->B,       c->n, s->H,
                      s->D,        c->qpos,          s->M - s->N};
    if (!c->qalign) {
        ra_rope_turn(&r, x, sign);
        return;
    }
    r.B = 1; /* each batch at its own aligned positions */
    r.offset = 0;
    for (int64_t b = 0; b < s->B; b++) {
        r.pos = c->qalign + b * c->n;
        ra_rope_turn(&r, x + b * c->n * s->H * s->D, sign);
    }
}

/* Position encodings, once per call before any row runs: RoPE rotates
 * this rank's q (at its aligned positions: qpos + M - N, or c->qalign)
 * and k (at kpos) into copies that
 * replace c->q and c->k, so every row moves and folds rotated rows;
 * ALiBi's slopes (the caller's or the standard ones) in c->slopes, which
 * strat_block_init hands the kernel. */
static void call_posenc(strat_call *c, const call_arrays *a)
{
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    if (p->num.rope != RA_ROPE_NONE) {
        memcpy(a->qr, c->q, sizeof(float) * (size_t)(s->B * c->n * s->H *
                                                     s->D));
        memcpy(a->kr, c->k, sizeof(float) * (size_t)(s->B * c->m_own * s->G *
                                                     s->D));
        call_rope_queries(c, a->qr, 1.0);
        const ra_rope_rows kr = {p->num.rope, p->num.rope_base,
                                 s->B,        c->m_own,
                                 s->G,        s->D,
                                 c->kpos,     0};
        ra_rope_apply(&kr, a->kr);
        c->q = a->qr;
        c->k = a->kr;
    }
    if (p->num.alibi) {
        if (p->num.alibi_slopes)
            memcpy(a->slopes, p->num.alibi_slopes,
                   sizeof(double) * (size_t)s->H);
        else
            ra_alibi_slopes(s->H, a->slopes);
        c->slopes = a->slopes;
    }
}

/* The Gaussian score: this rank's q and k (rotated already, not yet
 * rounded) moved into the call's copies by the keys' centre per batch, kv
 * head and dim from their bounds over every rank (centre.h), so that the
 * kernels' fp32 score does not cancel. Collective; every rank returns the
 * same status. */
static ra_status call_centre(strat_call *c, const call_arrays *a)
{
    const ra_shape *s = c->shape;
    if (c->params->num.score != RA_SCORE_GAUSSIAN)
        return RA_OK;
    const int64_t len = s->B * s->G * s->D;
    if (2 * len > INT_MAX) /* the same on every rank: no collective yet */
        return ra_error_set(RA_ERR_ARG, "score gaussian: B G D = %lld key "
                            "centres are more than one reduction takes "
                            "(2^30)", (long long)len);
    for (int64_t i = 0; i < 2 * len; i++)
        a->bounds[i] = -INFINITY;
    ra_centre_bounds(c->k, s->B, c->m_own, s->G, s->D, c->kpos,
                     c->masks ? c->masks->kv_lens : NULL, a->bounds);
    MPI_Request req;
    if (MPI_Iallreduce(MPI_IN_PLACE, a->bounds, (int)(2 * len), MPI_DOUBLE,
                       MPI_MAX, c->comm, &req) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Iallreduce of the keys' "
                            "bounds failed", c->name);
    const strat_watch w = {"the keys' bounds", NULL, 0};
    const ra_status st = strat_wait(c, 1, &req, &w);
    if (st != RA_OK)
        return st;
    ra_centre_of(a->bounds, s->B, s->G, s->D, a->centre);
    ra_centre_apply(c->q, a->qr, s->B, c->n, s->H, s->G, s->D, a->centre);
    ra_centre_apply(c->k, a->kr, s->B, c->m_own, s->G, s->G, s->D,
                    a->centre);
    c->q = a->qr;
    c->k = a->kr;
    return RA_OK;
}

/* The Gaussian score with RoPE, after the forward (its lse) or before
 * the backward (the given lse): the worst ratio of fp32 rounding to the
 * error allowed over every rank's rows (range.h), watched; every rank
 * returns the same verdict. */
static ra_status call_gauss_rope(strat_call *c, const float *lse)
{
    const ra_params *p = c->params;
    if (p->num.score != RA_SCORE_GAUSSIAN || p->num.rope == RA_ROPE_NONE)
        return RA_OK;
    double worst = ra_gauss_rope_ratio(c->shape, c->n, c->q, lse, p->num.sigma);
    MPI_Request req;
    if (MPI_Iallreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, c->comm,
                       &req) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Iallreduce of the Gaussian "
                            "score's rounding failed", c->name);
    const strat_watch w = {"the check of the Gaussian score's rounding",
                           NULL, 0};
    const ra_status st = strat_wait(c, 1, &req, &w);
    if (st != RA_OK || worst <= 1.0)
        return st;
    return ra_error_set(RA_ERR_INPUT, "score gaussian with RoPE: q and k sit "
                        "too far from 0 for float32 (the rotation leaves no "
                        "common offset to take off): the scores' rounding "
                        "may reach %.3g times the error allowed; centre q "
                        "and k before the call, widen sigma or drop RoPE",
                        worst);
}

/* x (len) into dst (NULL: x is already a copy of the call's) rounded to
 * bf16; returns the rounded array. */
static float *call_round(const float *x, float *dst, int64_t len)
{
    float *y = dst ? dst : (float *)x;
    if (dst)
        memcpy(dst, x, sizeof(float) * (size_t)len);
    ra_bf16_round(y, len);
    return y;
}

/* bf16 precision and K/V in bf16 on the wire: the call's q (bf16
 * precision) and k, v rounded to bf16 once, after RoPE and the Gaussian's
 * centring, into copies that replace c->q, c->k, c->v (the call's own
 * copies, call_owns_qk, are rounded in place), so
 * every row moves and folds rounded rows; a bf16 value stays as it is. */
static void call_round_inputs(strat_call *c, const call_arrays *a)
{
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    if (call_rounds_q(p))
        c->q = call_round(c->q, a->qb, s->B * c->n * s->H * s->D);
    if (call_rounds_kv(p)) {
        c->k = call_round(c->k, a->kb,
                          s->B * c->m_own * s->G * ra_shape_dk(s));
        c->v = call_round(c->v, a->vb, s->B * c->m_own * s->G * s->Dv);
    }
}

/* bf16 precision: the call's bf16 tile products (bf16.h), made once for
 * the forward's or the backward's full tiles, into c->mm16. */
static ra_status call_mm16(strat_call *c)
{
    if (c->params->num.precision != RA_PRECISION_BF16)
        return RA_OK;
    ra_block blk;
    ra_mm_shape shapes[RA_MM16_MAX];
    strat_block_init(c, c->n, c->qpos, NULL, &blk);
    const int count = ra_kernel_mm_shapes(&blk, c->grads != NULL, shapes);
    return ra_mm16_create(ra_gemm_pick(c->params->exec.gemm), shapes, count,
                          c->threads, &c->mm16);
}

/* call_agree_options waits as every wait of the call does. */
static ra_status call_wait(void *ctx, MPI_Request *req, const char *phase)
{
    const strat_watch w = {phase, NULL, 0, NULL, NULL};
    return strat_wait(ctx, 1, req, &w);
}

/* The local checks' verdict st and the fingerprint of the options (when
 * st is RA_OK: its fields are then sane to read), agreed over the ranks
 * under the stall watchdog before anything a strategy does. */
static ra_status call_agree_options(strat_call *c, ra_status st)
{
    const ra_call_options o = {
        .call = c->grads ? RA_CALL_BACKWARD : RA_CALL_FORWARD,
        .shape = c->shape, .params = c->params, .masks = c->masks,
        .map = c->map, .dw = c->grads && c->grads->dw, .weights = 1};
    ra_fingerprint fp = {0};
    if (st == RA_OK)
        ra_call_fingerprint(&o, &fp);
    if (MPI_Comm_size(c->comm, &c->P) != MPI_SUCCESS ||
        MPI_Comm_rank(c->comm, &c->r) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: cannot query the communicator",
                            c->name);
    const ra_agree_waiter w = {call_wait, c};
    return ra_agree_options(c->comm, st, &fp, &w);
}

/* The open after the local checks (st): agree, size and carve, agree,
 * the node map, the range check, the position encodings. Every rank
 * returns the same status. */
static ra_status call_open(strat_call *c, ra_status st)
{
    call_arrays a = {0};
    st = call_agree_options(c, st);
    if (st == RA_OK)
        st = ra_gemm_agree(c->comm, c->params->exec.gemm);
    if (st == RA_OK) {
        st = call_size(c, &a);
        st = ra_agree(c->comm, st == RA_OK ? ra_call_check_operands(c) : st);
    }
    if (st == RA_OK)
        st = ra_nodes_of(c->comm, c->name, &c->node_of);
    if (st == RA_OK)
        st = call_check_range(c);
    if (st == RA_OK && c->qalign)
        st = ra_align_queries(c->comm, c->shape, c->lay, c->params, c->masks,
                              c->qalign);
    if (st == RA_OK) {
        call_posenc(c, &a);
        st = call_centre(c, &a);
    }
    if (st == RA_OK) {
        call_round_inputs(c, &a);
        st = ra_agree(c->comm, call_mm16(c));
    }
    return st;
}

/* The end of a call under the stall watchdog: each rank waits until its
 * left neighbour has finished too, so that a rank stopped after its last
 * transfer (single-copy shared memory needs no help from the sender) is
 * found and named here, not in the caller's next collective. Nothing to
 * do at P = 1 or without a timeout. */
static ra_status call_finish(strat_call *c)
{
    if (c->P == 1 || !(c->params->exec.stall_timeout > 0))
        return RA_OK;
    const int peer[2] = {(c->r + c->P - 1) % c->P, (c->r + 1) % c->P};
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (MPI_Irecv(NULL, 0, MPI_BYTE, peer[0], TAG_END, c->comm, &req[0]) !=
            MPI_SUCCESS ||
        MPI_Isend(NULL, 0, MPI_BYTE, peer[1], TAG_END, c->comm, &req[1]) !=
            MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: posting the end of the call "
                            "failed", c->name);
    const strat_watch w = {"the end of the call", peer, 1};
    return strat_wait(c, 2, req, &w);
}

/* Frees the call's block and communicator and completes the timing;
 * after a stall both stay with the transfers in flight (the job must
 * end, ringattn.h). Returns st, or the tear-down's failure. */
static ra_status call_close(strat_call *c, ra_status st, double t_start,
                            ra_timing *timing)
{
    free(c->node_of);
    ra_mm16_free(c->mm16);
    if (!c->stalled) {
        ra_carve_free(c->mem);
        if (c->comm != MPI_COMM_NULL &&
            MPI_Comm_free(&c->comm) != MPI_SUCCESS && st == RA_OK)
            st = ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_free failed",
                              c->name);
    }
    c->tm->total = MPI_Wtime() - t_start;
    if (st == RA_OK && !c->tm->steps) /* a row that did not count them */
        c->tm->steps = c->P;
    if (timing)
        *timing = *c->tm;
    return st;
}

/* What each strategy can run, past the shared checks: collective over
 * comm, the same verdict on every rank once agreed. */
static ra_status fits_ulysses(MPI_Comm comm, const ra_shape *s,
                              const ra_params *p, int segs)
{
    int P = 1;
    (void)p;
    (void)segs;
    if (MPI_Comm_size(comm, &P) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ulysses: cannot query the "
                                        "communicator");
    return ulysses_fits(s, P);
}

static ra_status fits_hybrid(MPI_Comm comm, const ra_shape *s,
                             const ra_params *p, int segs)
{
    int u;
    (void)segs;
    return hybrid_group_size(comm, s, p, &u);
}

/* The strategies, one row each (strategy.h). Adding a strategy is its
 * file and a row here; the performance model keeps its own row for it
 * (model_costs, comm/perf/model.c), which the call path never reads. */
const strat_row strat_table[RA_STRATEGY_COUNT] = {
    {RA_STRATEGY_RING, 1, NULL, ring_forward, ring_backward, 1},
    {RA_STRATEGY_ALLGATHER, 0, allgather_fits, allgather_forward, NULL, 1},
    {RA_STRATEGY_TREE, 0, NULL, tree_forward, NULL},
    {RA_STRATEGY_RING_Q, 0, NULL, ringq_forward, NULL, 1},
    {RA_STRATEGY_ULYSSES, 0, fits_ulysses, ulysses_forward, NULL},
    {RA_STRATEGY_HYBRID, 0, fits_hybrid, hybrid_forward, NULL},
};

/* The row of strategy id; an unknown id (refused by the checks) gets the
 * ring's. */
static const strat_row *strat_row_of(ra_strategy id)
{
    for (size_t i = 0; i < sizeof strat_table / sizeof *strat_table; i++)
        if (strat_table[i].id == id)
            return &strat_table[i];
    return &strat_table[0];
}

int ra_call_steps(const ra_params *params, int P)
{
    const ra_strategy id = params->exec.strategy;
    return id >= 0 && id < RA_STRATEGY_COUNT && strat_row_of(id)->stepped
               ? P : 1;
}

ra_strategy ra_call_choice_strategy(const ra_params *params)
{
    return params->exec.ulysses_size ? RA_STRATEGY_HYBRID : RA_STRATEGY_RING;
}

ra_status ra_call_check_ranks(const ra_shape *shape, const ra_params *params,
                              int P)
{
    const int64_t u = params->exec.ulysses_size;
    if (u == 0 || params->exec.strategy != RA_STRATEGY_HYBRID)
        return RA_OK; /* the plan checks what auto may pick */
    return hybrid_group_check(shape, P, (int)u);
}

/* The call's own communicator (c->comm, with c->r and c->P): a duplicate
 * of comm that returns MPI errors (ringattn.h), made under the stall
 * watchdog, so that a rank that never comes to the call is named instead
 * of waited for. After a stall the duplicate's slot stays allocated: the
 * duplication is still in flight (the job must end). */
static ra_status call_dup(strat_call *c, MPI_Comm comm)
{
    MPI_Comm *slot = malloc(sizeof *slot);
    MPI_Request req;
    if (!slot || MPI_Comm_rank(comm, &c->r) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &c->P) != MPI_SUCCESS ||
        MPI_Comm_idup(comm, slot, &req) != MPI_SUCCESS) {
        free(slot);
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_idup failed", c->name);
    }
    const strat_watch w = {"the start of the call", NULL, 0, NULL, NULL};
    const ra_status st = strat_wait(c, 1, &req, &w);
    if (st == RA_OK) {
        c->comm = *slot;
        MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    }
    if (!c->stalled)
        free(slot);
    return st;
}

/* One call of row: open (the local checks or the caller's refusal pre,
 * agreement, set-up), the row's forward or backward (a), the end token,
 * close. Every rank takes the same branches up to the row. */
static ra_status call_run(MPI_Comm comm, const strat_call *a,
                          const strat_row *row, ra_status pre,
                          ra_timing *timing)
{
    ra_timing tm = {0};
    const ra_status usable = ra_comm_usable(comm, a->grads ? "ra_backward"
                                                           : "ra_forward");
    if (usable != RA_OK) {
        if (timing)
            *timing = tm;
        return usable;
    }
    const double t_start = MPI_Wtime();
    ra_params params = *a->params;
    ra_params_saturate(&params);
    strat_call c = *a;
    c.params = &params;
    c.comm = MPI_COMM_NULL;
    c.tm = &tm;
    c.name = ra_strategy_name(row->id);
    ra_status st = pre == RA_OK ? call_check(row, &c) : pre;
    const ra_status dup = call_dup(&c, comm);
    if (dup != RA_OK)
        return dup;
    st = call_open(&c, st);
    if (st == RA_OK) {
        const int blas = ra_blas_enter(1); /* single-threaded BLAS inside
                                              our own threads */
        if (c.grads)
            st = call_gauss_rope(&c, c.grads->lse);
        if (st == RA_OK)
            st = c.grads ? row->backward(&c) : row->forward(&c);
        if (st == RA_OK)
            st = call_finish(&c);
        if (st == RA_OK && !c.grads)
            st = call_gauss_rope(&c, c.lse);
        if (st == RA_OK && !c.grads) /* the sinks' one place (logits.c) */
            ra_logits_sinks_forward(&c);
        else if (st == RA_OK)
            st = ra_logits_sinks_backward(&c);
        ra_blas_leave(blas);
        if (st == RA_OK && !c.stepped) /* a row without steps */
            ra_step_report(c.params, 1, 1);
    }
    return call_close(&c, st, t_start, timing);
}

/* The additive weights, or NULL when incomplete. */
static const ra_additive *additive_given(const ra_params *p)
{
    const ra_additive *ad = p->num.additive;
    return ad && ad->w_q && ad->w_k && ad->w_v ? ad : NULL;
}

/* params saturated into p, with a stand-in for additive weights not yet
 * read (the call checks them, and agrees their values); its row. */
static const strat_row *check_view(const ra_params *params, ra_params *p)
{
    static const float zero;
    static const ra_additive stand_in = {1, &zero, &zero, &zero};
    *p = *params;
    ra_params_saturate(p);
    const strat_row *row = strat_row_of(p->exec.strategy);
    if (row->additive && p->num.score == RA_SCORE_ADDITIVE &&
        !additive_given(p))
        p->num.additive = &stand_in;
    return row;
}

ra_status ra_call_check_local(const ra_shape *shape, const ra_params *params)
{
    ra_error_clear();
    ra_params p;
    const strat_row *row = check_view(params, &p);
    const strat_call c = {.shape = shape, .params = &p,
                          .name = ra_strategy_name(row->id)};
    return call_check(row, &c);
}

ra_status ra_call_strategy_check(MPI_Comm comm, const ra_shape *shape,
                                 const ra_params *params, int segments)
{
    ra_error_clear();
    ra_status st = ra_comm_usable(comm, "ra_strategy_check");
    if (st != RA_OK)
        return st;
    ra_params p;
    const strat_row *row = check_view(params, &p);
    const strat_call c = {.shape = shape, .params = &p,
                          .name = ra_strategy_name(row->id)};
    st = call_check(row, &c);
    ra_fingerprint fp = {0};
    const ra_call_options o = {.call = RA_CALL_STRATEGY_CHECK,
                               .shape = shape, .params = &p,
                               .segments = segments != 0};
    if (st == RA_OK)
        ra_call_fingerprint(&o, &fp);
    st = ra_agree_options(comm, st, &fp, NULL);
    if (st == RA_OK && row->fits)
        st = ra_agree(comm, row->fits(comm, shape, &p, segments));
    return st;
}

/* The arguments a forward and a backward share; a missing in (refused
 * by the caller, agreed in the call) reads as no tensors. */
static strat_call call_args(const ra_shape *shape, const ra_params *params,
                            const ra_masks *masks, const ra_qkv *in)
{
    strat_call a = {.shape = shape, .params = params, .masks = masks};
    if (in) {
        a.q = in->q;
        a.k = in->k;
        a.v = in->v;
    }
    return a;
}

/* A forward with an attention map runs the ring, whatever the strategy.
 * A missing shape, in or out is refused like any argument: agreed in the
 * call. */
ra_status ra_call_forward(MPI_Comm comm, const ra_shape *shape,
                          const ra_params *params, const ra_masks *masks,
                          const ra_qkv *in, const ra_out *out,
                          ra_timing *timing)
{
    ra_error_clear();
    strat_call a = call_args(shape, params, masks, in);
    ra_status pre = ra_shape_check(shape);
    if (pre == RA_OK && (!in || !out))
        pre = ra_error_set(RA_ERR_ARG, "forward: in and out are required");
    else if (pre == RA_OK && out->map)
        pre = check_map(shape, out->map);
    if (out) {
        a.o = out->o;
        a.lse = out->lse;
        a.map = out->map;
    }
    const ra_strategy id = a.map ? RA_STRATEGY_RING : params->exec.strategy;
    return call_run(comm, &a, strat_row_of(id), pre, timing);
}

/* The backward's own refusals: its structs, and the additive weights'
 * gradients when they are asked for (other scores ignore dw); the
 * tensors once the call knows which rows this rank holds
 * (ra_call_check_operands). */
static ra_status check_grads(const ra_qkv *in, const ra_grads *g,
                             ra_score score)
{
    if (!in || !g)
        return ra_error_set(RA_ERR_ARG, "backward: in and grads are "
                                        "required");
    if (score == RA_SCORE_ADDITIVE && g->dw &&
        (!g->dw->dw_q || !g->dw->dw_k || !g->dw->dw_v))
        return ra_error_set(RA_ERR_ARG, "backward: dw_q, dw_k and dw_v are "
                                        "required when weight gradients are "
                                        "asked for");
    return RA_OK;
}

ra_status ra_call_backward(MPI_Comm comm, const ra_shape *shape,
                           const ra_params *params, const ra_masks *masks,
                           const ra_qkv *in, const ra_grads *grads,
                           ra_timing *timing)
{
    static const ra_grads no_grads;
    ra_error_clear();
    ra_status st = check_grads(in, grads, params->num.score);
    /* the kernels keep a NaN or inf to the rows that see it in the
     * forward only (issue 39, class 8) */
    if (st == RA_OK && params->num.nonfinite)
        st = ra_error_set(RA_ERR_ARG, "backward: nonfinite "
                          "(--allow-nonfinite) is for the forward only; the "
                          "backward takes finite inputs");
    ra_grads g = grads ? *grads : no_grads;
    if (params->num.score != RA_SCORE_ADDITIVE)
        g.dw = NULL;
    strat_call a = call_args(shape, params, masks, in);
    a.grads = &g;
    return call_run(comm, &a, strat_row_of(RA_STRATEGY_RING), st, timing);
}

ra_status ra_strategy_check(MPI_Comm comm, const ra_shape *shape,
                            const ra_numerics *num, const ra_exec *exec,
                            int segments)
{
    ra_params p;
    ra_params_join(num, exec, &p);
    return ra_call_strategy_check(comm, shape, &p, segments);
}

ra_status ra_forward(MPI_Comm comm, const ra_shape *shape,
                     const ra_numerics *num, const ra_exec *exec,
                     const ra_masks *masks, const ra_qkv *in,
                     const ra_out *out, ra_timing *timing)
{
    ra_params p;
    ra_params_join(num, exec, &p);
    return ra_call_forward(comm, shape, &p, masks, in, out, timing);
}

ra_status ra_backward(MPI_Comm comm, const ra_shape *shape,
                      const ra_numerics *num, const ra_exec *exec,
                      const ra_masks *masks, const ra_qkv *in,
                      const ra_grads *grads, ra_timing *timing)
{
    ra_params p;
    ra_params_join(num, exec, &p);
    return ra_call_backward(comm, shape, &p, masks, in, grads, timing);
}
