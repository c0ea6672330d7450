/* status.c: status names and the per-thread last error message. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static _Thread_local char last_error[512];

const char *ra_status_str(ra_status st)
{
    switch (st) {
    case RA_OK: return "ok";
    case RA_ERR_ARG: return "invalid argument";
    case RA_ERR_INPUT: return "invalid input";
    case RA_ERR_NOMEM: return "out of memory";
    case RA_ERR_IO: return "I/O error";
    case RA_ERR_MPI: return "MPI error";
    case RA_ERR_EXISTS: return "output exists";
    case RA_STOPPED: return "stopped at a checkpoint";
    }
    return "unknown status";
}

ra_status ra_error_set(ra_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

void ra_error_clear(void) { last_error[0] = '\0'; }

const char *ra_error_message(void)
{
    return last_error[0] ? last_error : "no error recorded";
}

int64_t ra_mul_checked(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        return -1;
    return r;
}

int64_t ra_count_checked(int n, const int64_t *f)
{
    int64_t r = 1;
    for (int i = 0; i < n && r >= 0; i++)
        r = ra_mul_checked(r, f[i]);
    return r;
}

int64_t ra_add_checked(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
        return -1;
    return r;
}
