/* watchdog.h: the backstop of the stall watchdog (docs/RELIABILITY.md,
 * class 5, hangs). The library watches its own transfers
 * (params->stall_timeout); this thread watches the phases around and
 * inside them that it cannot: the set-up's collectives, the collective
 * read and write, the library's own set-up inside a pass. When this rank
 * stays in one phase with no sign of progress for longer than the phase
 * allows, it prints one `ringattn:` line naming the rank and the phase,
 * removes the temporary outputs and exits with status 1; mpirun then ends
 * the other ranks, a stopped one included. */
#ifndef RA_WATCHDOG_H
#define RA_WATCHDOG_H

#include <stddef.h>

#include "cli.h"

/* What a derived stall timeout rests on (issue 39, class 9): the pass
 * that runs and its predicted time on this job, from the profile the run
 * was given. */
typedef struct {
    const char *pass;    /* "forward" or "backward" */
    double seconds;      /* its predicted seconds (comm/perf/model.c) */
    int beats;           /* signs of progress over it (its steps; 1 for a
                            strategy without steps) */
    const char *profile; /* the profile file; NULL: the built-in one */
} cli_stall_basis;

/* The stall timeout of a pass: given (not NaN: --stall-timeout, any value,
 * 0 included) as it is; else a margin of many predicted gaps between
 * beats (a machine loaded several times over, a prediction well off),
 * within a floor and a cap (watchdog.c). how (len bytes) says which, and
 * from what, for the parameter table and a stall's message. Pure. */
double cli_stall_timeout(double given, const cli_stall_basis *b, char *how,
                         size_t len);

/* Enters `phase` (a static string such as "the write of the output"):
 * from now on this rank must beat (cli_watchdog_beat) or enter the next
 * phase within timeout + extra seconds. timeout 0 or phase NULL: nothing
 * is watched. The first call with a timeout starts the thread. */
void cli_watchdog_phase(const cli_ctx *ctx, const char *phase,
                        double timeout, double extra);

/* Watches MPI's start-up (MPI_Init), before any rank number is known
 * (the launcher's environment gives it, else 0), for STALL_INIT seconds:
 * a rank stopped while the others wait in MPI_Init ends the job too. */
void cli_watchdog_start_mpi(void);

/* The phrase (how the timeout was found; NULL: none) that a stall's
 * message of the watched phases ends with. */
void cli_watchdog_explain(const char *how);

/* A sign of progress in the current phase (a pass's step). */
void cli_watchdog_beat(void);

#endif /* RA_WATCHDOG_H */
