/* profile_json.c: machine profiles (comm/profile.h) as JSON files, the
 * built-in profile of this machine, and the kernel rate of a head shape.
 *
 * The reader is a strict recursive-descent parser of the JSON subset the
 * writer emits (objects, arrays, strings, numbers, true/false), in any key
 * order and white space. The keys it knows are declared once, in tables of
 * json_key; a missing (unless optional), repeated or unknown key, a value
 * of the wrong type or outside its range is refused with a one-line reason
 * naming the file and the key. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "profile_json.h"

enum {
    JSON_MAX_BYTES = 1 << 20, /* a profile is a few kB */
    JSON_MAX_DEPTH = 8,
    JSON_PATH = 96,
    JSON_SCHEMA = 2, /* the "schema" key: the layout of this file */
};

/* Rates above this are refused as corrupt (1 EB/s or 1e18 FLOP/s). */
#define JSON_RATE_MAX 1e18

void profile_default(ra_profile *p)
{
    memset(p, 0, sizeof *p);
    p->measured = 0;
    snprintf(p->version, sizeof p->version, "ringattn %s", RA_VERSION_STRING);
    snprintf(p->hosts, sizeof p->hosts, "this machine (not probed)");
    snprintf(p->io_dir, sizeof p->io_dir, ".");
    /* docs/PERFORMANCE.md: the machine the figures come from, 2 cores */
    p->nodes = 1;
    p->ranks = 2;
    p->ranks_per_node = 2;
    p->threads = 1;
    /* "Across lengths": 110.6-112.8 GFLOP/s at P = 1, D = 64; "Forward
     * speed against sgemm": 221.8 GFLOP/s over 2 ranks at D = 128 */
    p->rate[0] = (profile_rate){64, 64, RA_SCORE_DOT, 111e9};
    p->rate[1] = (profile_rate){128, 128, RA_SCORE_DOT, 110.9e9};
    /* "Scores": gaussian 0.99 of dot; additive 29.5 GFLOP/s over 2 ranks
     * at A = 64 */
    p->rate[2] = (profile_rate){64, 64, RA_SCORE_GAUSSIAN, 104e9};
    p->rate[3] = (profile_rate){64, 64, RA_SCORE_ADDITIVE, 14.7e9};
    p->nrates = 4;
    /* "Overlap": the comm-only ring of the ring's messages, 7.7 GB/s per
     * rank over shared memory and 3.2 GB/s over TCP. Latencies are not in
     * the document: typical Open MPI figures (vader about 1 us, TCP on one
     * host about 30 us), small against any ring step's transfer. */
    p->intra = (profile_link){1e-6, 7.7e9};
    p->inter = (profile_link){30e-6, 3.2e9};
    /* No collective rates are in the document: taken as the ring's
     * point-to-point rates of the same path. */
    p->alltoall_intra = p->allgather_intra = 7.7e9;
    p->alltoall_inter = p->allgather_inter = 3.2e9;
    /* Open MPI reduces to one rank and scatters from there: about a third
     * of the point-to-point rate at two ranks ("Machine profile") */
    p->reduce_scatter_intra = 7.7e9 / 3;
    p->reduce_scatter_inter = 3.2e9 / 3;
    /* "I/O": reads 0.3-1.6 GB/s, writes 0.1-1.4 GB/s at P = 1..4; the
     * lower middles */
    p->io_read = 0.9e9;
    p->io_write = 0.4e9;
    /* the 24 GiB of the machine */
    p->mem_per_node = (int64_t)24 << 30;
}

double profile_kernel_rate(const ra_profile *p, int64_t D, int64_t Dv,
                           ra_score score)
{
    const profile_rate *best = NULL, *dot = NULL;
    for (int i = 0; i < p->nrates; i++) {
        const profile_rate *r = &p->rate[i];
        if (!(r->flops_per_core > 0))
            continue;
        if (r->score == score && r->D == D && r->Dv == Dv)
            return r->flops_per_core;
        if (r->score == score &&
            (!best || llabs(r->D - D) < llabs(best->D - D)))
            best = r;
        if (r->score == RA_SCORE_DOT &&
            (!dot || llabs(r->D - D) < llabs(dot->D - D)))
            dot = r;
    }
    return best ? best->flops_per_core : dot ? dot->flops_per_core : 0.0;
}

/* ---- writing ------------------------------------------------------------ */

static void json_link(FILE *f, const char *key, const profile_link *l)
{
    fprintf(f, "  \"%s\": {\"latency\": %.17g, \"bandwidth\": %.17g},\n",
            key, l->latency, l->bandwidth);
}

int profile_write_json(FILE *f, const ra_profile *p)
{
    fprintf(f, "{\n  \"schema\": %d,\n  \"measured\": %s,\n"
            "  \"oversubscribed\": %s,\n", JSON_SCHEMA,
            p->measured ? "true" : "false",
            p->oversubscribed ? "true" : "false");
    const char *texts[][2] = {{"date", p->date}, {"version", p->version},
                              {"hosts", p->hosts}, {"io_dir", p->io_dir}};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        fprintf(f, "  \"%s\": ", texts[i][0]);
        cli_json_string(f, texts[i][1]);
        fputs(",\n", f);
    }
    fprintf(f, "  \"nodes\": %d,\n  \"ranks\": %d,\n  \"ranks_per_node\": "
            "%d,\n  \"threads\": %d,\n  \"kernel\": [", p->nodes, p->ranks,
            p->ranks_per_node, p->threads);
    for (int i = 0; i < p->nrates; i++)
        fprintf(f, "%s\n    {\"D\": %lld, \"Dv\": %lld, \"score\": \"%s\", "
                "\"flops_per_core\": %.17g}", i ? "," : "",
                (long long)p->rate[i].D, (long long)p->rate[i].Dv,
                ra_score_name(p->rate[i].score), p->rate[i].flops_per_core);
    fprintf(f, "%s],\n", p->nrates ? "\n  " : "");
    json_link(f, "intra", &p->intra);
    json_link(f, "inter", &p->inter);
    fprintf(f, "  \"alltoall_intra\": %.17g,\n  \"alltoall_inter\": %.17g,\n"
            "  \"allgather_intra\": %.17g,\n  \"allgather_inter\": %.17g,\n"
            "  \"reduce_scatter_intra\": %.17g,\n"
            "  \"reduce_scatter_inter\": %.17g,\n"
            "  \"io_read\": %.17g,\n  \"io_write\": %.17g,\n"
            "  \"mem_per_node\": %lld\n}\n", p->alltoall_intra,
            p->alltoall_inter, p->allgather_intra, p->allgather_inter,
            p->reduce_scatter_intra, p->reduce_scatter_inter, p->io_read,
            p->io_write, (long long)p->mem_per_node);
    return ferror(f) ? -1 : 0;
}

/* ---- reading ------------------------------------------------------------ */

typedef struct {
    const char *file;
    const char *s, *at, *end; /* the text, the cursor, its end */
    int depth;
    char path[JSON_PATH];     /* the key being read, "kernel[1].D" */
    char *err;
    size_t nerr;
} json_in;

/* Sets the one-line reason (the first one wins) and returns -1. */
static int json_fail(json_in *j, const char *fmt, ...)
{
    if (j->err[0])
        return -1;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int line = 1;
    for (const char *c = j->s; c < j->at && c < j->end; c++)
        line += *c == '\n';
    if (j->path[0])
        snprintf(j->err, j->nerr, "%s: key '%s': %s (line %d)", j->file,
                 j->path, what, line);
    else
        snprintf(j->err, j->nerr, "%s: %s (line %d)", j->file, what, line);
    return -1;
}

static void json_space(json_in *j)
{
    while (j->at < j->end && (*j->at == ' ' || *j->at == '\t' ||
                              *j->at == '\n' || *j->at == '\r'))
        j->at++;
}

/* What the next value is, for messages: "a string", "the end of the file". */
static const char *json_what(const json_in *j)
{
    if (j->at >= j->end)
        return "the end of the file (truncated?)";
    switch (*j->at) {
    case '"': return "a string";
    case '{': return "an object";
    case '[': return "an array";
    case 't': case 'f': return "a boolean";
    case 'n': return "null";
    default:
        return (*j->at == '-' || (*j->at >= '0' && *j->at <= '9'))
                   ? "a number" : "something that is not JSON";
    }
}

static int json_expect(json_in *j, char c)
{
    json_space(j);
    if (j->at < j->end && *j->at == c) {
        j->at++;
        return 0;
    }
    return json_fail(j, "expected '%c', found %s", c, json_what(j));
}

/* Four hex digits of a \u escape. */
static int json_hex4(json_in *j, unsigned *u)
{
    *u = 0;
    for (int i = 0; i < 4; i++, j->at++) {
        const char c = j->at < j->end ? *j->at : '\0';
        const int d = c >= '0' && c <= '9' ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return json_fail(j, "a \\u escape needs four hex digits");
        *u = *u * 16 + (unsigned)d;
    }
    return 0;
}

/* Appends code point u as UTF-8 (no surrogates: the writer emits none). */
static int json_utf8(json_in *j, unsigned u, char *out, size_t cap,
                     size_t *len)
{
    char b[3];
    size_t n = 0;
    if (u == 0 || (u >= 0xd800 && u < 0xe000))
        return json_fail(j, "\\u%04x is not allowed in a string", u);
    if (u < 0x80) {
        b[n++] = (char)u;
    } else if (u < 0x800) {
        b[n++] = (char)(0xc0 | (u >> 6));
        b[n++] = (char)(0x80 | (u & 0x3f));
    } else {
        b[n++] = (char)(0xe0 | (u >> 12));
        b[n++] = (char)(0x80 | ((u >> 6) & 0x3f));
        b[n++] = (char)(0x80 | (u & 0x3f));
    }
    if (*len + n >= cap)
        return json_fail(j, "string longer than %zu bytes", cap - 1);
    memcpy(out + *len, b, n);
    *len += n;
    return 0;
}

/* A string into out (cap bytes with its NUL). */
static int json_string(json_in *j, char *out, size_t cap)
{
    static const char plain[] = "\"\\/bfnrt", meant[] = "\"\\/\b\f\n\r\t";
    if (json_expect(j, '"') != 0)
        return -1;
    size_t len = 0;
    while (j->at < j->end && *j->at != '"') {
        unsigned c = (unsigned char)*j->at++;
        if (c < 0x20)
            return json_fail(j, "a control character inside a string");
        if (c != '\\') { /* a byte as it stands (UTF-8 passes through) */
            if (len + 1 >= cap)
                return json_fail(j, "string longer than %zu bytes", cap - 1);
            out[len++] = (char)c;
            continue;
        }
        const char *e = j->at < j->end ? strchr(plain, *j->at) : NULL;
        if (j->at < j->end && *j->at == 'u') {
            j->at++;
            if (json_hex4(j, &c) != 0)
                return -1;
        } else if (e && *e) {
            c = (unsigned char)meant[e - plain];
            j->at++;
        } else {
            return json_fail(j, "a bad escape in a string");
        }
        if (json_utf8(j, c, out, cap, &len) != 0)
            return -1;
    }
    if (j->at >= j->end)
        return json_fail(j, "a string without its closing quote "
                            "(truncated?)");
    j->at++;
    out[len] = '\0';
    return 0;
}

/* A number as JSON writes it, into a double (finite). */
static int json_number(json_in *j, double *out)
{
    json_space(j);
    const char *p = j->at;
    if (p < j->end && *p == '-')
        p++;
    const char *digits = p;
    while (p < j->end && *p >= '0' && *p <= '9')
        p++;
    if (p == digits)
        return json_fail(j, "expected a number, found %s", json_what(j));
    if (*digits == '0' && p - digits > 1)
        return json_fail(j, "a number with a leading zero");
    if (p < j->end && *p == '.') {
        const char *frac = ++p;
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
        if (p == frac)
            return json_fail(j, "a number with no digits after '.'");
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < j->end && (*p == '+' || *p == '-'))
            p++;
        const char *exp = p;
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
        if (p == exp)
            return json_fail(j, "a number with an empty exponent");
    }
    char text[64];
    if ((size_t)(p - j->at) >= sizeof text)
        return json_fail(j, "a number of more than %zu characters",
                         sizeof text - 1);
    memcpy(text, j->at, (size_t)(p - j->at));
    text[p - j->at] = '\0';
    *out = strtod(text, NULL);
    if (!isfinite(*out))
        return json_fail(j, "%s is beyond the range of a double", text);
    j->at = p;
    return 0;
}

static int json_bool(json_in *j, int *out)
{
    json_space(j);
    const size_t left = (size_t)(j->end - j->at);
    if (left >= 4 && memcmp(j->at, "true", 4) == 0) {
        j->at += 4;
        *out = 1;
    } else if (left >= 5 && memcmp(j->at, "false", 5) == 0) {
        j->at += 5;
        *out = 0;
    } else {
        return json_fail(j, "expected true or false, found %s",
                         json_what(j));
    }
    return 0;
}

/* ---- the keys of a profile ---------------------------------------------- */

typedef enum {
    JK_BOOL,   /* int 0/1 */
    JK_INT,    /* int in [lo, hi] */
    JK_I64,    /* int64_t in [lo, hi] */
    JK_RATE,   /* double >= 0 (0: not measured), at most JSON_RATE_MAX */
    JK_TEXT,   /* char[size] */
    JK_SCORE,  /* ra_score by name */
    JK_OBJECT, /* an object of the keys in sub */
    JK_RATES,  /* ra_profile's kernel rates: an array of objects */
} json_kind;

typedef struct json_key json_key;
struct json_key {
    const char *name;
    json_kind kind;
    size_t offset, size; /* destination in the object's struct */
    double lo, hi;       /* JK_INT, JK_I64 */
    const json_key *sub; /* JK_OBJECT, JK_RATES: the keys of each object */
    int optional;        /* 1: may be absent (left 0; profiles written
                            before the key existed) */
};

#define JK(type, field) offsetof(type, field), sizeof(((type *)0)->field)

static const json_key link_keys[] = {
    {"latency", JK_RATE, JK(profile_link, latency)},
    {"bandwidth", JK_RATE, JK(profile_link, bandwidth)},
    {0},
};

static const json_key rate_keys[] = {
    {"D", JK_I64, JK(profile_rate, D), 1, 65536},
    {"Dv", JK_I64, JK(profile_rate, Dv), 1, 65536},
    {"score", JK_SCORE, JK(profile_rate, score)},
    {"flops_per_core", JK_RATE, JK(profile_rate, flops_per_core)},
    {0},
};

static const json_key profile_keys[] = {
    {"schema", JK_INT, 0, 0, JSON_SCHEMA, JSON_SCHEMA},
    {"measured", JK_BOOL, JK(ra_profile, measured)},
    {"oversubscribed", JK_BOOL, JK(ra_profile, oversubscribed), 0, 0, NULL,
     1},
    {"date", JK_TEXT, JK(ra_profile, date)},
    {"version", JK_TEXT, JK(ra_profile, version)},
    {"hosts", JK_TEXT, JK(ra_profile, hosts)},
    {"io_dir", JK_TEXT, JK(ra_profile, io_dir)},
    {"nodes", JK_INT, JK(ra_profile, nodes), 1, 1 << 20},
    {"ranks", JK_INT, JK(ra_profile, ranks), 1, 1 << 24},
    {"ranks_per_node", JK_INT, JK(ra_profile, ranks_per_node), 1, 1 << 16},
    {"threads", JK_INT, JK(ra_profile, threads), 1, 1 << 12},
    {"kernel", JK_RATES, JK(ra_profile, rate), 0, 0, rate_keys},
    {"intra", JK_OBJECT, JK(ra_profile, intra), 0, 0, link_keys},
    {"inter", JK_OBJECT, JK(ra_profile, inter), 0, 0, link_keys},
    {"alltoall_intra", JK_RATE, JK(ra_profile, alltoall_intra)},
    {"alltoall_inter", JK_RATE, JK(ra_profile, alltoall_inter)},
    {"allgather_intra", JK_RATE, JK(ra_profile, allgather_intra)},
    {"allgather_inter", JK_RATE, JK(ra_profile, allgather_inter)},
    {"reduce_scatter_intra", JK_RATE, JK(ra_profile, reduce_scatter_intra)},
    {"reduce_scatter_inter", JK_RATE, JK(ra_profile, reduce_scatter_inter)},
    {"io_read", JK_RATE, JK(ra_profile, io_read)},
    {"io_write", JK_RATE, JK(ra_profile, io_write)},
    {"mem_per_node", JK_I64, JK(ra_profile, mem_per_node), 0, 0x1p62},
    {0},
};

static int json_object(json_in *j, const json_key *keys, void *base);

/* An integer of a JK_INT or JK_I64 key, within its range. */
static int json_integer(json_in *j, const json_key *k, void *dst)
{
    double x;
    if (json_number(j, &x) != 0)
        return -1;
    if (x != floor(x))
        return json_fail(j, "%.17g is not an integer", x);
    if (x < k->lo || x > k->hi)
        return json_fail(j, "%.17g is outside [%.17g, %.17g]", x, k->lo,
                         k->hi);
    if (!dst)
        return 0;
    if (k->kind == JK_INT)
        *(int *)dst = (int)x;
    else
        *(int64_t *)dst = (int64_t)x;
    return 0;
}

/* The kernel rates: an array of at most PROFILE_MAX_RATES objects. */
static int json_rates(json_in *j, const json_key *k, ra_profile *p)
{
    const size_t len = strlen(j->path);
    p->nrates = 0;
    if (json_expect(j, '[') != 0)
        return -1;
    json_space(j);
    if (j->at < j->end && *j->at == ']') {
        j->at++;
        return 0;
    }
    for (;;) {
        if (p->nrates == PROFILE_MAX_RATES)
            return json_fail(j, "more than %d entries", PROFILE_MAX_RATES);
        snprintf(j->path + len, sizeof j->path - len, "[%d]", p->nrates);
        if (json_object(j, k->sub, &p->rate[p->nrates]) != 0)
            return -1;
        p->nrates++;
        j->path[len] = '\0';
        json_space(j);
        if (j->at < j->end && *j->at == ',') {
            j->at++;
            continue;
        }
        return json_expect(j, ']');
    }
}

/* The value of one key into base + k->offset. */
static int json_value(json_in *j, const json_key *k, char *base)
{
    void *dst = base + k->offset;
    double x;
    char name[32];
    ra_score sc;
    switch (k->kind) {
    case JK_BOOL:
        return json_bool(j, (int *)dst);
    case JK_INT:
    case JK_I64:
        return json_integer(j, k, k->size ? dst : NULL);
    case JK_RATE:
        if (json_number(j, &x) != 0)
            return -1;
        if (x < 0 || x > JSON_RATE_MAX)
            return json_fail(j, "%g is not a rate in [0, %g] (0: not "
                             "measured)", x, JSON_RATE_MAX);
        if (x > 0 && x < DBL_MIN) /* would divide to infinity */
            return json_fail(j, "%g is denormal, not a measured rate", x);
        *(double *)dst = x;
        return 0;
    case JK_TEXT:
        return json_string(j, dst, k->size);
    case JK_SCORE:
        if (json_string(j, name, sizeof name) != 0)
            return -1;
        if (ra_score_parse(name, &sc) != RA_OK)
            return json_fail(j, "unknown score '%s' (dot, gaussian or "
                             "additive)", name);
        *(ra_score *)dst = sc;
        return 0;
    case JK_OBJECT:
        return json_object(j, k->sub, dst);
    case JK_RATES:
        return json_rates(j, k, (ra_profile *)base);
    }
    return json_fail(j, "internal: unknown key kind");
}

/* One "key": value of an object whose keys are keys (seen: one flag per
 * key, for repeats). */
static int json_member(json_in *j, const json_key *keys, void *base,
                       char *seen)
{
    char key[64];
    const size_t len = strlen(j->path);
    json_space(j);
    if (j->at < j->end && *j->at != '"')
        return json_fail(j, "expected a key in quotes, found %s",
                         json_what(j));
    if (json_string(j, key, sizeof key) != 0)
        return -1;
    snprintf(j->path + len, sizeof j->path - len, "%s%s", len ? "." : "",
             key);
    int i = 0;
    while (keys[i].name && strcmp(keys[i].name, key) != 0)
        i++;
    if (!keys[i].name)
        return json_fail(j, "unknown key");
    if (seen[i]++)
        return json_fail(j, "given twice");
    if (json_expect(j, ':') != 0 || json_value(j, &keys[i], base) != 0)
        return -1;
    j->path[len] = '\0';
    return 0;
}

static int json_object(json_in *j, const json_key *keys, void *base)
{
    char seen[32] = {0};
    if (++j->depth > JSON_MAX_DEPTH)
        return json_fail(j, "nested deeper than %d", JSON_MAX_DEPTH);
    if (json_expect(j, '{') != 0)
        return -1;
    json_space(j);
    int more = !(j->at < j->end && *j->at == '}');
    while (more) {
        if (json_member(j, keys, base, seen) != 0)
            return -1;
        json_space(j);
        more = j->at < j->end && *j->at == ',';
        j->at += more;
    }
    if (json_expect(j, '}') != 0)
        return -1;
    for (int i = 0; keys[i].name; i++)
        if (!seen[i] && !keys[i].optional) {
            const size_t len = strlen(j->path);
            snprintf(j->path + len, sizeof j->path - len, "%s%s",
                     len ? "." : "", keys[i].name);
            return json_fail(j, "missing");
        }
    j->depth--;
    return 0;
}

/* The whole file into a buffer (NUL-terminated); a regular file only, so
 * that a FIFO or a device is refused rather than waited on. */
static char *json_load(const char *path, size_t *len, char *err, size_t n)
{
    struct stat sb;
    char *buf = NULL;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, n, "%s: cannot open the profile: %s", path,
                 strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, n, "%s: the profile is not a regular file (%s)", path,
                 S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode)
                 ? "a FIFO" : "a device or socket");
        goto done;
    }
    if (sb.st_size > JSON_MAX_BYTES) {
        snprintf(err, n, "%s: the profile is %lld bytes, more than a "
                 "profile's %d", path, (long long)sb.st_size, JSON_MAX_BYTES);
        goto done;
    }
    buf = malloc((size_t)sb.st_size + 1);
    const ssize_t got = buf ? read(fd, buf, (size_t)sb.st_size) : -1;
    if (got != (ssize_t)sb.st_size) {
        snprintf(err, n, "%s: reading the profile failed: %s", path,
                 buf ? strerror(errno) : "out of memory");
        free(buf);
        buf = NULL;
        goto done;
    }
    buf[got] = '\0';
    *len = (size_t)got;
done:
    close(fd);
    return buf;
}

int profile_read_json(const char *path, ra_profile *p, char *err, size_t n)
{
    size_t len = 0;
    err[0] = '\0';
    char *text = json_load(path, &len, err, n);
    if (!text)
        return -1;
    ra_profile got;
    memset(&got, 0, sizeof got);
    json_in j = {.file = path, .s = text, .at = text, .end = text + len,
                 .err = err, .nerr = n};
    int rc = json_object(&j, profile_keys, &got);
    json_space(&j);
    if (rc == 0 && j.at != j.end)
        rc = json_fail(&j, "text after the profile's closing brace");
    if (rc == 0 && strlen(text) != len)
        rc = json_fail(&j, "a NUL byte in the file");
    if (rc == 0 && got.ranks_per_node > got.ranks)
        rc = json_fail(&j, "ranks_per_node %d is above ranks %d",
                       got.ranks_per_node, got.ranks);
    free(text);
    if (rc == 0)
        *p = got;
    return rc;
}

/* ---- what a prediction divides by ----------------------------------------- */

/* A rate the model may divide by: positive, normal and finite. */
static int rate_ok(double x)
{
    return isfinite(x) && x >= DBL_MIN;
}

/* The links and collectives the model times for need: the rate it divides
 * by and the key that is missing when that rate is not usable (the model's
 * fall-backs for 0 included, as in comm/model.c). */
static const char *profile_link_gap(const ra_profile *p,
                                    const profile_need *need)
{
    const int shared = need->P > need->nodes, cross = need->nodes > 1;
    const double per = (double)((need->P + need->nodes - 1) / need->nodes);
    const double link = p->inter.bandwidth > 0 ? p->inter.bandwidth
                                               : p->intra.bandwidth;
    const struct {
        const char *key;
        int used;
        double rate;
    } uses[] = {
        {"intra.bandwidth", shared, p->intra.bandwidth},
        {"alltoall_intra", shared, p->alltoall_intra},
        {"allgather_intra", shared, p->allgather_intra},
        {"inter.bandwidth", cross, link},
        {"alltoall_inter", cross, p->alltoall_inter > 0 ? p->alltoall_inter
            : (p->inter.bandwidth > 0 ? link : p->alltoall_intra * per) / per},
        {"allgather_inter", cross, p->allgather_inter > 0
            ? p->allgather_inter
            : (p->inter.bandwidth > 0 ? link : p->allgather_intra * per) / per},
        {"io_read", need->with_io, p->io_read},
        {"io_write", need->with_io, p->io_write},
    };
    for (size_t i = 0; i < sizeof uses / sizeof *uses; i++)
        if (uses[i].used && !rate_ok(uses[i].rate))
            return uses[i].key;
    return NULL;
}

int profile_usable(const ra_profile *p, const profile_need *need, char *why,
                   size_t n)
{
    if (!rate_ok(need->core_rate)) {
        snprintf(why, n, "key 'kernel': no measured rate for the %s score "
                 "(D = %lld, Dv = %lld) and no dot rate to stand in",
                 ra_score_name(need->score), (long long)need->D,
                 (long long)need->Dv);
        return -1;
    }
    const char *gap = profile_link_gap(p, need);
    if (!gap)
        return 0;
    snprintf(why, n, "key '%s': not measured (probed at %d rank(s) on %d "
             "node(s)), and %d rank(s) on %d node(s) need it", gap, p->ranks,
             p->nodes, need->P, need->nodes);
    return -1;
}
