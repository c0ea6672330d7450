/* params.c: shapes, options and their defaults: the one home of every knob
 * that the command line and the API share. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "band.h"
#include "internal.h"

void ra_numerics_default(ra_numerics *num)
{
    if (!num)
        return;
    memset(num, 0, sizeof *num);
    num->scale = NAN;
    num->score = RA_SCORE_DOT;
    num->sigma = RA_SIGMA_DEFAULT;
    num->rope = RA_ROPE_NONE;
    num->rope_base = RA_ROPE_BASE_DEFAULT;
    num->align = RA_ALIGN_TENSOR;
    num->precision = RA_PRECISION_FP32;
}

void ra_exec_default(ra_exec *exec)
{
    if (!exec)
        return;
    memset(exec, 0, sizeof *exec);
    exec->strategy = RA_STRATEGY_RING;
    exec->layout = RA_LAYOUT_AUTO;
    exec->gemm = RA_GEMM_AUTO;
    exec->stall_timeout = RA_STALL_TIMEOUT_DEFAULT;
    exec->wire = RA_WIRE_AUTO;
}

void ra_params_saturate(ra_params *p)
{
    if (p->num.window_left > RA_UNBOUNDED)
        p->num.window_left = RA_UNBOUNDED;
    if (p->num.window_right > RA_UNBOUNDED)
        p->num.window_right = RA_UNBOUNDED;
}

void ra_params_join(const ra_numerics *num, const ra_exec *exec,
                    ra_params *p)
{
    ra_numerics num_default;
    ra_exec exec_default;
    if (!num) {
        ra_numerics_default(&num_default);
        num = &num_default;
    }
    if (!exec) {
        ra_exec_default(&exec_default);
        exec = &exec_default;
    }
    *p = (ra_params){.num = *num, .exec = *exec};
    ra_params_saturate(p);
}

void ra_params_split(const ra_params *p, ra_numerics *num, ra_exec *exec)
{
    *num = p->num;
    *exec = p->exec;
}

void ra_params_default(ra_params *params)
{
    ra_numerics num;
    ra_exec exec;
    ra_numerics_default(&num);
    ra_exec_default(&exec);
    ra_params_join(&num, &exec, params);
}

static const char *const precision_names[] = {"fp32", "bf16"};
/* ra_precision_name, ra_precision_parse */
RA_NAMED_ENUM(precision, ra_precision, "precision", precision_names)

static const char *const wire_names[] = {"auto", "fp32", "bf16"};
/* ra_wire_name, ra_wire_parse */
RA_NAMED_ENUM(wire, ra_wire, "wire", wire_names)

int ra_params_wire_bf16(const ra_params *params)
{
    if (params->exec.wire != RA_WIRE_AUTO)
        return params->exec.wire == RA_WIRE_BF16;
    return params->num.precision == RA_PRECISION_BF16 &&
           params->exec.strategy == RA_STRATEGY_RING &&
           params->num.score != RA_SCORE_ADDITIVE;
}

double ra_params_scale(const ra_params *params, const ra_shape *shape)
{
    if (isnan(params->num.scale))
        return 1.0 / sqrt((double)shape->D);
    return params->num.scale;
}

/* Default tiles, from the sweeps in docs/PERFORMANCE.md ("Tile sizes"):
 * 256 query rows; 256 keys for D <= 64, 512 beyond. A 256 x 256 score tile
 * (256 KiB) stays in L2 while P V reads it back. With a sliding window of
 * span w = left + right + 1 up to 1920 keys, 128 query rows see at most
 * w + 127 keys: one key tile of that width holds the whole band, so each
 * work item makes one score GEMM and wastes only the band's two corners. */
void ra_params_tiles(const ra_params *params, const ra_shape *shape,
                     int64_t *block_q, int64_t *block_kv)
{
    int64_t bq = 256, bkv = shape->D <= 64 ? 256 : 512;
    if (params->num.window &&
        params->num.window_left + params->num.window_right + 1 <=
            RA_WINDOW_TILE_SPAN) {
        bq = 128;
        bkv = params->num.window_left + params->num.window_right + bq;
        bkv = (bkv + 15) / 16 * 16;
    }
    *block_q = params->exec.block_q > 0 ? params->exec.block_q : bq;
    *block_kv = params->exec.block_kv > 0 ? params->exec.block_kv : bkv;
}

int ra_params_threads(const ra_params *params)
{
    /* One thread per rank unless asked for more: MPI launchers usually
     * place one rank per core already. */
    return params->exec.threads > 0 ? params->exec.threads : 1;
}

const char *ra_name_of(const char *const *names, int n, int value)
{
    return value >= 0 && value < n ? names[value] : "unknown";
}

ra_status ra_name_parse(const char *kind, const char *const *names, int n,
                        const char *name, int *value)
{
    char expected[256] = "";
    for (int i = 0; i < n; i++) {
        if (name && strcmp(name, names[i]) == 0) {
            *value = i;
            return RA_OK;
        }
        const size_t used = strlen(expected);
        snprintf(expected + used, sizeof expected - used, "%s%s",
                 i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    }
    if (!name)
        return ra_error_set(RA_ERR_ARG, "%s: no name given (NULL; expected "
                            "%s)", kind, expected);
    return ra_error_set(RA_ERR_ARG, "unknown %s '%s' (expected %s)", kind,
                        name, expected);
}

static const char *const score_names[] = {"dot", "gaussian", "additive"};
/* ra_score_name, ra_score_parse */
RA_NAMED_ENUM(score, ra_score, "score", score_names)

static const char *const layout_names[] = {"contiguous", "zigzag", "striped",
                                            "auto", "balanced"};
/* ra_layout_name, ra_layout_parse */
RA_NAMED_ENUM(layout, ra_layout, "layout", layout_names)

/* Measured in docs/PERFORMANCE.md ("Layouts"): a window lets contiguous
 * runs skip the hops the ring cannot reach, and balanced runs give the
 * first rank, whose queries see fewer keys, the rows that even it out;
 * random segment lengths load contiguous slices unevenly (busy
 * max/min 1.5 at P = 2) where striping spreads every segment over all
 * ranks; causal contiguous slices leave rank 0 a fraction of rank P-1's
 * work, which zigzag evens out. */
ra_layout ra_params_layout(const ra_params *params, int segments)
{
    if (params->exec.layout != RA_LAYOUT_AUTO)
        return params->exec.layout;
    if (params->num.window)
        return RA_LAYOUT_BALANCED;
    if (segments)
        return RA_LAYOUT_STRIPED;
    return params->num.causal ? RA_LAYOUT_ZIGZAG : RA_LAYOUT_CONTIGUOUS;
}

double ra_numerics_scale(const ra_numerics *num, const ra_shape *shape)
{
    if (!shape || shape->D < 1)
        return NAN;
    ra_params p;
    ra_params_join(num, NULL, &p);
    return ra_params_scale(&p, shape);
}

void ra_exec_tiles(const ra_numerics *num, const ra_exec *exec,
                   const ra_shape *shape, int64_t *block_q, int64_t *block_kv)
{
    ra_params p;
    int64_t bq = 0, bkv = 0;
    ra_params_join(num, exec, &p);
    if (shape)
        ra_params_tiles(&p, shape, &bq, &bkv);
    if (block_q)
        *block_q = bq;
    if (block_kv)
        *block_kv = bkv;
}

ra_layout ra_exec_layout(const ra_numerics *num, const ra_exec *exec,
                         int segments)
{
    ra_params p;
    ra_params_join(num, exec, &p);
    return ra_params_layout(&p, segments);
}

/* ra_shape_check without clearing the last error first. */
static ra_status shape_fault(const ra_shape *s)
{
    if (!s)
        return ra_error_set(RA_ERR_ARG, "shape: NULL");
    const int64_t v[7] = {s->B, s->N, s->M, s->H, s->G, s->D, s->Dv};
    const char *names[7] = {"B", "N", "M", "H", "G", "D", "Dv"};
    for (int i = 0; i < 7; i++)
        if (v[i] < 1)
            return ra_error_set(RA_ERR_ARG, "shape: %s must be >= 1, got %lld",
                                names[i], (long long)v[i]);
    if (s->Dk < 0)
        return ra_error_set(RA_ERR_ARG, "shape: Dk must be >= 0 (0: D), got "
                            "%lld", (long long)s->Dk);
    if (s->H % s->G != 0)
        return ra_error_set(RA_ERR_ARG,
                            "shape: kv heads G=%lld must divide heads H=%lld",
                            (long long)s->G, (long long)s->H);
    /* Every tensor's byte count (as float64) must fit in int64. */
    const struct {
        const char *name;
        int64_t len, heads, dim;
    } t[5] = {{"q (B, N, H, D)", s->N, s->H, s->D},
              {"o (B, N, H, Dv)", s->N, s->H, s->Dv},
              {"k (B, M, G, D)", s->M, s->G, s->D},
              {"k (B, M, G, Dk)", s->M, s->G, ra_shape_dk(s)},
              {"v (B, M, G, Dv)", s->M, s->G, s->Dv}};
    for (int i = 0; i < 5; i++) {
        int64_t bytes = ra_mul_checked(ra_mul_checked(s->B, t[i].len),
                                       ra_mul_checked(t[i].heads,
                                                      ra_mul_checked(t[i].dim, 8)));
        if (bytes < 0)
            return ra_error_set(RA_ERR_ARG, "shape: the byte count of %s "
                                            "overflows 64 bits", t[i].name);
    }
    return RA_OK;
}

ra_status ra_shape_check(const ra_shape *s)
{
    ra_error_clear();
    return shape_fault(s);
}

int ra_shape_dk_allowed(const ra_shape *s, ra_score score)
{
    return ra_shape_dk(s) == s->D || score == RA_SCORE_ADDITIVE;
}

double ra_params_forward_flops(const ra_shape *s, const ra_params *p,
                               const ra_masks *masks)
{
    if (shape_fault(s) != RA_OK)
        return 0.0;
    ra_band band = ra_band_of(p, s);
    double pairs = 0.0;
    for (int64_t b = 0; b < s->B; b++) {
        const int64_t ql = masks && masks->q_lens ? masks->q_lens[b] : s->N;
        const int64_t kl = masks && masks->kv_lens ? masks->kv_lens[b] : s->M;
        if (p->num.align == RA_ALIGN_SEQUENCE) /* each batch on its lengths */
            band =
                ra_band_make(p->num.causal, p->num.window, p->num.window_left,
                             p->num.window_right, kl - ql);
        pairs += ra_band_pairs(band, NULL, s->N, ql, kl);
    }
    return ra_pair_flops(s, p) * pairs;
}

double ra_forward_flops(const ra_shape *shape, const ra_numerics *num,
                        const ra_masks *masks)
{
    ra_params p;
    ra_params_join(num, NULL, &p);
    return ra_params_forward_flops(shape, &p, masks);
}

static const char *const align_names[] = {"tensor", "sequence"};

const char *ra_align_name(ra_align align)
{
    return ra_name_of(align_names, 2, (int)align);
}

/* The one vocabulary of types (issue 45): file types (run's --out-dtype,
 * gen's --dtype, the out_dtype attribute) are named as the arithmetic is
 * (ra_precision, ra_wire: "fp32", "bf16"). */
static const char *const dtype_names[] = {"fp32", "fp16", "bf16", "fp64"};
/* The names of the types before that, still read: outputs written
 * before record them (attribute out_dtype), and scripts pass them. */
static const char *const dtype_old_names[] = {"f32", "f16", "bf16", "f64"};
enum { DTYPE_COUNT = sizeof dtype_names / sizeof *dtype_names };

const char *ra_dtype_name(ra_dtype value)
{
    return ra_name_of(dtype_names, DTYPE_COUNT, (int)value);
}

ra_status ra_dtype_parse(const char *name, ra_dtype *out)
{
    int v = 0;
    ra_error_clear();
    if (!out)
        return ra_error_set(RA_ERR_ARG, "dtype: out is NULL");
    for (int i = 0; name && i < DTYPE_COUNT; i++)
        if (strcmp(name, dtype_old_names[i]) == 0) {
            *out = (ra_dtype)i;
            return RA_OK;
        }
    const ra_status st =
        ra_name_parse("dtype", dtype_names, DTYPE_COUNT, name, &v);
    *out = st == RA_OK ? (ra_dtype)v : *out;
    return st;
}

static const char *const strategy_names[RA_STRATEGY_COUNT] = {
    "ring", "allgather", "tree", "ring-q", "ulysses", "hybrid"};
/* ra_strategy_name, ra_strategy_parse */
RA_NAMED_ENUM(strategy, ra_strategy, "strategy", strategy_names)
