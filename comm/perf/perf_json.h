/* perf_json.h: the values of the JSON files the planning unit writes
 * (profiles, bench's and plan's rows) and the command line's --json
 * summaries, made with jansson (perf_json.c). Numbers keep the precision
 * the tables print them with; every value is finite (JSON has no NaN). */
#ifndef RA_PERF_JSON_H
#define RA_PERF_JSON_H

#include <stdio.h>

#include <jansson.h>

/* JSON values, NULL when out of memory: x as the table prints it with fmt
 * ("%.6e"), a count (an integer while it is exact), a text (bytes that are
 * not UTF-8 become '?'; NULL is null). Non-finite numbers are 0. */
json_t *perf_json_fixed(double x, const char *fmt);
json_t *perf_json_count(double x);
json_t *perf_json_text(const char *s);
/* A fixed-point x / of, or null when x is not a measured figure (x or of
 * not above 0). */
json_t *perf_json_measured(double x, double of, const char *fmt);
/* The keys of object b added to object a, b released: a, or NULL (a
 * released too) when either is NULL or out of memory. */
json_t *perf_json_merge(json_t *a, json_t *b);
/* v appended to the array all (v released): all, or NULL (all released)
 * when either is NULL or out of memory. */
json_t *perf_json_append(json_t *all, json_t *v);
/* Writes v (NULL: failed to build) to f, indented, reals with precision
 * significant digits, then releases v; 0, or -1 when a write failed. */
int perf_json_dump(FILE *f, json_t *v, int precision);

#endif /* RA_PERF_JSON_H */
