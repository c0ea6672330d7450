/* options.c: a subcommand's --help (and its Markdown for
 * docs/REFERENCE.md) from its tables, and the groups that several
 * subcommands share; parsing is the registry's (registry.c). */
#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "compare.h"
#include "h5io.h"
#include "internal.h"
#include "score_features.h"

#define RA_STR(x) #x
#define RA_XSTR(x) RA_STR(x) /* a macro's value as a string */

/* cli_help's output as Markdown (cli_help_markdown): the options as a
 * table of name, accepted values, default and meaning, the rest as text. */
static int help_as_markdown;

void cli_help_markdown(int on)
{
    help_as_markdown = on;
}

/* text as one Markdown table cell: '|' escaped, nothing else changed. */
static void md_cell(FILE *out, const char *text)
{
    for (const char *c = text ? text : ""; *c; c++) {
        if (*c == '|')
            fputc('\\', out);
        fputc(*c, out);
    }
}

/* The values an option accepts, as its table states them. */
static void md_values(FILE *out, const cli_opt *o)
{
    if (o->kind == CLI_CHOICE) {
        for (int i = 0; o->choices[i]; i++)
            fprintf(out, "%s`%s`", i ? ", " : "", o->choices[i]);
    } else if (o->kind == CLI_INT || o->kind == CLI_INT32) {
        fprintf(out, "%s, integer >= %lld", o->meta, (long long)o->lo);
        if (o->hi != INT64_MAX && o->hi != INT32_MAX)
            fprintf(out, " and <= %lld", (long long)o->hi);
    } else if (o->kind == CLI_REAL) {
        fprintf(out, "%s, real", o->meta);
        if (o->rlo > -DBL_MAX)
            fprintf(out, " %s %g", o->open_lo ? ">" : ">=", o->rlo);
        if (o->rhi < DBL_MAX)
            fprintf(out, "%s <= %g", o->rlo > -DBL_MAX ? " and" : "", o->rhi);
    } else if (o->meta) {
        md_cell(out, o->meta);
    }
}

/* The footer of the --help of every command that takes cli_forward_opts:
 * the strategies, layouts and engines by the library's names, and what
 * auto means for each. */
static void cli_forward_details(FILE *out);

/* The spec's epilog, and the names the forward
 * options' rows point to (cli_forward_details) when it takes them. */
static void epilog_help(const cli_spec *spec, FILE *out)
{
    int forward = 0;
    for (int g = 0; g < CLI_MAX_GROUPS && spec->groups[g].opts; g++)
        forward |= spec->groups[g].opts == cli_forward_opts;
    if (spec->epilog || forward)
        fputc('\n', out);
    if (spec->epilog)
        fputs(spec->epilog, out);
    if (forward)
        cli_forward_details(out);
}

/* One subcommand's section of docs/REFERENCE.md. */
static void help_markdown(const cli_spec *spec, FILE *out)
{
    fprintf(out, "### ringattn %s\n\n```text\n%s```\n\n", spec->name,
            spec->usage);
    fputs("| option | value | default | meaning |\n|---|---|---|---|\n",
          out);
    for (int g = 0; g < CLI_MAX_GROUPS && spec->groups[g].opts; g++)
        for (const cli_opt *o = spec->groups[g].opts; o->name; o++) {
            fprintf(out, "| `%s` | ", o->name);
            md_values(out, o);
            fputs(" | ", out);
            md_cell(out, o->required ? "required"
                         : o->kind == CLI_FLAG ? NULL
                         : o->def ? o->def : o->shown);
            fputs(" | ", out);
            md_cell(out, o->help);
            fputs(" |\n", out);
        }
    char *rest = NULL; /* the global options, modes and epilog, as text */
    size_t len = 0;
    FILE *f = open_memstream(&rest, &len);
    if (f) {
        cli_global_help(spec->globals, f);
        cli_modes_help(spec->name, f);
        epilog_help(spec, f);
        fclose(f);
    }
    if (rest && len > 1)
        fprintf(out, "\n```text%s```\n", rest);
    fputc('\n', out);
    free(rest);
}

void cli_help(const cli_spec *spec, FILE *out)
{
    if (help_as_markdown) {
        help_markdown(spec, out);
        return;
    }
    cli_help_options(spec, out);
    cli_global_help(spec->globals, out);
    cli_modes_help(spec->name, out);
    epilog_help(spec, out);
}

int cli_parse_or_exit(const cli_ctx *ctx, const cli_spec *spec, void *opts,
                      int argc, char **argv)
{
    const int r = cli_parse(spec, opts, argc, argv);
    if (r == CLI_PARSED)
        return -1;
    if (r == CLI_HELP) {
        if (ctx->rank == 0)
            cli_help(spec, stdout);
        return CLI_EXIT_OK;
    }
    return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
}

int cli_parse_qkv_layout(const cli_opt *o, const char *val, void *base)
{
    const ra_axes axes = h5io_qkv_layout_parse(val);
    if (axes == RA_AXES_NONE) {
        ra_error_set(RA_ERR_ARG, "%s: unknown tensor layout '%s' (expected "
                     "bnhd or bhnd)", o->name, val);
        return -1;
    }
    *(ra_axes *)((char *)base + o->offset) = axes;
    return 0;
}

int cli_parse_dtype(const cli_opt *o, const char *val, void *base)
{
    /* gen's spellings before ra_dtype's, kept as aliases */
    static const struct {
        const char *name;
        ra_dtype dtype;
    } old[] = {{"float32", RA_DTYPE_F32}, {"float64", RA_DTYPE_F64},
               {"float16", RA_DTYPE_F16}};
    ra_dtype *field = (ra_dtype *)((char *)base + o->offset);
    if (ra_dtype_parse(val, field) == RA_OK)
        return 0;
    for (size_t i = 0; i < sizeof old / sizeof *old; i++)
        if (strcmp(val, old[i].name) == 0) {
            *field = old[i].dtype;
            return 0;
        }
    ra_error_set(RA_ERR_ARG, "%s: unknown %s '%s' (expected fp32, fp16, "
                 "bf16 or fp64)", o->name, o->noun ? o->noun : "type", val);
    return -1;
}

/* ---- shared groups ------------------------------------------------------- */

static const char *const random_lens_kinds[] = {"random", NULL};

const cli_opt cli_random_mask_opts[] = {
    {.name = "--lens", .kind = CLI_CHOICE, .meta = "random",
     .offset = CLI_FIELD(cli_random_masks, lens_kind, int),
     .choices = random_lens_kinds, .seen = CLI_SEEN(cli_random_masks, lens),
     .help = "random padding lengths q_lens, kv_lens in [0, len]"},
    CLI_OPT_INT(cli_random_masks, "--segments", "AVG", segment_avg, 1,
                (int64_t)1 << 40, NULL,
                "random packed sequences of mean length AVG"),
    {0},
};

const cli_opt cli_table_opts[] = {
    CLI_OPT_TEXT(cli_tables, "--json", "FILE", json, NULL,
                 "also write the rows as JSON (replaced if it exists)"),
    CLI_OPT_TEXT(cli_tables, "--csv", "FILE", csv, NULL,
                 "also write the rows as CSV (replaced if it exists)"),
    {0},
};

const cli_opt cli_check_opts[] = {
    CLI_OPT_REQUIRED(cli_check, "--in", "FILE", in,
                     "the input of the run (its masks; /do for gradients)"),
    CLI_OPT_REQUIRED(cli_check, "--out", "FILE", out, "the output to check"),
    CLI_OPT_INT(cli_check, "--sample", "K", sample, 1, INT64_MAX, NULL,
                "check K random query rows (and key rows of gradients)"),
    CLI_OPT_FLAG(cli_check, "--all", all,
                 "check every row, however long it takes"),
    CLI_OPT_INT(cli_check, "--seed", "S", seed, 0, INT64_MAX, "1",
                "seed of the sample"),
    CLI_OPT_POSITIVE(cli_check, "--tol", "X", tol, 1e300,
                     RA_XSTR(RA_TOLERANCE), "tolerance of each relative error"),
    {.name = "--precision", .kind = CLI_CUSTOM, .meta = "P",
     .offset = CLI_FIELD(cli_check, precision, int),
     .seen = CLI_SEEN(cli_check, precision_set),
     .fn = cli_parse_precision, .shown = "the recorded one",
     .help = "judge the run as fp32 or bf16 (forward outputs)"},
    {0},
};

int cli_check_parse(const cli_ctx *ctx, const cli_spec *spec, cli_check *c,
                    int argc, char **argv)
{
    *c = (cli_check){0};
    const int code = cli_parse_or_exit(ctx, spec, c, argc, argv);
    if (code >= 0)
        return code;
    if (c->all && c->sample) {
        ra_error_set(RA_ERR_ARG, "%s: --all and --sample exclude each other",
                     spec->name);
        return cli_fail_status(ctx, RA_ERR_ARG);
    }
    return -1;
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

#define SHAPE_AT(f) CLI_FIELD(cli_shape, shape.f, int64_t)
#define SIZE_OPT(nm, meta_, f, seen_, def_, shown_, help_)                    \
    {.name = nm, .kind = CLI_INT, .meta = meta_, .offset = SHAPE_AT(f),      \
     .seen = seen_, .lo = 1, .hi = CLI_MAX_SIZE, .def = def_,                 \
     .shown = shown_, .help = help_}

const cli_opt cli_seq_opts[] = {
    SIZE_OPT("--seq", "N", N, 0, "4096", NULL, "query length"),
    {0},
};

const cli_opt cli_shape_opts[] = {
    SIZE_OPT("--batch", "B", B, 0, "1", NULL, "batch size"),
    SIZE_OPT("--seq-kv", "M", M, CLI_SEEN(cli_shape, seq_kv_set), NULL, "N",
             "key/value length"),
    SIZE_OPT("--heads", "H", H, 0, "8", NULL, "query heads"),
    SIZE_OPT("--kv-heads", "G", G, CLI_SEEN(cli_shape, kv_heads_set), NULL,
             "H", "key/value heads, dividing H"),
    SIZE_OPT("--dim", "D", D, 0, "64", NULL, "head dim of q and k"),
    SIZE_OPT("--dim-v", "Dv", Dv, CLI_SEEN(cli_shape, dim_v_set), NULL, "D",
             "head dim of v"),
    {0},
};

/* An engine this build lacks is refused here, naming the flag. */
static int parse_gemm(const cli_opt *o, const char *val, void *base)
{
    ra_gemm *g = CLI_ENUM_AT(ra_gemm, o, base);
    if (cli_named(o, ra_gemm_parse(val, g)) != 0)
        return -1;
    if (ra_gemm_available(*g))
        return 0;
    ra_error_set(RA_ERR_ARG, "%s %s: this build has no such engine (see "
                 "--help)", o->name, val);
    return -1;
}

/* "all" stores CLI_STRATEGY_ALL, which only bench accepts; "auto"
 * CLI_STRATEGY_AUTO (plan.h), which run and bench resolve: ra_strategy
 * is an int. */
_Static_assert(sizeof(ra_strategy) == sizeof(int),
               "the strategy enum is stored as int");
static int parse_strategy(const cli_opt *o, const char *val, void *base)
{
    if (strcmp(val, "all") == 0 || strcmp(val, "auto") == 0) {
        *CLI_ENUM_AT(int, o, base) =
            val[1] == 'l' ? CLI_STRATEGY_ALL : CLI_STRATEGY_AUTO;
        return 0;
    }
    return cli_parse_strategy(o, val, base);
}

/* A field of ra_params of C type ctype (CLI_FIELD). */
#define P_FIELD(f, ctype) CLI_FIELD(ra_params, f, ctype)
/* A tile size: rows in [1, RA_BLOCK_MAX]; the library's choice by
 * default. */
#define TILE_OPT(nm, f, help_)                                                \
    {.name = nm, .kind = CLI_INT, .meta = "N",                                \
     .offset = P_FIELD(f, int64_t), .lo = 1, .hi = RA_BLOCK_MAX,              \
     .shown = "auto", .help = help_}

/* A score feature's option (score_features.h): a finite double, whose
 * range and rule the library checks. */
#define FEATURE_OPT(field, option, meta_, help_)                              \
    {.name = option, .kind = CLI_REAL, .meta = meta_,                         \
     .offset = P_FIELD(num.field, double), .rlo = -DBL_MAX, .rhi = DBL_MAX,   \
     .help = help_},

/* An option of ra_params with its C type checked (P_FIELD), the default
 * the library or a rule applies (SHOWN), and what its kind needs beyond
 * (a range, a parser). */
#define P_OPT(nm, kind_, meta_, f, ctype, shown_, help_, ...)                 \
    {.name = nm, .kind = kind_, .meta = meta_, .offset = P_FIELD(f, ctype),   \
     .shown = shown_, .help = help_, __VA_ARGS__}

const cli_opt cli_forward_opts[] = {
    CLI_OPT_FLAG(ra_params, "--causal", num.causal,
                 "query i sees keys j <= i + M - N"),
    P_OPT("--window", CLI_CUSTOM, "L[,R]", num.window, int, NULL,
          "keys i'-L .. i'+R of query i, i' = i + M - N",
          .fn = cli_parse_window),
    P_OPT("--scale", CLI_REAL, "S", num.scale, double, "1/sqrt(D)",
          "scale of the dot score", .rlo = -DBL_MAX, .rhi = DBL_MAX),
    P_OPT("--score", CLI_CUSTOM, "NAME", num.score, ra_score, "dot",
          "dot, gaussian or additive (see below)", .fn = cli_parse_score),
    P_OPT("--sigma", CLI_REAL, "S", num.sigma, double,
          RA_XSTR(RA_SIGMA_DEFAULT), "bandwidth of the gaussian score",
          .open_lo = 1, .rhi = DBL_MAX),
    P_OPT("--rope", CLI_CUSTOM, "PAIRING", num.rope, ra_rope, "none",
          "RoPE of q and k: interleaved or half", .fn = cli_parse_rope),
    P_OPT("--rope-base", CLI_REAL, "B", num.rope_base, double,
          RA_XSTR(RA_ROPE_BASE_DEFAULT), "RoPE base: theta_i = B^(-2i/D)",
          .open_lo = 1, .rhi = DBL_MAX),
    CLI_OPT_FLAG(ra_params, "--alibi", num.alibi,
                 "ALiBi: add -slope_h * |j - i'| to head h's scores"),
    RA_SCORE_FEATURES(FEATURE_OPT)
    CLI_OPT_FLAG(ra_params, "--align-per-sequence", num.align,
                 "align causal/window/ALiBi/RoPE per sequence (varlen)"),
    TILE_OPT("--block-q", exec.block_q, "query tile rows"),
    TILE_OPT("--block-kv", exec.block_kv, "key tile rows"),
    P_OPT("--layout", CLI_CUSTOM, "NAME", exec.layout, ra_layout, "auto",
          "which tokens a rank holds (see below)", .fn = cli_parse_layout),
    P_OPT("--gemm", CLI_CUSTOM, "ENGINE", exec.gemm, ra_gemm, "auto",
          "engine of the tile products (see below)", .fn = parse_gemm),
    P_OPT("--precision", CLI_CUSTOM, "P", num.precision, ra_precision,
          "fp32", "tile products: fp32 or bf16", .fn = cli_parse_precision),
    P_OPT("--wire", CLI_CUSTOM, "TYPE", exec.wire, ra_wire, "auto",
          "K/V on the ring: fp32, bf16 or auto", .fn = cli_parse_wire),
    P_OPT("--threads", CLI_INT32, "T", exec.threads, int,
          "$OMP_NUM_THREADS or 1", "threads per rank", .lo = 1,
          .hi = RA_THREADS_MAX),
    P_OPT("--strategy", CLI_CUSTOM, "NAME", exec.strategy, ra_strategy,
          "ring", "how ranks split the work (see below)",
          .fn = parse_strategy),
    P_OPT("--mem-limit", CLI_INT, "BYTES", exec.mem_limit, int64_t,
          "node memory/ranks", "bytes a rank may allocate", .lo = 1,
          .hi = INT64_MAX),
    P_OPT("--ulysses-size", CLI_INT, "U", exec.ulysses_size, int64_t,
          "a node's ranks", "hybrid: ranks per head group", .lo = 1,
          .hi = 1 << 20),
    {0},
};

enum { NAMES_MAX = 16, HELP_WIDTH = 79 };

/* Writes the words of text after column *col, wrapped at HELP_WIDTH. */
static void words_wrapped(FILE *out, int *col, const char *text)
{
    while (*text) {
        const size_t len = strcspn(text, " ");
        if (*col && *col + 1 + (int)len > HELP_WIDTH) {
            fputc('\n', out);
            *col = 0;
        }
        *col += fprintf(out, "%s%.*s", *col ? " " : "", (int)len, text);
        text += len + (text[len] == ' ');
    }
}

/* head, the library's names of an enum from 0 to the first it calls
 * "unknown" (ra_name_of), then tail, wrapped at HELP_WIDTH: the same text
 * in every build, as docs/REFERENCE.md holds it. */
static void names_wrapped(FILE *out, const char *head,
                          const char *(*name)(int), const char *tail)
{
    int col = 0;
    words_wrapped(out, &col, head);
    for (int k = 0; k < NAMES_MAX && strcmp(name(k), "unknown") != 0; k++) {
        char word[64];
        snprintf(word, sizeof word, "%s,", name(k));
        words_wrapped(out, &col, word);
    }
    words_wrapped(out, &col, tail);
    fputc('\n', out);
}

static const char *strategy_at(int k) { return ra_strategy_name(k); }
static const char *layout_at(int k) { return ra_layout_name(k); }
static const char *gemm_at(int k) { return ra_gemm_name(k); }

static void cli_forward_details(FILE *out)
{
    names_wrapped(out, "Strategies:", strategy_at, "auto (plan's).");
    names_wrapped(out, "Layouts:", layout_at,
                  "where auto is balanced with a window, else striped with "
                  "segments, else zigzag when causal.");
    names_wrapped(out, "Engines:", gemm_at,
                  "where auto is RINGATTN_GEMM's, else onednn (a build "
                  "without it refuses it by name). docs/REFERENCE.md.");
}

const cli_opt cli_pass_opts[] = {
    P_OPT("--stall-timeout", CLI_REAL, "S", exec.stall_timeout, double,
          "run: from the prediction; bench: "
          RA_XSTR(RA_STALL_TIMEOUT_DEFAULT) " s",
          "abort after S s with no progress (0: never)", .rhi = 1e9),
    {0},
};
