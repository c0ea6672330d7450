/* options.c: strict option parsing shared by the subcommands. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "h5io.h"
#include "internal.h"

int cli_parse_i64(const char *opt, const char *text, int64_t lo, int64_t hi,
                  int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') {
        ra_error_set(RA_ERR_ARG, "%s: '%s' is not an integer", opt, text);
        return -1;
    }
    if (v < lo || v > hi) {
        ra_error_set(RA_ERR_ARG, "%s: %lld is outside [%lld, %lld]", opt, v,
                     (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_f64(const char *opt, const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v)) {
        ra_error_set(RA_ERR_ARG, "%s: '%s' is not a finite number", opt, text);
        return -1;
    }
    *out = v;
    return 0;
}

const char *cli_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        ra_error_set(RA_ERR_ARG, "%s needs a value", argv[*i]);
        return NULL;
    }
    *i += 1;
    return argv[*i];
}

void cli_shape_default(cli_shape *cs)
{
    memset(cs, 0, sizeof *cs);
    cs->shape = (ra_shape){.B = 1, .N = 4096, .M = 4096, .H = 8, .G = 8,
                           .D = 64, .Dv = 64};
}

void cli_shape_finish(cli_shape *cs)
{
    if (!cs->seq_kv_set)
        cs->shape.M = cs->shape.N;
    if (!cs->kv_heads_set)
        cs->shape.G = cs->shape.H;
    if (!cs->dim_v_set)
        cs->shape.Dv = cs->shape.D;
}

/* Every size flag: its name, where it goes, and which "set" flag it marks. */
typedef struct {
    const char *name;
    size_t offset;
    size_t set_offset; /* 0: none */
} size_flag;

#define SHAPE_AT(f) offsetof(cli_shape, shape) + offsetof(ra_shape, f)
static const size_flag size_flags[] = {
    {"--batch", SHAPE_AT(B), 0},
    {"--seq", SHAPE_AT(N), 0},
    {"--seq-kv", SHAPE_AT(M), offsetof(cli_shape, seq_kv_set)},
    {"--heads", SHAPE_AT(H), 0},
    {"--kv-heads", SHAPE_AT(G), offsetof(cli_shape, kv_heads_set)},
    {"--dim", SHAPE_AT(D), 0},
    {"--dim-v", SHAPE_AT(Dv), offsetof(cli_shape, dim_v_set)},
};

int cli_shape_flag(cli_shape *cs, int argc, char **argv, int *i)
{
    for (size_t f = 0; f < sizeof size_flags / sizeof *size_flags; f++) {
        if (strcmp(argv[*i], size_flags[f].name) != 0)
            continue;
        const char *val = cli_value(argc, argv, i);
        int64_t v;
        if (!val || cli_parse_i64(size_flags[f].name, val, 1,
                                  (int64_t)1 << 40, &v) != 0)
            return -1;
        *(int64_t *)((char *)cs + size_flags[f].offset) = v;
        if (size_flags[f].set_offset)
            *(int *)((char *)cs + size_flags[f].set_offset) = 1;
        return 1;
    }
    return 0;
}

int cli_params_flag(ra_params *p, int argc, char **argv, int *i)
{
    const char *opt = argv[*i];
    const char *val;
    int64_t v;
    if (strcmp(opt, "--causal") == 0) {
        p->causal = 1;
        return 1;
    }
    if (strcmp(opt, "--scale") == 0) {
        if (!(val = cli_value(argc, argv, i)) ||
            cli_parse_f64(opt, val, &p->scale) != 0)
            return -1;
        return 1;
    }
    if (strcmp(opt, "--block-q") == 0 || strcmp(opt, "--block-kv") == 0) {
        if (!(val = cli_value(argc, argv, i)) ||
            cli_parse_i64(opt, val, 1, 1 << 16, &v) != 0)
            return -1;
        if (strcmp(opt, "--block-q") == 0)
            p->block_q = v;
        else
            p->block_kv = v;
        return 1;
    }
    if (strcmp(opt, "--layout") == 0) {
        if (!(val = cli_value(argc, argv, i)))
            return -1;
        return ra_layout_parse(val, &p->layout) == RA_OK ? 1 : -1;
    }
    if (strcmp(opt, "--window") == 0) {
        /* "L" or "L,R": keys within L before and R after the aligned
         * diagonal */
        if (!(val = cli_value(argc, argv, i)))
            return -1;
        char left[32];
        const char *comma = strchr(val, ',');
        size_t len = comma ? (size_t)(comma - val) : strlen(val);
        if (len == 0 || len >= sizeof left) {
            ra_error_set(RA_ERR_ARG, "--window: '%s' is not L or L,R", val);
            return -1;
        }
        memcpy(left, val, len);
        left[len] = '\0';
        p->window = 1;
        p->window_right = 0;
        if (cli_parse_i64("--window", left, 0, (int64_t)1 << 40,
                          &p->window_left) != 0 ||
            (comma && cli_parse_i64("--window", comma + 1, 0,
                                    (int64_t)1 << 40, &p->window_right) != 0))
            return -1;
        return 1;
    }
    if (strcmp(opt, "--score") == 0) {
        if (!(val = cli_value(argc, argv, i)))
            return -1;
        return ra_score_parse(val, &p->score) == RA_OK ? 1 : -1;
    }
    if (strcmp(opt, "--sigma") == 0) {
        if (!(val = cli_value(argc, argv, i)) ||
            cli_parse_f64(opt, val, &p->sigma) != 0)
            return -1;
        if (!(p->sigma > 0)) {
            ra_error_set(RA_ERR_ARG, "--sigma: %s is not > 0", val);
            return -1;
        }
        return 1;
    }
    if (strcmp(opt, "--threads") == 0) {
        if (!(val = cli_value(argc, argv, i)) ||
            cli_parse_i64(opt, val, 1, 1024, &v) != 0)
            return -1;
        p->threads = (int)v;
        return 1;
    }
    return 0;
}

size_t cli_alloc_bytes(const size_t *counts, int n, size_t elem)
{
    size_t total = 1, bytes;
    for (int i = 0; i < n; i++)
        if (__builtin_add_overflow(total, counts[i], &total))
            return 0;
    return __builtin_mul_overflow(total, elem, &bytes) ? 0 : bytes;
}

int cli_fail(const cli_ctx *ctx, int code, const char *what)
{
    if (ctx->rank == 0)
        fprintf(stderr, "ringattn: %s\n", what);
    return code;
}

int cli_exit_code(ra_status st)
{
    switch (st) {
    case RA_OK: return CLI_EXIT_OK;
    case RA_ERR_ARG:
    case RA_ERR_INPUT:
    case RA_ERR_EXISTS: return CLI_EXIT_USAGE;
    default: return CLI_EXIT_RUNTIME;
    }
}

void cli_print_params(const cli_ctx *ctx, const ra_shape *s,
                      const ra_params *p, int layout_auto, const char *in,
                      const char *out)
{
    if (ctx->rank != 0)
        return;
    int64_t bq, bkv;
    ra_params_tiles(p, s, &bq, &bkv);
    printf("# ringattn %s\n", RA_VERSION_STRING);
    if (in)
        printf("# %-10s %s\n", "input", in);
    if (out)
        printf("# %-10s %s\n", "output", out);
    printf("# %-10s B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld\n",
           "shape", (long long)s->B, (long long)s->N, (long long)s->M,
           (long long)s->H, (long long)s->G, (long long)s->D,
           (long long)s->Dv);
    printf("# %-10s %s\n", "causal", p->causal ? "yes (j <= i + M - N)" : "no");
    if (p->window)
        printf("# %-10s i' - %lld <= j <= i' + %lld (i' = i + M - N)\n",
               "window", (long long)p->window_left,
               (long long)p->window_right);
    if (p->score == RA_SCORE_DOT)
        printf("# %-10s dot, scale %.9g%s\n", "score", ra_params_scale(p, s),
               isnan(p->scale) ? " (1/sqrt(D))" : "");
    else if (p->score == RA_SCORE_GAUSSIAN)
        printf("# %-10s gaussian, -||q - k||^2 / (2 sigma^2), sigma %.9g\n",
               "score", p->sigma);
    else
        printf("# %-10s additive, w_v . tanh(W_q q + W_k k), A = %lld\n",
               "score", (long long)(p->additive ? p->additive->A : 0));
    printf("# %-10s %s%s\n", "layout", ra_layout_name(p->layout),
           layout_auto ? " (auto)" : "");
    printf("# %-10s %lld x %lld%s\n", "tiles", (long long)bq, (long long)bkv,
           p->block_q || p->block_kv ? "" : " (default for D)");
    printf("# %-10s %d\n", "ranks", ctx->nranks);
    cli_print_job(ctx, 10);
    printf("# %-10s %d per rank\n", "threads",
           ra_params_threads(p));
    fflush(stdout);
}

void cli_score_free(cli_score_inputs *si)
{
    free(si->mem);
    si->mem = NULL;
}

ra_status cli_score_setup(const char *in, const ra_shape *s, ra_params *p,
                          cli_score_inputs *si)
{
    const int64_t Dk = ra_shape_dk(s);
    if (Dk != s->D && p->score != RA_SCORE_ADDITIVE)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset /k: head dim Dk = %lld "
                            "differs from /q (D = %lld); only --score "
                            "additive takes keys of another dim", in,
                            (long long)Dk, (long long)s->D);
    if (p->score != RA_SCORE_ADDITIVE)
        return RA_OK;
    int rank, present;
    int64_t dims[4];
    ra_status st = h5io_dataset_dims(in, "/additive/w_v", &rank, dims, &present);
    if (st != RA_OK)
        return st;
    if (!present || rank != 1)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset /additive/w_v: --score "
                            "additive needs /additive/w_q (A, D), /additive/w_k "
                            "(A, Dk) and /additive/w_v (A,)", in);
    const int64_t A = dims[0];
    si->mem = malloc(sizeof(float) * (size_t)(A * (s->D + Dk + 1)));
    if (!si->mem)
        return ra_error_set(RA_ERR_NOMEM, "run: out of memory for weights");
    const int64_t dq[2] = {A, s->D}, dk[2] = {A, Dk}, dv[1] = {A};
    float *wq = si->mem, *wk = wq + A * s->D, *wv = wk + A * Dk;
    const struct {
        const char *name;
        int rank;
        const int64_t *dims;
        float *out;
    } w[3] = {{"/additive/w_q", 2, dq, wq}, {"/additive/w_k", 2, dk, wk},
              {"/additive/w_v", 1, dv, wv}};
    for (int i = 0; i < 3; i++) {
        if ((st = h5io_read_weights(in, w[i].name, w[i].rank, w[i].dims,
                                    w[i].out, &present)) != RA_OK)
            return st;
        if (!present)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: missing; "
                                "--score additive needs /additive/w_q (A, D), "
                                "/additive/w_k (A, Dk) and /additive/w_v (A,)",
                                in, w[i].name);
    }
    si->additive = (ra_additive){A, wq, wk, wv};
    p->additive = &si->additive;
    return RA_OK;
}

