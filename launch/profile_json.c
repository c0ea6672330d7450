/* profile_json.c: machine profiles (comm/profile.h) as JSON files, the
 * built-in profile of this machine, and the kernel rate of a head shape.
 *
 * jansson parses and writes the text. The keys the reader knows are
 * declared once, in tables of pj_key; a missing (unless optional),
 * repeated or unknown key, a value of the wrong type or outside its range
 * is refused with a one-line reason naming the file and the key. */
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
#include "gemm.h"
#include "profile_json.h"

enum {
    JSON_MAX_BYTES = 1 << 20, /* a profile is a few kB */
    JSON_PATH = 96,
    JSON_SCHEMA = 3, /* the "schema" key: the layout of this file */
    JSON_SCHEMA_OLDEST = 2, /* read too: no engine, precision, class nor
                               fixed costs (optional keys) */
};

/* Rates above this are refused as corrupt (1 EB/s or 1e18 FLOP/s). */
#define JSON_RATE_MAX 1e18

/* The built-in kernel rates, per core (docs/PERFORMANCE.md, "Probing the
 * tile engines"). Full and masked: "The oneDNN tile engine", `mpirun -np 2
 * --bind-to core ringattn bench --seq 16384 --heads 4 --dim D [--causal]
 * --gemm G` on the quiet machine, GFLOP/s over 2 ranks halved. Band: the
 * full rate times the band / full ratio of one `mpirun -np 2 ringattn
 * probe --gemm openblas,onednn --dim 64,128` (bench/records/
 * probe-engines-p2-loaded.json; the machine was loaded, so its ratios,
 * not its rates, are kept). The other scores from "Scores": gaussian 0.99
 * of dot; additive 29.5 GFLOP/s over 2 ranks at A = 64 (their compute is
 * not the tile products). bf16: the fp32 rate times the bf16 / fp32
 * ratio of one quiet `mpirun -np 2 --bind-to core ringattn probe --gemm
 * openblas,onednn --dim 64,128 --precision fp32,bf16 --seconds 24`
 * (bench/records/probe-bf16-p2.json; "bf16 in the model"). */
static void default_rates(ra_profile *p)
{
    static const double dot[2][2][2][PROFILE_CLASSES] = {
        /* fp32; openblas: D = 64, 128; full, masked, band */
        {{{76.4e9, 70.7e9, 42.3e9}, {75.9e9, 77.0e9, 47.0e9}},
         /* onednn */
         {{138.3e9, 113.7e9, 83.7e9}, {132.2e9, 137.9e9, 61.7e9}}},
        /* bf16; openblas (emulated at fp32 speed, plus the rounding) */
        {{{71.8e9, 63.0e9, 34.6e9}, {71.1e9, 64.7e9, 37.7e9}},
         /* onednn */
         {{197.6e9, 163.5e9, 91.9e9}, {186.9e9, 184.7e9, 66.5e9}}},
    };
    const ra_gemm engines[2] = {RA_GEMM_OPENBLAS, RA_GEMM_ONEDNN};
    const char *const precisions[2] = {"fp32", "bf16"};
    p->nrates = 0;
    for (int pr = 0; pr < 2; pr++)
        for (int e = 0; e < 2; e++)
            for (int d = 0; d < 2; d++)
                for (int c = 0; c < PROFILE_CLASSES; c++) {
                    profile_rate *r = &p->rate[p->nrates++];
                    *r = (profile_rate){64 << d, 64 << d, RA_SCORE_DOT,
                                        engines[e], "", (profile_class)c,
                                        dot[pr][e][d][c]};
                    snprintf(r->precision, sizeof r->precision, "%s",
                             precisions[pr]);
                }
    for (int e = 0; e < 2; e++) {
        const double full64 = dot[0][e][0][PROFILE_FULL];
        p->rate[p->nrates++] = (profile_rate){64, 64, RA_SCORE_GAUSSIAN,
                                              engines[e], "fp32",
                                              PROFILE_FULL, 0.99 * full64};
        p->rate[p->nrates++] = (profile_rate){64, 64, RA_SCORE_ADDITIVE,
                                              engines[e], "fp32",
                                              PROFILE_FULL, 14.7e9};
    }
}

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
    default_rates(p);
    /* the same probe's fixed costs: a call, a further ring step */
    p->call_seconds = 2.3e-5;
    p->step_seconds = 9.3e-5;
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

static const char *const class_names[PROFILE_CLASSES] = {"full", "masked",
                                                         "band"};

profile_class profile_class_of(const ra_params *p)
{
    return p->window ? PROFILE_BAND : p->causal ? PROFILE_MASKED
                                                : PROFILE_FULL;
}

const char *profile_class_name(profile_class c)
{
    return (unsigned)c < PROFILE_CLASSES ? class_names[c] : "unknown";
}

int profile_class_parse(const char *name, profile_class *c)
{
    for (int i = 0; i < PROFILE_CLASSES; i++)
        if (strcmp(name, class_names[i]) == 0) {
            *c = (profile_class)i;
            return 0;
        }
    return -1;
}

profile_kernel_key profile_key_of(const ra_params *p, int64_t D, int64_t Dv)
{
    profile_kernel_key k = {D, Dv, p->score, ra_gemm_resolve(p->gemm),
                            p->precision == RA_PRECISION_BF16 &&
                                    p->score != RA_SCORE_ADDITIVE
                                ? "bf16" : "fp32",
                            profile_class_of(p), 0, 0, 0, 0};
    if (p->window) {
        const ra_shape s = {.B = 1, .N = 1, .M = 1, .H = 1, .G = 1, .D = D,
                            .Dv = Dv};
        ra_params_tiles(p, &s, &k.bq, &k.bkv);
        k.keys = p->window_left + (p->causal ? 0 : p->window_right) + 1;
        k.follow = p->block_kv <= 0 &&
                   p->window_left + p->window_right + 1 <= RA_WINDOW_TILE_SPAN;
    }
    return k;
}

/* Whether rate r was measured for k's engine, precision and class (a
 * schema-2 rate: for any engine and class, in fp32). */
static int rate_matches(const profile_rate *r, const profile_kernel_key *k)
{
    const char *prec = r->precision[0] ? r->precision : "fp32";
    if (!(r->flops_per_core > 0) || strcmp(prec, k->precision) != 0)
        return 0;
    return r->gemm == RA_GEMM_AUTO || (r->gemm == k->gemm && r->cls == k->cls);
}

static double rate_of(const ra_profile *p, const profile_kernel_key *k)
{
    const profile_rate *best = NULL, *dot = NULL;
    for (int i = 0; i < p->nrates; i++) {
        const profile_rate *r = &p->rate[i];
        if (!rate_matches(r, k))
            continue;
        if (r->score == k->score && r->D == k->D && r->Dv == k->Dv)
            return r->flops_per_core;
        if (r->score == k->score &&
            (!best || llabs(r->D - k->D) < llabs(best->D - k->D)))
            best = r;
        if (r->score == RA_SCORE_DOT &&
            (!dot || llabs(r->D - k->D) < llabs(dot->D - k->D)))
            dot = r;
    }
    return best ? best->flops_per_core : dot ? dot->flops_per_core : 0.0;
}

double profile_kernel_rate(const ra_profile *p, const profile_kernel_key *k)
{
    const double band = rate_of(p, k);
    if (k->cls != PROFILE_BAND || k->keys <= 0 || !(band > 0))
        return band;
    if (k->follow) { /* the probe's window: PROFILE_BAND_KEYS on its tiles */
        ra_params probe;
        int64_t bq, bkv;
        ra_params_default(&probe);
        probe.causal = probe.window = 1;
        probe.window_left = PROFILE_BAND_KEYS - 1;
        const ra_shape s = {.B = 1, .N = 1, .M = 1, .H = 1, .G = 1,
                            .D = k->D, .Dv = k->Dv};
        ra_params_tiles(&probe, &s, &bq, &bkv);
        return band * ((double)k->keys / (double)k->bkv) /
               ((double)PROFILE_BAND_KEYS / (double)bkv);
    }
    profile_kernel_key full = *k;
    full.cls = PROFILE_FULL;
    const double r = rate_of(p, &full);
    return r > 0 ? r * (double)k->keys / (double)(k->keys + k->bq + k->bkv)
                 : band;
}

/* ---- writing ------------------------------------------------------------ */

/* Reals at 17 digits: a profile reads back exactly. */
enum { PROFILE_JSON_DIGITS = 17 };

static json_t *pj_kernel(const ra_profile *p)
{
    json_t *rates = json_array();
    for (int i = 0; i < p->nrates && rates; i++) {
        const profile_rate *r = &p->rate[i];
        if (json_array_append_new(rates, json_pack(
                "{s:I, s:I, s:s, s:s, s:s, s:s, s:f}", "D", (json_int_t)r->D,
                "Dv", (json_int_t)r->Dv, "score", ra_score_name(r->score),
                "gemm", ra_gemm_name(r->gemm), "precision",
                r->precision[0] ? r->precision : "fp32", "class",
                profile_class_name(r->cls),
                "flops_per_core", r->flops_per_core)) != 0) {
            json_decref(rates);
            rates = NULL;
        }
    }
    return rates;
}

int profile_write_json(FILE *f, const ra_profile *p)
{
    json_t *head = json_pack(
        "{s:i, s:b, s:b, s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:i, s:o, "
        "s:{s:f, s:f}, s:{s:f, s:f}}", "schema", JSON_SCHEMA,
        "measured", p->measured, "oversubscribed", p->oversubscribed,
        "date", cli_json_text(p->date),
        "version", cli_json_text(p->version), "hosts", cli_json_text(p->hosts),
        "io_dir", cli_json_text(p->io_dir), "nodes", p->nodes,
        "ranks", p->ranks, "ranks_per_node", p->ranks_per_node,
        "threads", p->threads, "kernel", pj_kernel(p),
        "intra", "latency", p->intra.latency, "bandwidth", p->intra.bandwidth,
        "inter", "latency", p->inter.latency, "bandwidth", p->inter.bandwidth);
    json_t *rates = json_pack(
        "{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:f, s:f}",
        "alltoall_intra", p->alltoall_intra,
        "alltoall_inter", p->alltoall_inter,
        "allgather_intra", p->allgather_intra,
        "allgather_inter", p->allgather_inter,
        "reduce_scatter_intra", p->reduce_scatter_intra,
        "reduce_scatter_inter", p->reduce_scatter_inter,
        "io_read", p->io_read, "io_write", p->io_write,
        "mem_per_node", (json_int_t)p->mem_per_node,
        "call_seconds", p->call_seconds, "step_seconds", p->step_seconds);
    return cli_json_dump(f, cli_json_merge(head, rates), PROFILE_JSON_DIGITS);
}

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
    {"schema", JK_INT, 0, 0, JSON_SCHEMA_OLDEST, JSON_SCHEMA},
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
    const profile_kernel_key *k = &need->key;
    if (!rate_ok(need->core_rate)) {
        snprintf(why, n, "key 'kernel': no measured rate for the %s score "
                 "(D = %lld, Dv = %lld) and no dot rate to stand in, on the "
                 "%s engine in %s on %s tiles", ra_score_name(k->score),
                 (long long)k->D, (long long)k->Dv, ra_gemm_name(k->gemm),
                 k->precision, profile_class_name(k->cls));
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
