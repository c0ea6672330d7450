/* probe.h: the measurements of `ringattn probe` (probe_measure.c), each
 * one filling part of a machine profile (comm/perf/profile.h), the rates
 * it is asked for, the whole run and each rate's yardsticks
 * (probe_run.c), and the printed table (probe_text.c). */
#ifndef RA_PROBE_H
#define RA_PROBE_H

#include <mpi.h>
#include <stdio.h>

#include "profile.h"

/* The communicators a probe measures on: the ranks of each node, and one
 * rank per node (the lowest; MPI_COMM_NULL on the others). */
typedef struct {
    MPI_Comm world, node, leaders;
    int nodes, node_size;
    double share; /* seconds each measurement may take, at least 3 reps */
} probe_comms;

/* Splits comm by node (nodes: where its ranks run); RA_ERR_MPI with a
 * message otherwise. Every rank returns the same status. probe_comms_free
 * releases them. */
ra_status probe_comms_make(MPI_Comm comm, const ra_nodes *nodes, double share,
                           probe_comms *c);
void probe_comms_free(probe_comms *c);

/* The tiled forward's FLOP/s per core for rate r's head dims, score, tile
 * engine and tile class: every rank runs ra_forward_ex on its own small
 * problem of that class (full: N = 2048, no mask; masked: N = 4096,
 * causal; band: N = 4096, causal with a 512-key window), one thread, all ranks at once as in a run; the mean
 * over ranks. 0 when a rank could not allocate. Collective. */
double probe_kernel(const probe_comms *c, const profile_rate *r);

/* The fixed costs of a forward call: *call, the seconds of a one-token
 * call on each rank alone (one step, no tiles to speak of); *step, what
 * each further ring step adds, from the same call over all ranks (0 on
 * one rank). The slowest rank's. Collective. */
void probe_fixed(const probe_comms *c, double *call, double *step);

/* Point-to-point rates of ring steps (each rank sends to the next and
 * receives from the previous at once, float messages): within the nodes
 * and between node leaders; a link not measured (one rank per node, one
 * node) stays 0. The slowest link's bandwidth, the largest latency. */
void probe_links(const probe_comms *c, profile_link *intra,
                 profile_link *inter);

/* All-to-all (bytes sent per rank per second) and all-gather (received)
 * within the nodes and between node leaders; 0 where not measured. */
void probe_collectives(const probe_comms *c, ra_profile *p);

/* The physical memory of the smallest node, host names of every node
 * (comma-separated, on rank 0), the allocation's sizes. */
void probe_machine(const probe_comms *c, ra_profile *p);

/* The kernel rates probe is asked for, into p->rate (probe_ask.c): every
 * head dim of dims (D = Dv) with every score, engine and precision of the
 * comma lists scores, gemms and precisions (the library's names, each
 * once; the engine auto: RINGATTN_GEMM's, else this build's) and every
 * tile class; the additive score in fp32 only (its scores are not tile
 * products, and bf16 does not change them). RA_ERR_ARG naming the
 * option: an unknown name, an engine this build lacks, more than
 * PROFILE_MAX_RATES rates, or none. */
ra_status probe_rates_parse(ra_profile *p, const int64_t *dims, int ndims,
                            const char *scores, const char *gemms,
                            const char *precisions);

/* Every measurement but the I/O's into p, whose rates p->rate are those
 * asked for, in about seconds in all: the machine, the kernel rates, the
 * fixed costs, the links and the collectives, on the nodes of comm.
 * RA_ERR_MPI (agreed) when the ranks could not be split by node.
 * Collective. */
ra_status probe_run(MPI_Comm comm, const ra_nodes *nodes, double seconds,
                    ra_profile *p);

/* A kernel rate's three yardsticks, FLOP/s per core: the core's physical
 * peak in its precision, oneDNN's 2048^3 matmul, and its own tile
 * products without the softmax (0: not measured); the loops of the core's
 * peak (or why none). */
typedef struct {
    double core, peak, products;
    char loop_fp32[96], loop_bf16[96];
} probe_yard;

/* The yardsticks of every kernel rate of p into y[0..p->nrates), every
 * rank at once, per core (issue 44); the core's and oneDNN's once per
 * precision that a rate has. Collective. */
void probe_yardsticks(MPI_Comm comm, const ra_profile *p, probe_yard *y);

/* The profile p as a table, then with y (NULL: not measured) each
 * kernel rate beside its yardsticks. */
void probe_print(FILE *out, const ra_profile *p, const probe_yard *y);

#endif /* RA_PROBE_H */
