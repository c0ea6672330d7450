/* registry.c: the options registry: strict parsing, defaults and the
 * help rows from the tables of cli_opt (cli.h), and the values several
 * tables share (a window, an enum by the library's names). ringattn-sim
 * parses with it too (launch/sim/sim.cmake). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* How the user calls spec's command: "ringattn run", or a program's own
 * name ("ringattn-sim"), for "(see ... --help)". */
#define SEE(spec)                                                             \
    (strncmp((spec)->name, "ringattn", 8) == 0 ? "" : "ringattn "),          \
        (spec)->name

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
    ra_error_set(RA_ERR_ARG, "%s: unknown option '%.*s'%s%s%s (see %s%s "
                 "--help)", spec->name, (int)len, arg,
                 hint ? "; did you mean " : "", hint ? hint : "",
                 hint ? "?" : "", SEE(spec));
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
        ra_error_set(RA_ERR_ARG, "%s: unexpected argument '%s' (see %s%s "
                     "--help)", spec->name, arg, SEE(spec));
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
    ra_error_set(RA_ERR_ARG, "%s: %s %s required (see %s%s --help)",
                 spec->name, names, n > 1 ? "are" : "is", SEE(spec));
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

void cli_help_options(const cli_spec *spec, FILE *out)
{
    fputs(spec->usage, out);
    fputc('\n', out);
    for (int g = 0; g < CLI_MAX_GROUPS && spec->groups[g].opts; g++)
        for (const cli_opt *o = spec->groups[g].opts; o->name; o++)
            help_option(out, o);
    help_row(out, 2, "--help", "this text", NULL);
}

int cli_parse_window(const cli_opt *o, const char *val, void *base)
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
    if (cli_parse_i64(o->name, left, 0, CLI_MAX_SIZE, &p->num.window_left) ||
        (comma && cli_parse_i64(o->name, comma + 1, 0, CLI_MAX_SIZE,
                                &p->num.window_right)))
        return -1;
    return 0;
}

int cli_named(const cli_opt *o, ra_status st)
{
    if (st == RA_OK)
        return 0;
    char why[256];
    snprintf(why, sizeof why, "%s", ra_error_message());
    ra_error_set(RA_ERR_ARG, "%s: %s", o->name, why);
    return -1;
}

/* A cli_parse_fn fn of an enum of type T by the library's parse. */
#define NAMED_PARSER(fn, T, parse)                                            \
    int fn(const cli_opt *o, const char *val, void *base)                     \
    {                                                                         \
        return cli_named(o, parse(val, CLI_ENUM_AT(T, o, base)));            \
    }
NAMED_PARSER(cli_parse_layout, ra_layout, ra_layout_parse)
NAMED_PARSER(cli_parse_rope, ra_rope, ra_rope_parse)
NAMED_PARSER(cli_parse_precision, ra_precision, ra_precision_parse)
NAMED_PARSER(cli_parse_wire, ra_wire, ra_wire_parse)
NAMED_PARSER(cli_parse_score, ra_score, ra_score_parse)
NAMED_PARSER(cli_parse_strategy, ra_strategy, ra_strategy_parse)
