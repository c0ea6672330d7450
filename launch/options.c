/* options.c: the options registry: strict parsing, defaults and --help from
 * the tables of cli_opt, and the groups that several subcommands share. */
#include <errno.h>
#include <float.h>
#include <math.h>
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

/* Option names longer than this, with their value, move their help to the
 * next line. */
enum { HELP_COLUMN = 25, MAX_OPTION_NAME = 64 };

int cli_parse_i64(const char *opt, const char *text, int64_t lo, int64_t hi,
                  int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0') {
        ra_error_set(RA_ERR_ARG, "%s: '%s' is not an integer", opt, text);
        return -1;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        ra_error_set(RA_ERR_ARG, "%s: %s is outside [%lld, %lld]", opt, text,
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
    const double v = strtod(text, &end);
    const char *why = NULL;
    if (end == text || *end != '\0')
        why = "is not a number";
    else if (!isfinite(v))
        why = "is not a finite number";
    else if (v != 0 && fabs(v) < DBL_MIN)
        why = "is too small in magnitude (subnormal: below 2.23e-308, the "
              "smallest normal double)";
    else if (v == 0 && errno == ERANGE)
        why = "is too small in magnitude (underflows to 0)";
    if (why) {
        ra_error_set(RA_ERR_ARG, "%s: '%s' %s", opt, text, why);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_i64_list(const char *opt, const char *text, int64_t lo,
                       int64_t hi, int64_t *out, int max, const char *what)
{
    int n = 0;
    for (const char *p = text;;) {
        char item[32];
        const size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || n == max) {
            ra_error_set(RA_ERR_ARG, "%s: bad list '%s' (expected up to %d "
                         "comma-separated %s)", opt, text, max, what);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (cli_parse_i64(opt, item, lo, hi, &out[n++]) != 0)
            return -1;
        p += len;
        if (*p == '\0')
            return n;
        p++; /* the comma */
    }
}

static int parse_real(const cli_opt *o, const char *val, double *dst)
{
    double v;
    if (cli_parse_f64(o->name, val, &v) != 0)
        return -1;
    if (o->open_lo ? !(v > o->rlo) : !(v >= o->rlo)) {
        ra_error_set(RA_ERR_ARG, "%s: must be %s %g, got %s", o->name,
                     o->open_lo ? ">" : ">=", o->rlo, val);
        return -1;
    }
    if (!(v <= o->rhi)) {
        ra_error_set(RA_ERR_ARG, "%s: must be <= %g, got %s", o->name, o->rhi,
                     val);
        return -1;
    }
    *dst = v;
    return 0;
}

/* "a, b or c" from a NULL-terminated list. */
static void choice_list(const char *const *names, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; names[i]; i++) {
        const char *sep = i == 0 ? "" : names[i + 1] ? ", " : " or ";
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", sep, names[i]);
    }
}

static int parse_choice(const cli_opt *o, const char *val, int *dst)
{
    for (int i = 0; o->choices[i]; i++)
        if (strcmp(val, o->choices[i]) == 0) {
            *dst = i;
            return 0;
        }
    char list[256];
    choice_list(o->choices, list, sizeof list);
    if (o->noun)
        ra_error_set(RA_ERR_ARG, "%s: unknown %s '%s' (expected %s)", o->name,
                     o->noun, val, list);
    else
        ra_error_set(RA_ERR_ARG, "%s: '%s' is not %s", o->name, val, list);
    return -1;
}

/* Stores val (NULL for a flag) into the option's destination. */
static int opt_store(const cli_opt *o, const char *val, char *base)
{
    void *dst = base + o->offset;
    switch (o->kind) {
    case CLI_FLAG: *(int *)dst = 1; break;
    case CLI_INT:
        if (cli_parse_i64(o->name, val, o->lo, o->hi, (int64_t *)dst) != 0)
            return -1;
        break;
    case CLI_INT32: {
        int64_t v;
        if (cli_parse_i64(o->name, val, o->lo, o->hi, &v) != 0)
            return -1;
        *(int *)dst = (int)v;
        break;
    }
    case CLI_REAL:
        if (parse_real(o, val, (double *)dst) != 0)
            return -1;
        break;
    case CLI_TEXT: *(const char **)dst = val; break;
    case CLI_CHOICE:
        if (parse_choice(o, val, (int *)dst) != 0)
            return -1;
        break;
    case CLI_CUSTOM:
        if (o->fn(o, val, base) != 0)
            return -1;
        break;
    }
    if (o->seen)
        *(int *)(base + o->seen - 1) = 1;
    return 0;
}

/* The option called name (the first len bytes of arg), its group's struct
 * within opts, and its number among the options of spec (*index). */
static const cli_opt *opt_find(const cli_spec *spec, const char *arg,
                               size_t len, char *opts, char **base,
                               int *index)
{
    *index = 0;
    for (int g = 0; g < CLI_MAX_GROUPS && spec->groups[g].opts; g++)
        for (const cli_opt *o = spec->groups[g].opts; o->name; o++) {
            if (strlen(o->name) == len && strncmp(o->name, arg, len) == 0) {
                *base = opts + spec->groups[g].base;
                return o;
            }
            ++*index;
        }
    return NULL;
}

enum { SUGGEST_MAX_NAME = 48, SUGGEST_DISTANCE = 2 };

/* Levenshtein distance between a[0..la) and b, or SUGGEST_DISTANCE + 1
 * when either is longer than SUGGEST_MAX_NAME. */
static size_t edit_distance(const char *a, size_t la, const char *b)
{
    const size_t lb = strlen(b);
    size_t row[SUGGEST_MAX_NAME + 1];
    if (la > SUGGEST_MAX_NAME || lb > SUGGEST_MAX_NAME)
        return SUGGEST_DISTANCE + 1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0]; /* row[i - 1][j - 1] */
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            const size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The option of spec the unknown name arg[0..len) most likely meant: the
 * one whose name starts with it, else the one nearest within
 * SUGGEST_DISTANCE edits; NULL when none or several qualify. */
static const char *opt_suggest(const cli_spec *spec, const char *arg,
                               size_t len)
{
    const char *near = NULL, *prefixed = NULL;
    size_t best = SUGGEST_DISTANCE + 1;
    int near_ties = 0, prefixes = 0;
    for (int g = 0; g < CLI_MAX_GROUPS && spec->groups[g].opts; g++)
        for (const cli_opt *o = spec->groups[g].opts; o->name; o++) {
            const size_t d = edit_distance(arg, len, o->name);
            near_ties = d == best ? near_ties + 1 : d < best ? 0 : near_ties;
            if (d < best) {
                best = d;
                near = o->name;
            }
            if (len > 2 && strncmp(o->name, arg, len) == 0) {
                prefixed = o->name;
                prefixes++;
            }
        }
    if (prefixes == 1)
        return prefixed;
    return near && !near_ties ? near : NULL;
}

/* The message of an unknown option, with the suggestion when there is one. */
static void unknown_option(const cli_spec *spec, const char *arg, size_t len)
{
    const char *hint = opt_suggest(spec, arg, len);
    ra_error_set(RA_ERR_ARG, "%s: unknown option '%.*s'%s%s%s (see ringattn "
                 "%s --help)", spec->name, (int)len, arg,
                 hint ? "; did you mean " : "", hint ? hint : "",
                 hint ? "?" : "", spec->name);
}

/* Refuses a second value of an option: the last would win silently over
 * the first. A flag said twice loses nothing. given[] marks the options
 * of the spec already given. */
static int once_check(const cli_opt *o, int index,
                      unsigned char given[CLI_MAX_OPTIONS])
{
    if (o->kind == CLI_FLAG)
        return 0;
    if (index >= CLI_MAX_OPTIONS) {
        ra_error_set(RA_ERR_ARG, "%s: its subcommand has more than %d "
                     "options (CLI_MAX_OPTIONS)", o->name, CLI_MAX_OPTIONS);
        return -1;
    }
    if (given[index]) {
        ra_error_set(RA_ERR_ARG, "%s: given twice; give it once (it takes "
                     "a single value)", o->name);
        return -1;
    }
    given[index] = 1;
    return 0;
}

static int defaults_apply(const cli_spec *spec, char *opts)
{
    for (int g = 0; g < CLI_MAX_GROUPS && spec->groups[g].opts; g++)
        for (const cli_opt *o = spec->groups[g].opts; o->name; o++)
            if (o->def && opt_store(o, o->def, opts + spec->groups[g].base))
                return -1;
    return 0;
}

/* One argument that does not start with "--": a positional one. */
static int positional(const cli_spec *spec, char *opts, const char *arg,
                      int *npos)
{
    if (*npos >= spec->npositional) {
        ra_error_set(RA_ERR_ARG, "%s: unexpected argument '%s' (see ringattn "
                     "%s --help)", spec->name, arg, spec->name);
        return -1;
    }
    ((const char **)(opts + spec->pos_offset))[(*npos)++] = arg;
    return 0;
}

/* -1 with "NAME: --a and --b are required" when a required option of spec
 * was not given, else 0. */
static int required_check(const cli_spec *spec, const char *opts)
{
    char names[256] = "";
    int n = 0, missing = 0;
    for (int g = 0; g < CLI_MAX_GROUPS && spec->groups[g].opts; g++)
        for (const cli_opt *o = spec->groups[g].opts; o->name; o++) {
            if (!o->required || o->kind != CLI_TEXT)
                continue;
            const char *base = opts + spec->groups[g].base;
            missing |= !*(const char *const *)(base + o->offset);
            const size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s",
                     n++ ? " and " : "", o->name);
        }
    if (!missing)
        return 0;
    ra_error_set(RA_ERR_ARG, "%s: %s %s required (see ringattn %s --help)",
                 spec->name, names, n > 1 ? "are" : "is", spec->name);
    return -1;
}

int cli_parse(const cli_spec *spec, void *opts_, int argc, char **argv)
{
    char *opts = opts_, *base;
    unsigned char given[CLI_MAX_OPTIONS] = {0};
    int npos = 0, index;
    if (defaults_apply(spec, opts) != 0)
        return -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return CLI_HELP;
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            if (positional(spec, opts, arg, &npos) != 0)
                return -1;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const cli_opt *o = opt_find(spec, arg, len, opts, &base, &index);
        if (o && once_check(o, index, given) != 0)
            return -1;
        if (!o) {
            unknown_option(spec, arg, len);
            return -1;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (o->kind == CLI_FLAG && val) {
            ra_error_set(RA_ERR_ARG, "%s takes no value", o->name);
            return -1;
        }
        if (o->kind != CLI_FLAG && !val) {
            if (i + 1 >= argc) {
                ra_error_set(RA_ERR_ARG, "%s needs a value", o->name);
                return -1;
            }
            val = argv[++i];
        }
        if (opt_store(o, val, base) != 0)
            return -1;
    }
    return required_check(spec, opts) == 0 ? CLI_PARSED : -1;
}

/* One row of a help table: left from column indent, text (one line) and
 * the default def (or NULL) from HELP_COLUMN, on the next line when left
 * is too long, the default on the next when the line is full. */
static void help_row(FILE *out, int indent, const char *left,
                     const char *text, const char *def)
{
    if (indent + (int)strlen(left) + 2 > HELP_COLUMN)
        fprintf(out, "%*s%s\n%*s", indent, "", left, HELP_COLUMN, "");
    else
        fprintf(out, "%*s%-*s", indent, "", HELP_COLUMN - indent, left);
    fputs(text, out);
    if (def && HELP_COLUMN + strlen(text) + strlen(def) + 11 <= 79)
        fprintf(out, " (default %s)", def);
    else if (def)
        fprintf(out, "\n%*s(default %s)", HELP_COLUMN, "", def);
    fputc('\n', out);
}

void cli_help_row(FILE *out, int indent, const char *left, const char *text,
                  const char *def)
{
    help_row(out, indent, left, text, def);
}

static void help_option(FILE *out, const cli_opt *o)
{
    char left[MAX_OPTION_NAME + 32];
    snprintf(left, sizeof left, "%s%s%s", o->name, o->meta ? " " : "",
             o->meta ? o->meta : "");
    help_row(out, 2, left, o->help, o->kind == CLI_FLAG ? NULL
                                    : o->def ? o->def : o->shown);
}

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

/* The spec's epilog, text or printed. */
static void epilog_help(const cli_spec *spec, FILE *out)
{
    if (!spec->epilog && !spec->epilog_fn)
        return;
    fputc('\n', out);
    if (spec->epilog_fn)
        spec->epilog_fn(out);
    else
        fputs(spec->epilog, out);
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
    fputs(spec->usage, out);
    fputc('\n', out);
    for (int g = 0; g < CLI_MAX_GROUPS && spec->groups[g].opts; g++)
        for (const cli_opt *o = spec->groups[g].opts; o->name; o++)
            help_option(out, o);
    fprintf(out, "  %-*s%s\n", HELP_COLUMN - 2, "--help", "this text");
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

/* Below, with the other named enums. */
static int parse_precision(const cli_opt *o, const char *val, void *base);

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
     .fn = parse_precision, .shown = "the recorded one",
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

#define MAX_SIZE ((int64_t)1 << 40)
#define SHAPE_AT(f) CLI_FIELD(cli_shape, shape.f, int64_t)
#define SIZE_OPT(nm, meta_, f, seen_, def_, shown_, help_)                    \
    {.name = nm, .kind = CLI_INT, .meta = meta_, .offset = SHAPE_AT(f),      \
     .seen = seen_, .lo = 1, .hi = MAX_SIZE, .def = def_, .shown = shown_,   \
     .help = help_}

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

/* "L" or "L,R": keys within L before and R after the aligned diagonal. */
static int parse_window(const cli_opt *o, const char *val, void *base)
{
    ra_params *p = base;
    char left[32];
    const char *comma = strchr(val, ',');
    size_t len = comma ? (size_t)(comma - val) : strlen(val);
    if (len == 0 || len >= sizeof left) {
        ra_error_set(RA_ERR_ARG, "%s: '%s' is not L or L,R", o->name, val);
        return -1;
    }
    memcpy(left, val, len);
    left[len] = '\0';
    p->num.window = 1;
    p->num.window_right = 0;
    if (cli_parse_i64(o->name, left, 0, MAX_SIZE, &p->num.window_left) != 0 ||
        (comma && cli_parse_i64(o->name, comma + 1, 0, MAX_SIZE,
                                &p->num.window_right) != 0))
        return -1;
    return 0;
}

/* An enum the library names: its parser (ra_*_parse) is the one list of
 * names and says what it expected; the message gains the option. */
static int named(const cli_opt *o, ra_status st)
{
    if (st == RA_OK)
        return 0;
    char why[256];
    snprintf(why, sizeof why, "%s", ra_error_message());
    ra_error_set(RA_ERR_ARG, "%s: %s", o->name, why);
    return -1;
}

/* The destination of o in the group's struct at base, of enum type T. */
#define ENUM_AT(T, o, base) ((T *)((char *)(base) + (o)->offset))

/* A parser of an enum of type T by the library's parse. */
#define NAMED_PARSER(fn, T, parse)                                            \
    static int fn(const cli_opt *o, const char *val, void *base)              \
    {                                                                         \
        return named(o, parse(val, ENUM_AT(T, o, base)));                    \
    }
NAMED_PARSER(parse_layout, ra_layout, ra_layout_parse)
NAMED_PARSER(parse_rope, ra_rope, ra_rope_parse)
NAMED_PARSER(parse_precision, ra_precision, ra_precision_parse)
NAMED_PARSER(parse_wire, ra_wire, ra_wire_parse)
NAMED_PARSER(parse_score, ra_score, ra_score_parse)

/* An engine this build lacks is refused here, naming the flag. */
static int parse_gemm(const cli_opt *o, const char *val, void *base)
{
    ra_gemm *g = ENUM_AT(ra_gemm, o, base);
    if (named(o, ra_gemm_parse(val, g)) != 0)
        return -1;
    if (ra_gemm_available(*g))
        return 0;
    ra_error_set(RA_ERR_ARG, "%s %s: this build has no oneDNN (rebuild with "
                 "libdnnl-dev installed)", o->name, val);
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
        *ENUM_AT(int, o, base) =
            val[1] == 'l' ? CLI_STRATEGY_ALL : CLI_STRATEGY_AUTO;
        return 0;
    }
    return named(o, ra_strategy_parse(val, ENUM_AT(ra_strategy, o, base)));
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
          "keys i'-L .. i'+R of query i, i' = i + M - N", .fn = parse_window),
    P_OPT("--scale", CLI_REAL, "S", num.scale, double, "1/sqrt(D)",
          "scale of the dot score", .rlo = -DBL_MAX, .rhi = DBL_MAX),
    P_OPT("--score", CLI_CUSTOM, "NAME", num.score, ra_score, "dot",
          "dot, gaussian or additive (see below)", .fn = parse_score),
    P_OPT("--sigma", CLI_REAL, "S", num.sigma, double,
          RA_XSTR(CLI_SIGMA_DEFAULT), "bandwidth of the gaussian score",
          .open_lo = 1, .rhi = DBL_MAX),
    P_OPT("--rope", CLI_CUSTOM, "PAIRING", num.rope, ra_rope, "none",
          "RoPE of q and k: interleaved or half", .fn = parse_rope),
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
          "contiguous|balanced|zigzag|striped|auto", .fn = parse_layout),
    P_OPT("--gemm", CLI_CUSTOM, "ENGINE", exec.gemm, ra_gemm, "auto",
          "tile engine: onednn, openblas or auto", .fn = parse_gemm),
    P_OPT("--precision", CLI_CUSTOM, "P", num.precision, ra_precision,
          "fp32", "tile products: fp32 or bf16", .fn = parse_precision),
    P_OPT("--wire", CLI_CUSTOM, "TYPE", exec.wire, ra_wire, "auto",
          "K/V on the ring: fp32, bf16 or auto", .fn = parse_wire),
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

void cli_forward_details(FILE *out)
{
    fputs("Strategies:", out);
    for (int k = 0; k < RA_STRATEGY_COUNT; k++)
        fprintf(out, " %s,", ra_strategy_name((ra_strategy)k));
    fputs(" auto (plan's).\n"
          "Layout auto: balanced with a window, else striped with segments, "
          "else zigzag\nwhen causal. Engine auto: RINGATTN_GEMM's, else "
          "onednn. docs/REFERENCE.md.\n", out);
}

const cli_opt cli_pass_opts[] = {
    P_OPT("--stall-timeout", CLI_REAL, "S", exec.stall_timeout, double,
          "run: from the prediction; bench: "
          RA_XSTR(RA_STALL_TIMEOUT_DEFAULT) " s",
          "abort after S s with no progress (0: never)", .rhi = 1e9),
    {0},
};
