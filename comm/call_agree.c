/* call_agree.c: the library's own contract for one call, past the shape
 * and the scores (call.c): every enum's range, ra_exec's bounds, the operands
 * a rank must pass for the tokens it holds, the backward's lse, and the
 * fingerprint of every option that all ranks must pass alike (agreed by
 * ra_agree_options at the start of the call, agree.h). */
#include <math.h>

#include "call.h"
#include "gemm_env.h"
#include "strategy.h"

ra_status ra_call_check_enums(const ra_params *p)
{
    const struct {
        const char *field;
        int value, last;
    } e[8] = {{"num.score", (int)p->num.score, RA_SCORE_ADDITIVE},
              {"num.rope", (int)p->num.rope, RA_ROPE_HALF},
              {"num.align", (int)p->num.align, RA_ALIGN_SEQUENCE},
              {"num.precision", (int)p->num.precision, RA_PRECISION_BF16},
              {"exec.strategy", (int)p->exec.strategy, RA_STRATEGY_COUNT - 1},
              {"exec.layout", (int)p->exec.layout, RA_LAYOUT_BALANCED},
              {"exec.gemm", (int)p->exec.gemm, RA_GEMM_ONEDNN},
              {"exec.wire", (int)p->exec.wire, RA_WIRE_BF16}};
    for (int i = 0; i < 8; i++)
        if (e[i].value < 0 || e[i].value > e[i].last)
            return ra_error_set(RA_ERR_ARG, "%s: %d is none of its values "
                                "(0 .. %d)", e[i].field, e[i].value,
                                e[i].last);
    return RA_OK;
}

ra_status ra_call_check_exec(const ra_params *p)
{
    if (p->exec.block_q < 0 || p->exec.block_q > RA_BLOCK_MAX)
        return ra_error_set(RA_ERR_ARG,
                            "exec.block_q: %lld query rows is "
                            "outside [0, %d] (0: the default)",
                            (long long)p->exec.block_q, RA_BLOCK_MAX);
    if (p->exec.block_kv < 0 || p->exec.block_kv > RA_BLOCK_MAX)
        return ra_error_set(RA_ERR_ARG,
                            "exec.block_kv: %lld key rows is "
                            "outside [0, %d] (0: the default)",
                            (long long)p->exec.block_kv, RA_BLOCK_MAX);
    if (p->exec.threads < 0 || p->exec.threads > RA_THREADS_MAX)
        return ra_error_set(RA_ERR_ARG,
                            "exec.threads: %d is outside "
                            "[0, %d] (0: one thread)",
                            p->exec.threads, RA_THREADS_MAX);
    if (!ra_gemm_available(p->exec.gemm))
        return ra_error_set(RA_ERR_ARG,
                            "gemm: engine '%s' is not in this "
                            "build of the library (oneDNN: build with "
                            "libdnnl-dev installed)",
                            ra_gemm_name(p->exec.gemm));
    ra_gemm env_gemm;
    if (p->exec.gemm == RA_GEMM_AUTO && ra_gemm_env(&env_gemm) != RA_OK)
        return RA_ERR_ARG; /* RINGATTN_GEMM names no engine of this build */
    if (!(p->exec.stall_timeout >= 0))
        return ra_error_set(RA_ERR_ARG, "exec.stall_timeout: must be >= 0 "
                            "seconds");
    if (p->exec.mem_limit < 0 || p->exec.ulysses_size < 0)
        return ra_error_set(RA_ERR_ARG, "exec.%s: %lld is negative",
                            p->exec.mem_limit < 0 ? "mem_limit"
                                                  : "ulysses_size",
                            (long long)(p->exec.mem_limit < 0
                                            ? p->exec.mem_limit
                                            : p->exec.ulysses_size));
    return RA_OK;
}

/* The first operand of list[0 .. n) that is NULL while this rank holds
 * rows of it (count > 0), refused by name. */
typedef struct {
    const char *name;
    const void *x;
    int64_t count;
} operand;

static ra_status check_present(const char *call, int rank,
                               const operand *list, int n)
{
    for (int i = 0; i < n; i++)
        if (!list[i].x && list[i].count > 0)
            return ra_error_set(RA_ERR_ARG, "%s: %s is NULL while rank %d "
                                "holds %lld of its rows", call, list[i].name,
                                rank, (long long)list[i].count);
    return RA_OK;
}

/* The backward's lse: finite, or -inf for a row that sees no key. */
static ra_status check_lse(const strat_call *c)
{
    const int64_t len = c->shape->B * c->shape->H * c->n;
    const float *lse = c->grads->lse;
    for (int64_t i = 0; i < len; i++)
        if (isnan(lse[i]) || lse[i] == INFINITY)
            return ra_error_set(RA_ERR_ARG, "backward: lse holds %s at "
                                "index %lld of rank %d (only -inf, for a "
                                "row that sees no key, is not finite)",
                                isnan(lse[i]) ? "NaN" : "+inf", (long long)i,
                                c->r);
    return RA_OK;
}

/* Where a rank holding no rows passed NULL: an address no row is ever
 * read from or written to, so that no copy of zero bytes sees NULL. */
static float no_rows[1];

static void fill_empty(strat_call *c)
{
    c->q = c->q ? c->q : no_rows;
    c->k = c->k ? c->k : no_rows;
    c->v = c->v ? c->v : no_rows;
    if (!c->grads) {
        c->o = c->o ? c->o : no_rows;
        c->lse = c->lse ? c->lse : no_rows;
        return;
    }
    ra_grads *g = (ra_grads *)c->grads; /* the call's own copy (call.c) */
    g->o = g->o ? g->o : no_rows;
    g->lse = g->lse ? g->lse : no_rows;
    g->dout = g->dout ? g->dout : no_rows;
    g->dq = g->dq ? g->dq : no_rows;
    g->dk = g->dk ? g->dk : no_rows;
    g->dv = g->dv ? g->dv : no_rows;
}

static ra_status check_operands(const strat_call *c)
{
    const int64_t n = c->n, m = c->m_own;
    if (!c->grads) {
        const operand fwd[5] = {{"in->q", c->q, n}, {"in->k", c->k, m},
                                {"in->v", c->v, m}, {"out->o", c->o, n},
                                {"out->lse", c->lse, n}};
        return check_present("forward", c->r, fwd, 5);
    }
    const ra_grads *g = c->grads;
    const operand bwd[9] = {
        {"in->q", c->q, n},        {"in->k", c->k, m},
        {"in->v", c->v, m},        {"grads->o", g->o, n},
        {"grads->lse", g->lse, n}, {"grads->dout", g->dout, n},
        {"grads->dq", g->dq, n},   {"grads->dk", g->dk, m},
        {"grads->dv", g->dv, m}};
    ra_status st = check_present("backward", c->r, bwd, 9);
    if (st == RA_OK && !c->params->num.nonfinite)
        st = check_lse(c);
    return st;
}

ra_status ra_call_check_operands(strat_call *c)
{
    const ra_status st = check_operands(c);
    if (st == RA_OK)
        fill_empty(c);
    return st;
}

/* ---- The fingerprint -------------------------------------------------- */

static void fp_shape(ra_fingerprint *fp, const ra_shape *s)
{
    static const ra_shape none;
    if (!s)
        s = &none;
    ra_fp_int(fp, "shape.B", s->B);
    ra_fp_int(fp, "shape.N", s->N);
    ra_fp_int(fp, "shape.M", s->M);
    ra_fp_int(fp, "shape.H", s->H);
    ra_fp_int(fp, "shape.G", s->G);
    ra_fp_int(fp, "shape.D", s->D);
    ra_fp_int(fp, "shape.Dv", s->Dv);
    ra_fp_int(fp, "shape.Dk", ra_shape_dk(s));
}

/* The additive score's A and weights (when o->weights: ra_strategy_check
 * may come before the caller has them). */
static void fp_additive(ra_fingerprint *fp, const ra_call_options *o)
{
    const ra_params *p = o->params;
    const ra_additive *ad =
        p->num.score == RA_SCORE_ADDITIVE ? p->num.additive : NULL;
    const int64_t A = ad && o->weights ? ad->A : 0;
    const int values = A > 0 && o->shape;
    const int64_t D = values ? o->shape->D : 0;
    const int64_t Dk = values ? ra_shape_dk(o->shape) : 0;
    ra_fp_int(fp, "num.additive.A", A);
    ra_fp_bytes(fp, "num.additive.w_q", values ? ad->w_q : NULL,
                sizeof(float) * (size_t)(A * D));
    ra_fp_bytes(fp, "num.additive.w_k", values ? ad->w_k : NULL,
                sizeof(float) * (size_t)(A * Dk));
    ra_fp_bytes(fp, "num.additive.w_v", values ? ad->w_v : NULL,
                sizeof(float) * (size_t)A);
}

/* ra_numerics: each field where it has a meaning (a window's bounds with
 * the window on, the scale with the dot score, ...), else 0. */
static void fp_numerics(ra_fingerprint *fp, const ra_call_options *o)
{
    const ra_params *p = o->params;
    const int64_t H = o->shape ? o->shape->H : 0;
    ra_fp_int(fp, "num.causal", p->num.causal != 0);
    ra_fp_int(fp, "num.window", p->num.window != 0);
    ra_fp_int(fp, "num.window_left", p->num.window ? p->num.window_left : 0);
    ra_fp_int(fp, "num.window_right", p->num.window ? p->num.window_right : 0);
    ra_fp_named(fp, "num.score", p->num.score, ra_score_name(p->num.score));
    ra_fp_real(fp, "num.scale",
               p->num.score == RA_SCORE_DOT ? p->num.scale : 0);
    ra_fp_real(fp, "num.sigma",
               p->num.score == RA_SCORE_GAUSSIAN ? p->num.sigma : 0);
    fp_additive(fp, o);
    ra_fp_named(fp, "num.rope", p->num.rope, ra_rope_name(p->num.rope));
    ra_fp_real(fp, "num.rope_base",
               p->num.rope != RA_ROPE_NONE ? p->num.rope_base : 0);
    ra_fp_int(fp, "num.alibi", p->num.alibi != 0);
    ra_fp_bytes(fp, "num.alibi_slopes",
                p->num.alibi ? p->num.alibi_slopes : NULL,
                sizeof(double) * (size_t)(H > 0 ? H : 0));
    ra_fp_named(fp, "num.align", p->num.align, ra_align_name(p->num.align));
    ra_fp_int(fp, "num.nonfinite", p->num.nonfinite != 0);
    ra_fp_named(fp, "num.precision", p->num.precision,
                ra_precision_name(p->num.precision));
    for (int i = 0; i < ra_score_feature_count; i++)
        ra_fp_real(fp, ra_score_features[i].key, ra_feature_get(&p->num, i));
    ra_fp_bytes(fp, "num.sinks", p->num.sinks,
                sizeof(float) * (size_t)(H > 0 ? H : 0));
}

/* ra_exec, but for what is the rank's own (threads, mem_limit: its cores
 * and memory) and the progress callbacks. */
static void fp_exec(ra_fingerprint *fp, const ra_params *p)
{
    ra_fp_named(fp, "exec.strategy", p->exec.strategy,
                ra_strategy_name(p->exec.strategy));
    ra_fp_named(fp, "exec.layout", p->exec.layout,
                ra_layout_name(p->exec.layout));
    ra_fp_int(fp, "exec.block_q", p->exec.block_q);
    ra_fp_int(fp, "exec.block_kv", p->exec.block_kv);
    ra_fp_named(fp, "exec.gemm", p->exec.gemm, ra_gemm_name(p->exec.gemm));
    ra_fp_named(fp, "exec.wire", p->exec.wire, ra_wire_name(p->exec.wire));
    ra_fp_real(fp, "exec.stall_timeout", p->exec.stall_timeout);
    ra_fp_int(fp, "exec.ulysses_size",
              p->exec.strategy == RA_STRATEGY_HYBRID ? p->exec.ulysses_size
                                                     : 0);
    ra_fp_int(fp, "exec.checkpoint", p->exec.checkpoint != NULL);
}

/* The masks' lengths (values) and whether segments are given; the
 * attention map's rows and heads; the backward's weight gradients. */
static void fp_masks_map(ra_fingerprint *fp, const ra_call_options *o)
{
    const ra_masks *mk = o->masks;
    const size_t lens = sizeof(int64_t) *
                        (size_t)(o->shape && o->shape->B > 0 ? o->shape->B
                                                             : 0);
    ra_fp_bytes(fp, "masks.q_lens", mk ? mk->q_lens : NULL, lens);
    ra_fp_bytes(fp, "masks.kv_lens", mk ? mk->kv_lens : NULL, lens);
    ra_fp_int(fp, "masks.segments",
              o->segments || (mk && (mk->q_segments || mk->kv_segments)));
    const ra_attn_map *map = o->map;
    const int64_t nh = map && map->nheads > 0 ? map->nheads : 0;
    ra_fp_int(fp, "out->map", map != NULL);
    ra_fp_int(fp, "map.i0", map ? map->i0 : 0);
    ra_fp_int(fp, "map.i1", map ? map->i1 : 0);
    ra_fp_bytes(fp, "map.heads", map ? map->heads : NULL,
                sizeof(int64_t) * (size_t)nh);
    ra_fp_int(fp, "grads->dw", o->dw);
}

void ra_call_fingerprint(const ra_call_options *o, ra_fingerprint *fp)
{
    static const char *const calls[] = {"ra_forward", "ra_backward",
                                        "ra_strategy_check",
                                        "ra_mha_forward"};
    fp->n = 0;
    ra_fp_named(fp, "the function called", o->call, calls[o->call]);
    fp_shape(fp, o->shape);
    fp_numerics(fp, o);
    fp_exec(fp, o->params);
    fp_masks_map(fp, o);
}
