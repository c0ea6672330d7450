/* sim.h: ringattn-sim, the engine's own comm/ and engine/ run under
 * SimGrid's SMPI on a simulated platform (docs/SIMULATION.md). The driver
 * (sim_main.c) makes in-memory inputs and calls ra_call_forward or
 * ra_call_backward; the hooks (sim_hooks.c) sit where comm/ calls the
 * kernels and the block allocator (a link-time seam: docs/DESIGN.md, "The
 * simulated build"). */
#ifndef RA_SIM_H
#define RA_SIM_H

#include <mpi.h>
#include <stdint.h>

#include "bench_measure.h"
#include "internal.h"

/* exact: the kernels run for real and the output is checked against fp64;
 * scale: each kernel call's time is injected, large buffers are folded. */
typedef enum { SIM_EXACT = 0, SIM_SCALE = 1 } sim_mode;

/* Everything a run takes, filled by sim_options_parse. */
typedef struct {
    ra_shape s;
    ra_params p;
    sim_mode mode;
    int backward;
    int node_aware; /* --ring-order node (default) or mpirun */
    int64_t reps, seed, check_rows;
    double rate;          /* --rate: kernel FLOP/s per core; 0: profile's */
    const char *profile;  /* --profile: a probe's JSON; NULL: built-in */
    const char *platform; /* --platform: the file, echoed only */
    const char *json;     /* --json: bench's row (and the sim's keys) */
} sim_opts;

/* Fills o from argv (defaults first); 0, 1 for --help, or 2 with one line
 * in why ("--option: problem"). */
int sim_options_parse(int argc, char **argv, sim_opts *o, char *why, size_t n);
/* The options and their help, on stdout. */
void sim_options_usage(void);

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

/* What a row says beyond bench's: how it was simulated. */
typedef struct {
    const char *mode;     /* "exact", "scale" */
    const char *platform; /* the file smpirun ran on */
    const char *verdict;  /* PASS, FAIL, PASS(finite), unchecked */
    double injected;      /* seconds of kernel time injected, slowest rank */
} sim_row;

/* --json's folder is writable (rank 0 checks; one line in why). */
int sim_json_check(const char *path, char *why, size_t n);
/* Writes bench's row of r (comm/perf/bench_rows.c) with the keys of sim
 * ("simulated": true, "sim_mode", "platform", "injected_s") and its
 * verdict into path as a one-row array, as `bench --json` writes; 0, or -1
 * with errno set. Rank 0. */
int sim_json_write(const char *path, const bench_result *r, const sim_row *sim);

/* Exact mode's fp64 check of a backward pass (sim_check_bwd.c): this
 * rank's dq, dk, dv slices (B, n, H, D), (B, m, G, D), (B, m, G, Dv) of
 * the seed's inputs, gathered on rank 0 and compared with the reference
 * gradients; the largest relative Frobenius error of the three in *err
 * (INFINITY when the check could not run) on every rank; 1 when below
 * 1e-5. Dot score, fp32 products and wire. Collective over comm. */
typedef struct {
    MPI_Comm comm;
    int rank, P;
    const ra_shape *s;
    const ra_params *p;
    ra_layout layout;
    uint64_t seed;
    const float *dq, *dk, *dv;
} sim_bwd_check;
int sim_check_backward(const sim_bwd_check *c, double *err);

#endif /* RA_SIM_H */
