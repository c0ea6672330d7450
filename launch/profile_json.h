/* profile_json.h: machine profiles (comm/profile.h) as JSON files. `ringattn
 * probe` writes them; `ringattn plan` and `--strategy auto` read them. */
#ifndef RA_PROFILE_JSON_H
#define RA_PROFILE_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "profile.h"

/* Reads a profile written by profile_write_json (any key order and white
 * space); 0, or -1 with a one-line reason naming the file and the key. */
int profile_read_json(const char *path, ra_profile *p, char *err, size_t n);

/* 0, or -1 when a write failed (errno set). */
int profile_write_json(FILE *f, const ra_profile *p);

#endif /* RA_PROFILE_JSON_H */
