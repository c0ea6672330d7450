/* bench_run.h: one configuration of `ringattn bench` (and bench
 * --backward) measured into its row (bench_run.c): inputs and masks made
 * from the seed, warm-up and timed passes with a barrier before each, the
 * row's counts, rates, yardsticks and verdict. The command line allocates
 * the operands (against its memory limit) and prints the row. */
#ifndef RA_BENCH_RUN_H
#define RA_BENCH_RUN_H

#include "bench_check.h"
#include "bench_measure.h"

/* A rank's operands, the caller's, under the layout of the run (its
 * slices qs, ks): q (B, n, H, D)  k (B, m, G, Dk)  v (B, m, G, Dv)
 * o (B, n, H, Dv)  lse (B, H, n); a backward pass also takes dout (as o),
 * the gradients dq, dk, dv (as q, k, v) and dw (the additive score's
 * weights', or NULL). */
typedef struct {
    ra_slice qs, ks;
    float *q, *k, *v, *o, *lse;
    float *dout, *dq, *dk, *dv;
    ra_additive_grads *dw;
} bench_operands;

/* The seed's random inputs in x's slices, as `ringattn gen` writes them:
 * q, k, v, and dout for a backward pass (bench and ringattn-sim). */
void bench_inputs_make(uint64_t seed, const ra_shape *s, int backward,
                       const bench_operands *x);

/* Where the ranks run, as a row states it. */
typedef struct {
    int nodes, ranks_per_node; /* ranks_per_node: the most on any node */
    int node_aware;            /* the ring is ordered node by node */
} bench_place;

/* One configuration: problem s under gen.p (its layout resolved), inputs
 * and masks from gen (a backward pass takes no masks); naive: the
 * materialising baseline in place of the call; backward: ra_backward
 * after one forward pass for o and lse; warmup untimed and reps timed
 * passes; the run's yardsticks (the products-only rate measured too
 * unless no_yardsticks). plain: with score features or sinks in gen.p,
 * the same configuration without them is measured after it, on the same
 * operands, into *plain (both rates in one run); NULL: not. */
typedef struct {
    const ra_shape *s;
    bench_gen gen;
    int64_t warmup, reps;
    int naive, backward, no_yardsticks;
    const bench_yard *yard;
    bench_place place;
    bench_result *plain;
} bench_config;

/* Measures c on x into *res (every field; a backward row's verdict is
 * PASS when every gradient is finite, its rel_err 0). RA_ERR_MPI: a
 * stalled ring, which the other ranks may not learn of (the caller ends
 * the job); otherwise every rank returns the same status, RA_ERR_NOMEM
 * or the call's. Collective. */
ra_status bench_config_run(MPI_Comm comm, const bench_config *c,
                           const bench_operands *x, bench_result *res);

/* What every row of c states alike into r (the rest zeroed): the
 * problem, ranks, threads, mode, tiles, the times of the recorded passes
 * over the ranks (bench_times), where the ranks run, the steps and the
 * random masks. Collective (bench and ringattn-sim). */
void bench_row_begin(MPI_Comm comm, const bench_config *c, bench_reps *reps,
                     bench_result *r);
/* The verdict of c's pass on x into r (pass, max_rel_error,
 * max_lse_error): a forward's sampled fp64 check (bench_check_output), a
 * backward's finite gradients. Collective (bench and ringattn-sim). */
void bench_row_verdict(MPI_Comm comm, const bench_config *c,
                       const bench_operands *x, const bench_masks *bm,
                       bench_result *r);

/* Whether strategy p->exec.strategy takes problem s on P ranks under
 * `--strategy all` (ulysses needs P <= H; the additive score runs on the
 * ring only). Allgather's memory limit is the library's to judge: it
 * refuses with a message. */
int bench_strategy_applies(const ra_params *p, const ra_shape *s, int P);

#endif /* RA_BENCH_RUN_H */
