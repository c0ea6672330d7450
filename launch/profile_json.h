/* profile_json.h: machine profiles (comm/profile.h) as JSON files. `ringattn
 * probe` writes them; `ringattn plan` and `--strategy auto` read them. */
#ifndef RA_PROFILE_JSON_H
#define RA_PROFILE_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "profile.h"

/* This machine, not probed: measured = 0 and rates from the figures in
 * docs/PERFORMANCE.md. */
void profile_default(ra_profile *p);

/* Reads a profile written by profile_write_json (any key order and white
 * space); 0, or -1 with a one-line reason naming the file and the key. */
int profile_read_json(const char *path, ra_profile *p, char *err, size_t n);

/* 0, or -1 when a write failed (errno set). */
int profile_write_json(FILE *f, const ra_profile *p);

/* The kernel's FLOP/s per core for a head shape and score: the probed entry
 * of that shape, else the nearest D of the same score, else the dot's. */
double profile_kernel_rate(const ra_profile *p, int64_t D, int64_t Dv,
                           ra_score score);

/* What one prediction needs of a profile: its allocation, the head shape
 * and score, the kernel rate in use (the profile's profile_kernel_rate, or
 * a rate given in its place) and whether I/O is timed. */
typedef struct {
    int P, nodes;
    ra_score score;
    int64_t D, Dv;
    double core_rate;
    int with_io;
} profile_need;

/* 0 when every rate the model divides by for need is positive, normal and
 * finite (a zero counts where the model has a fall-back for it); else -1
 * and one line, "key 'FIELD': problem", naming the first missing rate. */
int profile_usable(const ra_profile *p, const profile_need *need, char *why,
                   size_t n);

#endif /* RA_PROFILE_JSON_H */
