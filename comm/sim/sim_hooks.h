/* sim_hooks.h: the simulated build's seam (comm/sim/, compiled into
 * ringattn-sim alone): what runs where comm/ calls the kernels, the block
 * allocator, its non-blocking collectives and its polls (sim_hooks.c,
 * sim_collectives.c, sim_waits.c; a link-time seam, --wrap in
 * launch/sim/sim.cmake: docs/DESIGN.md, "The simulated build"), and the
 * driver's tensors, folded at scale. No file of the call path includes
 * this header (comm/perf/layering.cmake refuses it). */
#ifndef RA_SIM_HOOKS_H
#define RA_SIM_HOOKS_H

#include <stddef.h>

#include "internal.h"

/* What the hooks inject at scale: seconds per visible (query, key) pair
 * and head of a forward kernel call (the backward's is times
 * SIM_BWD_FACTOR, as ra_backward_flops counts), and the fixed cost of each
 * kernel call after a call's first (the profile's step_seconds). */
typedef struct {
    int at_scale;
    double pair_head_seconds;
    double step_seconds;
} sim_cost;

#define SIM_BWD_FACTOR 2.5

/* Sets what the hooks do; the same on every rank, before the first call.
 * RA_ERR_NOMEM when their per-rank state cannot be allocated. */
ra_status sim_hooks_set(const sim_cost *cost);
/* Marks the start of a call on this rank (its first kernel call carries no
 * step cost). */
void sim_hooks_call_begin(void);
/* Seconds this rank's hooks injected since the process started. */
double sim_hooks_injected(void);
/* Whether the hooks run at scale (sim_hooks_set's cost.at_scale). */
int sim_hooks_at_scale(void);
/* Frees the hooks' state (and sim_waits.c's); once, by one rank, after
 * every transfer ended (all ranks past a barrier). */
void sim_hooks_release(void);
void sim_waits_release(void);

/* The driver's tensor slot (0 .. SIM_SLOTS - 1) of bytes: private and
 * zeroed in exact mode; folded at scale, one block per slot shared by
 * every rank (contents meaningless; counted once in the process's memory),
 * kept until sim_hooks_release. sim_buffer_free takes either. */
enum { SIM_SLOTS = 9 };
void *sim_buffer_alloc(size_t bytes, int slot, int folded);
void sim_buffer_free(void *p, int folded);

#endif /* RA_SIM_HOOKS_H */
