/* placement.h: whether a rank's threads have cores of their own. */
#ifndef RA_PLACEMENT_H
#define RA_PLACEMENT_H

#include <stdint.h>

#include "cli.h"

/* The number of CPUs that a team of `threads` OpenMP threads may run on:
 * the union of each thread's own affinity mask, asked from inside a
 * parallel region (so that OMP_PROC_BIND's binding of each thread to its
 * place counts); 0 when a mask cannot be read. */
int cli_thread_cpus(int threads);

/* Collective over ctx->comm: when the threads of some rank have fewer CPUs
 * to run on than there are threads (mpirun binds each rank to one core
 * unless told otherwise), rank 0 prints one warning line naming the first
 * such rank and how to place ranks and threads. The run goes on. */
void cli_placement_warn(const cli_ctx *ctx, int threads);

/* The machine this rank runs on, as an id that fake nodes (namespaces of
 * one machine) share: a hash of the kernel's boot id, else of the host
 * name. */
uint64_t cli_machine_id(void);

/* Collective over ctx->comm: 1 when some machine runs more ranks times
 * `threads` than it has cores (fake nodes share their machine's), with the
 * first such machine's load and cores; else 0 with this rank's. The same
 * on every rank. */
int cli_oversubscribed(const cli_ctx *ctx, int threads, int *load,
                       int *cores);

/* cli_oversubscribed, and when so, rank 0 prints one warning line ending
 * with `what` (what the oversubscription does to the command's numbers).
 * Returns the verdict on every rank. */
int cli_oversubscribed_warn(const cli_ctx *ctx, int threads,
                            const char *what);

#endif
