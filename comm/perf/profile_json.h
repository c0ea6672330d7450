/* profile_json.h: machine profiles (profile.h) as JSON files, read
 * (profile_json.c) and written (profile_write.c). `ringattn probe` writes
 * them; `ringattn plan`, `--strategy auto` and ringattn-sim read them. */
#ifndef RA_PROFILE_JSON_H
#define RA_PROFILE_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "profile.h"

/* The "schema" key: the layout of the file this reader reads and the
 * writer writes. */
enum { PROFILE_JSON_SCHEMA = 3 };

/* Reads a profile written by profile_write_json (any key order and white
 * space); 0, or -1 with a one-line reason naming the file and the key. */
int profile_read_json(const char *path, ra_profile *p, char *err, size_t n);

/* Writes profile (a ra_profile, as a file's writer takes it) to f as
 * JSON; 0, or -1 when a write failed (errno set). */
int profile_write_json(FILE *f, const void *profile);

/* The profile of path (NULL: profile_default, this machine not probed);
 * RA_ERR_INPUT with the reader's one-line reason. */
ra_status profile_load(const char *path, ra_profile *p);

#endif /* RA_PROFILE_JSON_H */
