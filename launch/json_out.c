/* json_out.c: the values the command line's JSON files hold, made with
 * jansson, and the one way they are written. Numbers keep the precision
 * the tables print them with; every value is finite (JSON has no NaN). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Integers up to this size are exact in a double. */
#define JSON_EXACT_INT 0x1p53

json_t *cli_json_fixed(double x, const char *fmt)
{
    char text[64];
    snprintf(text, sizeof text, fmt, isfinite(x) ? x : 0.0);
    return json_real(strtod(text, NULL));
}

json_t *cli_json_count(double x)
{
    const double r = isfinite(x) ? round(x) : 0.0;
    return fabs(r) < JSON_EXACT_INT ? json_integer((json_int_t)r)
                                    : json_real(r);
}

json_t *cli_json_text(const char *s)
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

int cli_json_dump(FILE *f, json_t *v, int precision)
{
    const size_t flags = JSON_INDENT(2) | JSON_REAL_PRECISION(precision);
    const int rc = v && json_dumpf(v, f, flags) == 0 && fputc('\n', f) != EOF
                       ? 0 : -1;
    json_decref(v);
    return rc;
}

json_t *cli_json_merge(json_t *a, json_t *b)
{
    if (json_object_update_new(a, b) == 0)
        return a;
    json_decref(a);
    return NULL;
}
