/* profile_json.c: machine profiles (profile.h) read from JSON files
 * (profile_write.c writes them).
 *
 * jansson parses the text. The keys the reader knows are
 * declared once, in tables of pj_key; a missing (unless optional),
 * repeated or unknown key, a value of the wrong type or outside its range
 * is refused with a one-line reason naming the file and the key. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "gemm.h"
#include "profile_json.h"

enum {
    JSON_MAX_BYTES = 1 << 20, /* a profile is a few kB */
    JSON_PATH = 96,
    JSON_SCHEMA_OLDEST = 2, /* read too: no engine, precision, class nor
                               fixed costs (optional keys) */
};

/* Rates above this are refused as corrupt (1 EB/s or 1e18 FLOP/s). */
#define JSON_RATE_MAX 1e18

/* ---- reading ------------------------------------------------------------ */

/* Where the reader is: the file, the key being read ("kernel[1].D"), and
 * the one-line reason of a refusal. */
typedef struct {
    const char *file;
    char path[JSON_PATH];
    char *err;
    size_t nerr;
} pj_in;

/* Sets the one-line reason and returns -1. */
static int pj_fail(pj_in *j, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (j->path[0])
        snprintf(j->err, j->nerr, "%s: key '%s': %s", j->file, j->path, what);
    else
        snprintf(j->err, j->nerr, "%s: %s", j->file, what);
    return -1;
}

/* What a value is, for messages: "a string", "an object". */
static const char *pj_what(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    default: return "a number";
    }
}

static int pj_number(pj_in *j, const json_t *v, double *x)
{
    if (!json_is_number(v))
        return pj_fail(j, "expected a number, found %s", pj_what(v));
    *x = json_number_value(v);
    return 0;
}

/* A string into out (cap bytes with its NUL). */
static int pj_text(pj_in *j, const json_t *v, char *out, size_t cap)
{
    if (!json_is_string(v))
        return pj_fail(j, "expected a string, found %s", pj_what(v));
    if (json_string_length(v) >= cap)
        return pj_fail(j, "string longer than %zu bytes", cap - 1);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
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
    JK_GEMM,   /* ra_gemm by name: openblas or onednn */
    JK_PRECISION, /* char[size]: fp32 or bf16 */
    JK_CLASS,  /* profile_class by name */
    JK_OBJECT, /* an object of the keys in sub */
    JK_RATES,  /* ra_profile's kernel rates: an array of objects */
} pj_kind;

typedef struct pj_key pj_key;
struct pj_key {
    const char *name;
    pj_kind kind;
    size_t offset, size; /* destination in the object's struct */
    double lo, hi;       /* JK_INT, JK_I64 */
    const pj_key *sub; /* JK_OBJECT, JK_RATES: the keys of each object */
    int optional;      /* 1: may be absent (left 0; profiles written
                          before the key existed) */
};

#define JK(type, field) offsetof(type, field), sizeof(((type *)0)->field)

static const pj_key link_keys[] = {
    {"latency", JK_RATE, JK(profile_link, latency)},
    {"bandwidth", JK_RATE, JK(profile_link, bandwidth)},
    {0},
};

static const pj_key rate_keys[] = {
    {"D", JK_I64, JK(profile_rate, D), 1, 65536},
    {"Dv", JK_I64, JK(profile_rate, Dv), 1, 65536},
    {"score", JK_SCORE, JK(profile_rate, score)},
    {"gemm", JK_GEMM, JK(profile_rate, gemm), 0, 0, NULL, 1},
    {"precision", JK_PRECISION, JK(profile_rate, precision), 0, 0, NULL, 1},
    {"class", JK_CLASS, JK(profile_rate, cls), 0, 0, NULL, 1},
    {"flops_per_core", JK_RATE, JK(profile_rate, flops_per_core)},
    {0},
};

static const pj_key profile_keys[] = {
    {"schema", JK_INT, 0, 0, JSON_SCHEMA_OLDEST, PROFILE_JSON_SCHEMA},
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
    /* seconds, read as rates are: >= 0, normal (0: not measured) */
    {"call_seconds", JK_RATE, JK(ra_profile, call_seconds), 0, 0, NULL, 1},
    {"step_seconds", JK_RATE, JK(ra_profile, step_seconds), 0, 0, NULL, 1},
    {0},
};

static int pj_members(pj_in *j, const pj_key *keys, const json_t *v,
                        void *base);

/* An integer of a JK_INT or JK_I64 key, within its range (dst NULL: only
 * checked). */
static int pj_integer(pj_in *j, const pj_key *k, const json_t *v,
                        void *dst)
{
    double x = 0.0;
    if (pj_number(j, v, &x) != 0)
        return -1;
    if (x != floor(x))
        return pj_fail(j, "%.17g is not an integer", x);
    if (x < k->lo || x > k->hi)
        return pj_fail(j, "%.17g is outside [%.17g, %.17g]", x, k->lo,
                         k->hi);
    if (dst && k->kind == JK_INT)
        *(int *)dst = (int)x;
    else if (dst)
        *(int64_t *)dst = (int64_t)x;
    return 0;
}

/* A rate: >= 0 (0: not measured), normal, at most JSON_RATE_MAX. */
static int pj_rate(pj_in *j, const json_t *v, double *dst)
{
    double x = 0.0;
    if (pj_number(j, v, &x) != 0)
        return -1;
    if (x < 0 || x > JSON_RATE_MAX)
        return pj_fail(j, "%g is not a rate in [0, %g] (0: not measured)",
                         x, JSON_RATE_MAX);
    if (x > 0 && x < DBL_MIN) /* would divide to infinity */
        return pj_fail(j, "%g is denormal, not a measured rate", x);
    *dst = x;
    return 0;
}

/* The kernel rates: an array of at most PROFILE_MAX_RATES objects. */
static int pj_rates(pj_in *j, const pj_key *k, const json_t *v,
                      ra_profile *p)
{
    const size_t len = strlen(j->path);
    if (!json_is_array(v))
        return pj_fail(j, "expected an array, found %s", pj_what(v));
    if (json_array_size(v) > PROFILE_MAX_RATES)
        return pj_fail(j, "more than %d entries", PROFILE_MAX_RATES);
    for (p->nrates = 0; p->nrates < (int)json_array_size(v); p->nrates++) {
        snprintf(j->path + len, sizeof j->path - len, "[%d]", p->nrates);
        if (pj_members(j, k->sub, json_array_get(v, (size_t)p->nrates),
                         &p->rate[p->nrates]) != 0)
            return -1;
    }
    j->path[len] = '\0';
    return 0;
}

static int pj_score(pj_in *j, const json_t *v, ra_score *dst)
{
    char name[32];
    if (pj_text(j, v, name, sizeof name) != 0)
        return -1;
    if (ra_score_parse(name, dst) != RA_OK)
        return pj_fail(j, "unknown score '%s' (dot, gaussian or additive)",
                         name);
    return 0;
}

/* The names of a rate's engine, precision and class. */
static int pj_named(pj_in *j, const pj_key *k, const json_t *v, void *dst)
{
    char name[32];
    ra_gemm g;
    if (pj_text(j, v, name, sizeof name) != 0)
        return -1;
    if (k->kind == JK_GEMM && ra_gemm_parse(name, &g) == RA_OK &&
        g != RA_GEMM_AUTO) {
        *(ra_gemm *)dst = g;
        return 0;
    }
    if (k->kind == JK_CLASS && profile_class_parse(name, dst) == 0)
        return 0;
    if (k->kind == JK_PRECISION &&
        (strcmp(name, "fp32") == 0 || strcmp(name, "bf16") == 0)) {
        memcpy(dst, name, strlen(name) + 1);
        return 0;
    }
    return pj_fail(j, "unknown %s '%s' (%s)", k->name, name,
                   k->kind == JK_GEMM    ? "openblas or onednn"
                   : k->kind == JK_CLASS ? "full, masked or band"
                                         : "fp32 or bf16");
}

/* The value v of key k into base + k->offset. */
static int pj_value(pj_in *j, const pj_key *k, const json_t *v,
                      char *base)
{
    void *dst = base + k->offset;
    switch (k->kind) {
    case JK_BOOL:
        if (!json_is_boolean(v))
            return pj_fail(j, "expected true or false, found %s",
                             pj_what(v));
        *(int *)dst = json_is_true(v);
        return 0;
    case JK_INT:
    case JK_I64: return pj_integer(j, k, v, k->size ? dst : NULL);
    case JK_RATE: return pj_rate(j, v, dst);
    case JK_TEXT: return pj_text(j, v, dst, k->size);
    case JK_SCORE: return pj_score(j, v, dst);
    case JK_GEMM:
    case JK_PRECISION:
    case JK_CLASS: return pj_named(j, k, v, dst);
    case JK_OBJECT: return pj_members(j, k->sub, v, dst);
    case JK_RATES: return pj_rates(j, k, v, (ra_profile *)base);
    }
    return pj_fail(j, "internal: unknown key kind");
}

/* An object whose keys are keys, each read in the file's order, then the
 * first key it lacks refused. */
static int pj_members(pj_in *j, const pj_key *keys, const json_t *v,
                        void *base)
{
    char seen[32] = {0};
    const size_t len = strlen(j->path);
    const char *name;
    const json_t *val;
    if (!json_is_object(v))
        return pj_fail(j, "expected an object, found %s", pj_what(v));
    json_object_foreach((json_t *)v, name, val) {
        snprintf(j->path + len, sizeof j->path - len, "%s%s",
                 len ? "." : "", name);
        int i = 0;
        while (keys[i].name && strcmp(keys[i].name, name) != 0)
            i++;
        if (!keys[i].name)
            return pj_fail(j, "unknown key");
        seen[i] = 1;
        if (pj_value(j, &keys[i], val, base) != 0)
            return -1;
    }
    for (int i = 0; keys[i].name; i++)
        if (!seen[i] && !keys[i].optional) {
            snprintf(j->path + len, sizeof j->path - len, "%s%s",
                     len ? "." : "", keys[i].name);
            return pj_fail(j, "missing");
        }
    j->path[len] = '\0';
    return 0;
}

/* The file parsed by jansson (a repeated key refused, every number read
 * as a double); a regular file only, so that a FIFO or a device is refused
 * rather than waited on. */
static json_t *pj_load(const char *path, char *err, size_t n)
{
    struct stat sb;
    json_error_t e;
    json_t *root = NULL;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, n, "%s: cannot open the profile: %s", path,
                 strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        snprintf(err, n, "%s: the profile is not a regular file (%s)", path,
                 S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode)
                 ? "a FIFO" : "a device or socket");
    else if (sb.st_size > JSON_MAX_BYTES)
        snprintf(err, n, "%s: the profile is %lld bytes, more than a "
                 "profile's %d", path, (long long)sb.st_size, JSON_MAX_BYTES);
    else if (!(root = json_loadfd(fd, JSON_REJECT_DUPLICATES |
                                  JSON_DECODE_INT_AS_REAL, &e)))
        snprintf(err, n, "%s: %s%s (line %d)", path, e.text,
                 json_error_code(&e) == json_error_premature_end_of_input
                     ? " (truncated?)" : "", e.line);
    close(fd);
    return root;
}

int profile_read_json(const char *path, ra_profile *p, char *err, size_t n)
{
    err[0] = '\0';
    json_t *root = pj_load(path, err, n);
    if (!root)
        return -1;
    ra_profile got;
    memset(&got, 0, sizeof got);
    pj_in j = {.file = path, .err = err, .nerr = n};
    int rc = pj_members(&j, profile_keys, root, &got);
    if (rc == 0 && got.ranks_per_node > got.ranks)
        rc = pj_fail(&j, "ranks_per_node %d is above ranks %d",
                       got.ranks_per_node, got.ranks);
    json_decref(root);
    if (rc == 0)
        *p = got;
    return rc;
}

ra_status profile_load(const char *path, ra_profile *p)
{
    char why[512];
    profile_default(p);
    if (path && profile_read_json(path, p, why, sizeof why) != 0)
        return ra_error_set(RA_ERR_INPUT, "%s", why);
    return RA_OK;
}
