/* platform.c: a small reader of SimGrid platform files for `ringattn plan
 * --platform`: the subset the shipped files (launch/sim/platforms/) and
 * SimGrid's <cluster> element use. No XML library: the file is a
 * <platform> of <zone>s holding one <cluster>, with comments, a prolog and
 * <prop>/<config> elements the model has no use for. Anything else is
 * refused with one line naming the file and the problem. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform.h"

enum { PLATFORM_MAX_BYTES = 1 << 20, PLATFORM_MAX_ATTRS = 32 };

typedef struct {
    const char *path;
    char *err;
    size_t n;
} reader;

/* One element's start tag: its name and attributes (views into the text,
 * the values NUL-terminated in place). */
typedef struct {
    char name[PLATFORM_TEXT];
    int nattr;
    const char *key[PLATFORM_MAX_ATTRS], *value[PLATFORM_MAX_ATTRS];
} tag;

static int fail(const reader *r, const char *fmt, ...)
{
    int k = snprintf(r->err, r->n, "--platform %s: ", r->path);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < r->n)
        vsnprintf(r->err + k, r->n - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *attr(const tag *t, const char *key)
{
    for (int i = 0; i < t->nattr; i++)
        if (strcmp(t->key[i], key) == 0)
            return t->value[i];
    return NULL;
}

/* A unit of SimGrid's and what one of it is in bytes/s or seconds; ""
 * is the bare number. */
typedef struct {
    const char *suffix;
    double factor;
} unit;

/* "12.5GBps", "100Gbps", "1us": the number times its unit's factor
 * (units: ended by a NULL suffix). */
static int quantity(const reader *r, const tag *t, const char *key,
                    const unit *units, const char *like, double *v)
{
    const char *text = attr(t, key);
    if (!text)
        return fail(r, "<%s>: no %s", t->name, key);
    char *end = NULL;
    errno = 0;
    const double x = strtod(text, &end);
    for (int i = 0; units[i].suffix && end != text && errno == 0; i++)
        if (strcmp(end, units[i].suffix) == 0 && x > 0) {
            *v = x * units[i].factor;
            return 0;
        }
    return fail(r, "<%s>: %s '%s' is not a positive %s", t->name, key, text,
                like);
}

static int rate(const reader *r, const tag *t, const char *key, double *v)
{
    static const unit u[] = {{"Bps", 1.0},      {"bps", 0.125},
                             {"kBps", 1e3},     {"KBps", 1e3},
                             {"kbps", 125.0},   {"Kbps", 125.0},
                             {"MBps", 1e6},     {"Mbps", 1.25e5},
                             {"GBps", 1e9},     {"Gbps", 1.25e8},
                             {"TBps", 1e12},    {"Tbps", 1.25e11},
                             {"KiBps", 0x1p10}, {"Kibps", 0x1p7},
                             {"MiBps", 0x1p20}, {"Mibps", 0x1p17},
                             {"GiBps", 0x1p30}, {"Gibps", 0x1p27},
                             {"TiBps", 0x1p40}, {"Tibps", 0x1p37},
                             {"", 1.0},         {NULL, 0}};
    return quantity(r, t, key, u, "rate like 12.5GBps", v);
}

static int duration(const reader *r, const tag *t, const char *key, double *v)
{
    static const unit u[] = {{"s", 1.0},   {"ms", 1e-3},  {"us", 1e-6},
                             {"ns", 1e-9}, {"ps", 1e-12}, {"", 1.0},
                             {NULL, 0}};
    return quantity(r, t, key, u, "time like 1us", v);
}

/* The ids of a radical ("0-1023" or "0-3,8,10-11"), counted. */
static int radical_count(const reader *r, const char *text, int *count)
{
    long total = 0;
    const char *p = text;
    while (p && *p) {
        char *end = NULL;
        const long a = strtol(p, &end, 10);
        long b = a;
        if (end != p && *end == '-')
            b = strtol(p = end + 1, &end, 10);
        if (end == p || a < 0 || b < a || (*end && *end != ','))
            return fail(r, "<cluster>: radical '%s' is not like 0-1023", text);
        total += b - a + 1;
        p = *end ? end + 1 : NULL;
    }
    if (total < 1 || total > 1 << 24)
        return fail(r, "<cluster>: radical '%s' names %ld nodes", text, total);
    *count = (int)total;
    return 0;
}

/* The start or end tag at p (just past its '<') into t; the text after its
 * '>', or NULL (reason set). *end: 1 for </name>, *empty: 1 for <name/>. */
static char *tag_parse(const reader *r, char *p, tag *t, int *end, int *empty)
{
    *end = *p == '/';
    p += *end;
    size_t k = 0;
    while (isalnum((unsigned char)p[k]) || p[k] == '_' || p[k] == '-')
        k++;
    if (k == 0 || k >= sizeof t->name)
        return fail(r, "a tag without a name near '%.12s'", p), NULL;
    memcpy(t->name, p, k);
    t->name[k] = '\0';
    t->nattr = 0;
    for (p += k;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '>' || (p[0] == '/' && p[1] == '>')) {
            *empty = *p == '/';
            return p + 1 + *empty;
        }
        char *key = p;
        while (isalnum((unsigned char)*p) || *p == '_' || *p == '-')
            p++;
        char *eq = p;
        const char q = p[0] == '=' ? p[1] : '\0';
        char *close = q == '"' || q == '\'' ? strchr(p + 2, q) : NULL;
        if (eq == key || !close || *end || t->nattr == PLATFORM_MAX_ATTRS)
            return fail(r, "<%s>: malformed attribute near '%.12s'", t->name,
                        key),
                   NULL;
        *eq = '\0';
        *close = '\0';
        t->key[t->nattr] = key;
        t->value[t->nattr++] = p + 2;
        p = close + 1;
    }
}

/* Past a comment, the prolog or a DOCTYPE at p (at its '<'); NULL when it
 * does not end. */
static char *skip_markup(char *p)
{
    const char *stop = strncmp(p, "<!--", 4) == 0 ? "-->"
                       : p[1] == '?'              ? "?>"
                                                  : ">";
    char *e = strstr(p + 2, stop);
    return e ? e + strlen(stop) : NULL;
}

/* What the model needs of <cluster>: SimGrid's defaults where it has
 * them (one core, split-duplex links, a flat topology). */
static int cluster_read(const reader *r, const tag *t, ra_platform *pl)
{
    static const char *const topo[] = {"FLAT", "FAT_TREE", "TORUS", "DRAGONFLY",
                                       NULL};
    const char *radical = attr(t, "radical"), *core = attr(t, "core");
    const char *policy = attr(t, "sharing_policy");
    const char *kind = attr(t, "topology") ? attr(t, "topology") : "FLAT";
    snprintf(pl->id, sizeof pl->id, "%s", attr(t, "id") ? attr(t, "id") : "");
    char *end = NULL;
    const long c = core ? strtol(core, &end, 10) : 1;
    if (!radical)
        return fail(r, "<cluster>: no radical (the node ids, like 0-1023)");
    if (radical_count(r, radical, &pl->nodes))
        return -1;
    if (c < 1 || c > 1 << 20 || (core && *end))
        return fail(r, "<cluster>: core '%s' is not a count", core);
    pl->cores = (int)c;
    if (policy && strcmp(policy, "SHARED") && strcmp(policy, "SPLITDUPLEX") &&
        strcmp(policy, "FATPIPE"))
        return fail(r,
                    "<cluster>: sharing_policy '%s' is not SHARED, "
                    "SPLITDUPLEX or FATPIPE",
                    policy);
    pl->shared = policy && strcmp(policy, "SHARED") == 0;
    int known = 0;
    for (int i = 0; topo[i]; i++)
        known |= strcmp(kind, topo[i]) == 0;
    if (!known)
        return fail(r,
                    "<cluster>: topology '%s' is not FLAT, FAT_TREE, "
                    "TORUS or DRAGONFLY",
                    kind);
    snprintf(pl->topology, sizeof pl->topology, "%s", kind);
    if (rate(r, t, "bw", &pl->bandwidth) || duration(r, t, "lat", &pl->latency))
        return -1;
    if (attr(t, "bb_bw") && (rate(r, t, "bb_bw", &pl->backbone_bandwidth) ||
                             duration(r, t, "bb_lat", &pl->backbone_latency)))
        return -1;
    return 0;
}

/* Whether plan reads an element of this name. */
static int element_known(const char *name)
{
    static const char *const ok[] = {"platform", "zone",   "AS", "cluster",
                                     "prop",     "config", NULL};
    for (int i = 0; ok[i]; i++)
        if (strcmp(name, ok[i]) == 0)
            return 1;
    return 0;
}

/* Start and end tags must nest; the root is <platform>; one <cluster>. */
static int platform_parse(const reader *r, char *text, ra_platform *pl)
{
    char open[16][PLATFORM_TEXT];
    int depth = 0, elements = 0, clusters = 0;
    for (char *p = strchr(text, '<'); p; p = strchr(p, '<')) {
        if (p[1] == '!' || p[1] == '?') {
            if (!(p = skip_markup(p)))
                return fail(r, "a comment or declaration does not end");
            continue;
        }
        tag t;
        int end = 0, empty = 0;
        if (!(p = tag_parse(r, p + 1, &t, &end, &empty)))
            return -1;
        if (end && depth == 0)
            return fail(r, "</%s> closes nothing open", t.name);
        if (end && strcmp(open[depth - 1], t.name))
            return fail(r, "</%s> where <%s> is open", t.name, open[depth - 1]);
        depth -= end;
        if (end)
            continue;
        if (elements++ == 0 ? strcmp(t.name, "platform") != 0 : depth == 0)
            return fail(r, "the root is <%s>, not one <platform>", t.name);
        if (!element_known(t.name))
            return fail(r,
                        "<%s>: plan reads platforms of one <cluster> "
                        "(as in launch/sim/platforms/)",
                        t.name);
        if (strcmp(t.name, "cluster") == 0 && clusters++ > 0)
            return fail(r, "more than one <cluster>");
        if (strcmp(t.name, "cluster") == 0 && cluster_read(r, &t, pl))
            return -1;
        if (!empty && depth == 16)
            return fail(r, "elements nest too deep");
        if (!empty)
            snprintf(open[depth++], PLATFORM_TEXT, "%s", t.name);
    }
    if (depth > 0)
        return fail(r, "<%s> is not closed", open[depth - 1]);
    if (elements == 0)
        return fail(r, "no <platform> (not a SimGrid platform file)");
    return clusters == 1 ? 0 : fail(r, "no <cluster>");
}

int platform_read(const char *path, ra_platform *pl, char *err, size_t n)
{
    const reader r = {path, err, n};
    memset(pl, 0, sizeof *pl);
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(&r, "%s", strerror(errno));
    char *text = malloc(PLATFORM_MAX_BYTES + 1);
    const size_t got = text ? fread(text, 1, PLATFORM_MAX_BYTES + 1, f) : 0;
    const int unread = text && ferror(f);
    fclose(f);
    int rc = -1;
    if (!text)
        fail(&r, "out of memory");
    else if (unread || got > PLATFORM_MAX_BYTES)
        fail(&r, unread ? "cannot be read" : "larger than 1 MiB");
    else {
        text[got] = '\0';
        rc = strlen(text) == got ? platform_parse(&r, text, pl)
                                 : fail(&r, "not text (a NUL byte)");
    }
    free(text);
    return rc;
}

/* SMPI's default network model (its smpi/bw-factor and smpi/lat-factor
 * for messages of 64 KiB and more, as a ring step's blocks are), which
 * ringattn-sim runs: a flow reaches this share of its route's bandwidth,
 * and pays this many times its route's latency. */
#define SMPI_BW_FACTOR 0.940694
#define SMPI_LAT_FACTOR 11.6436

void platform_link(const ra_platform *pl, ra_profile *pf)
{
    /* the route between nodes i and i+1: up to their switch and down (a
     * torus: the one link between them), and the backbone of a flat
     * cluster that has one, which all those routes share (the model
     * divides it among the nodes that send at once) */
    const int torus = strcmp(pl->topology, "TORUS") == 0;
    const int backbone =
        pl->backbone_bandwidth > 0 && strcmp(pl->topology, "FLAT") == 0;
    pf->inter = (profile_link){
        .latency = SMPI_LAT_FACTOR * (pl->latency * (torus ? 1 : 2) +
                                      (backbone ? pl->backbone_latency : 0)),
        .bandwidth = SMPI_BW_FACTOR * pl->bandwidth / (pl->shared ? 2 : 1)};
    pf->backbone = backbone ? SMPI_BW_FACTOR * pl->backbone_bandwidth : 0.0;
}
