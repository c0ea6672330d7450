/* probe.h: the measurements of `ringattn probe` (probe_measure.c), each
 * one filling part of a machine profile (comm/perf/profile.h). */
#ifndef RA_PROBE_H
#define RA_PROBE_H

#include <mpi.h>

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

#endif /* RA_PROBE_H */
