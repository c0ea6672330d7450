/* nodes.h: which ranks share a node (library internal, not installed). The
 * public functions ra_comm_nodes() and ra_comm_ring_order() are declared in
 * ringattn.h. */
#ifndef RA_NODES_H
#define RA_NODES_H

#include <mpi.h>

#include "ringattn.h"

/* Collective over comm: node_of[r] is the node of rank r of comm (P
 * entries, caller-owned), nodes numbered 0, 1, ... in the order of their
 * lowest rank. Returns MPI_SUCCESS or the failing MPI call's code. */
int ra_nodes_map(MPI_Comm comm, int *node_of);

/* Collective over comm: a new array of ra_nodes_map's P entries in
 * *node_of, freed by the caller (free); what (a strategy's name) opens the
 * message of a failure. */
ra_status ra_nodes_of(MPI_Comm comm, const char *what, int **node_of);

#endif /* RA_NODES_H */
