/* sim_run.h: one configuration of ringattn-sim run on the simulated
 * cluster (sim_run.c; comm/sim/, the simulated build's alone), as
 * `ringattn bench` runs one on a real one (comm/perf/bench_run.c): each
 * rank makes its slices in memory (random per global index, as bench, so
 * the same at every P), calls ra_call_forward (and ra_call_backward) on
 * the node-ordered communicator and records the passes as bench records
 * its own, in simulated seconds. Exact mode checks the result against the
 * fp64 reference; at scale the hooks inject each kernel call's time
 * (sim_hooks.h). The command line (launch/sim/) parses, echoes and
 * prints. */
#ifndef RA_SIM_RUN_H
#define RA_SIM_RUN_H

#include <mpi.h>
#include <stdint.h>

#include "bench_measure.h"
#include "internal.h"
#include "profile.h"

/* exact: the kernels run for real and the output is checked against fp64;
 * scale: each kernel call's time is injected, large buffers are folded. */
typedef enum { SIM_EXACT = 0, SIM_SCALE = 1 } sim_mode;

/* What a run takes (the command line fills it; the library checks the
 * shape and the options). */
typedef struct {
    ra_shape s;
    ra_params p;
    sim_mode mode;
    int backward;
    int node_aware; /* ring order node (1) or as launched (0) */
    int64_t reps, seed, check_rows;
    double rate;         /* kernel FLOP/s per core; 0: the profile's */
    const char *profile; /* a probe's JSON; NULL: the built-in profile */
} sim_config;

/* The run's communicator and what was set up on it. */
typedef struct {
    MPI_Comm comm; /* MPI_COMM_WORLD in ring order */
    int rank, P;
    ra_nodes nodes;
    ra_layout layout;
    ra_profile pf;
    double rate; /* kernel FLOP/s per core in use */
} sim_ctx;

/* The communicator, the layout, the strategy's refusals (the library's),
 * what the hooks inject: the kernel rate of the run's kernel key in c's
 * profile (or c->rate), the model's per-pair cost and fixed step cost.
 * The strategy's and the cost's refusals are agreed (the same status on
 * every rank). Collective over MPI_COMM_WORLD. */
ra_status sim_setup(sim_ctx *x, const sim_config *c);

/* Runs c's passes and, in exact mode, its check into *res (bench's row
 * without what a simulation cannot measure: the yardsticks, the comm-only
 * ring and the RSS are 0; max_rel_error NaN when unchecked or only
 * checked finite), and the slowest rank's injected kernel seconds into
 * *injected. RA_ERR_MPI: a stalled peer, which the other ranks may not
 * learn of (the caller ends the job); otherwise the same status on every
 * rank. Collective over x->comm. */
ra_status sim_run(const sim_ctx *x, const sim_config *c, bench_result *res,
                  double *injected);

/* After sim_run: frees the hooks' state and x->comm once every transfer
 * has ended. Collective over x->comm. */
void sim_close(sim_ctx *x);

#endif /* RA_SIM_RUN_H */
