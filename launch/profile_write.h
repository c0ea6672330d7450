/* profile_write.h: `ringattn probe`'s machine profile written as JSON
 * (profile_write.c), which comm/perf/profile_json.h reads back. */
#ifndef RA_PROFILE_WRITE_H
#define RA_PROFILE_WRITE_H

#include <stdio.h>

#include "profile.h"

/* 0, or -1 when a write failed (errno set). */
int profile_write_json(FILE *f, const ra_profile *p);

#endif /* RA_PROFILE_WRITE_H */
