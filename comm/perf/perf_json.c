/* perf_json.c: the JSON values of perf_json.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf_json.h"

/* Integers up to this size are exact in a double. */
#define JSON_EXACT_INT 0x1p53

json_t *perf_json_fixed(double x, const char *fmt)
{
    char text[64];
    snprintf(text, sizeof text, fmt, isfinite(x) ? x : 0.0);
    return json_real(strtod(text, NULL));
}

json_t *perf_json_count(double x)
{
    const double r = isfinite(x) ? round(x) : 0.0;
    return fabs(r) < JSON_EXACT_INT ? json_integer((json_int_t)r)
                                    : json_real(r);
}

json_t *perf_json_text(const char *s)
{
    json_t *v = s ? json_string(s) : json_null();
    if (v)
        return v;
    /* not UTF-8 (a file name in another encoding): its other bytes as '?' */
    char *copy = strdup(s);
    if (!copy)
        return NULL;
    for (unsigned char *c = (unsigned char *)copy; *c; c++)
        *c = *c < 0x80 ? *c : '?';
    v = json_string(copy);
    free(copy);
    return v;
}

json_t *perf_json_measured(double x, double of, const char *fmt)
{
    return x > 0 && of > 0 ? perf_json_fixed(x / of, fmt) : json_null();
}

int perf_json_dump(FILE *f, json_t *v, int precision)
{
    const size_t flags = JSON_INDENT(2) | JSON_REAL_PRECISION(precision);
    const int rc = v && json_dumpf(v, f, flags) == 0 && fputc('\n', f) != EOF
                       ? 0 : -1;
    json_decref(v);
    return rc;
}

json_t *perf_json_merge(json_t *a, json_t *b)
{
    if (json_object_update_new(a, b) == 0)
        return a;
    json_decref(a);
    return NULL;
}

json_t *perf_json_append(json_t *all, json_t *v)
{
    if (!all)
        json_decref(v);
    else if (json_array_append_new(all, v) == 0)
        return all;
    json_decref(all);
    return NULL;
}
