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

#include "cli.h"

/* The default stall timeout of a pass predicted to take `predicted`
 * seconds, reporting progress `beats` times: STALL_FACTOR gaps between
 * beats, within [STALL_FLOOR, STALL_CAP] seconds (watchdog.c). */
double cli_stall_default(double predicted, int beats);

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

/* A sign of progress in the current phase (a pass's step). */
void cli_watchdog_beat(void);

#endif /* RA_WATCHDOG_H */
