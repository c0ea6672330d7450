/* nodes.c: where the ranks run, and a ring that crosses each node boundary
 * once per step.
 *
 * mpirun may deal ranks to nodes in any order (--map-by node deals them
 * round-robin), and the ring sends from rank r to rank r + 1. When those two
 * ranks sit on different nodes, every block of every step crosses a network
 * link. Ordering the ring node by node (keeping mpirun's order inside a
 * node) leaves one crossing per node boundary per step: with K nodes, K of
 * the P sends go over the network instead of up to P. */
#include <stdlib.h>

#include "agree.h"
#include "internal.h"
#include "nodes.h"

int ra_nodes_map(MPI_Comm comm, int *node_of)
{
    int rank, P, rc, leader = 0;
    MPI_Comm local = MPI_COMM_NULL;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    /* pass 1: the lowest rank of comm on each node names the node */
    rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                             &local);
    if (rc == MPI_SUCCESS) {
        leader = rank;
        rc = MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local);
    }
    if (local != MPI_COMM_NULL)
        MPI_Comm_free(&local);
    if (rc == MPI_SUCCESS)
        rc = MPI_Allgather(&leader, 1, MPI_INT, node_of, 1, MPI_INT, comm);
    if (rc != MPI_SUCCESS)
        return rc;
    /* pass 2: number the leaders in increasing order; a leader is its own
     * node's lowest rank, so it precedes every member and is numbered
     * before them */
    int nodes = 0;
    for (int r = 0; r < P; r++)
        node_of[r] = node_of[r] == r ? nodes++ : node_of[node_of[r]];
    return MPI_SUCCESS;
}

ra_status ra_nodes_of(MPI_Comm comm, const char *what, int **node_of)
{
    int P;
    *node_of = NULL;
    if (MPI_Comm_size(comm, &P) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_size failed", what);
    int *map = malloc(sizeof(int) * (size_t)P);
    ra_status st = ra_agree(comm, map ? RA_OK
                                      : ra_error_set(RA_ERR_NOMEM, "%s: out "
                                                     "of memory for the node "
                                                     "map", what));
    if (st == RA_OK && ra_nodes_map(comm, map) != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "%s: finding the ranks' nodes failed",
                          what);
    if (st == RA_OK)
        *node_of = map;
    else
        free(map);
    return st;
}

ra_status ra_comm_nodes(MPI_Comm comm, ra_nodes *out)
{
    int rank, P;
    ra_error_clear();
    ra_status st = ra_comm_usable(comm, "ra_comm_nodes");
    if (st != RA_OK)
        return st;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &P) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "nodes: MPI_Comm_rank/size failed");
    int *node_of = malloc(sizeof(int) * (size_t)P * 2);
    st = node_of ? RA_OK
                 : ra_error_set(RA_ERR_NOMEM, "nodes: out of memory for %d "
                                "ranks", P);
    if (!out)
        st = ra_error_set(RA_ERR_ARG, "ra_comm_nodes: nodes is NULL");
    st = ra_agree(comm, st);
    if (st != RA_OK)
        goto done;
    if (ra_nodes_map(comm, node_of) != MPI_SUCCESS) {
        st = ra_error_set(RA_ERR_MPI, "nodes: MPI_Comm_split_type or "
                          "MPI_Allgather failed");
        goto done;
    }
    int *per_node = node_of + P; /* ranks on node n, n < nodes */
    int nodes = 0;
    for (int r = 0; r < P; r++) {
        if (node_of[r] == nodes)
            per_node[nodes++] = 0;
        per_node[node_of[r]]++;
    }
    *out = (ra_nodes){.nodes = nodes, .node = node_of[rank],
                      .ranks_on_node = per_node[node_of[rank]],
                      .ranks_per_node_min = P, .ranks_per_node_max = 0,
                      .next_on_other_node =
                          node_of[(rank + 1) % P] != node_of[rank]};
    for (int n = 0; n < nodes; n++) {
        if (per_node[n] < out->ranks_per_node_min)
            out->ranks_per_node_min = per_node[n];
        if (per_node[n] > out->ranks_per_node_max)
            out->ranks_per_node_max = per_node[n];
    }
done:
    free(node_of);
    return st;
}

ra_status ra_comm_ring_order(MPI_Comm comm, int node_aware, MPI_Comm *ring_comm)
{
    int rank, P, rc;
    ra_error_clear();
    ra_status st = ra_comm_usable(comm, "ra_comm_ring_order");
    if (st != RA_OK)
        return st;
    st = ra_agree(comm, ring_comm ? RA_OK
                                   : ra_error_set(RA_ERR_ARG,
                                                  "ra_comm_ring_order: "
                                                  "ring_comm is NULL"));
    if (st != RA_OK)
        return st;
    *ring_comm = MPI_COMM_NULL;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &P) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring order: MPI_Comm_rank/size "
                            "failed");
    if (!node_aware) {
        if (MPI_Comm_dup(comm, ring_comm) != MPI_SUCCESS)
            return ra_error_set(RA_ERR_MPI, "ring order: MPI_Comm_dup failed");
        return RA_OK;
    }
    int *node_of = malloc(sizeof(int) * (size_t)P);
    st = ra_agree(comm, node_of ? RA_OK
                                          : ra_error_set(RA_ERR_NOMEM,
                                            "ring order: out of memory for "
                                            "%d ranks", P));
    if (st != RA_OK)
        goto done;
    rc = ra_nodes_map(comm, node_of);
    /* the ring position: ranks of lower nodes, then lower ranks of mine */
    int position = 0;
    for (int r = 0; r < P && rc == MPI_SUCCESS; r++)
        position += node_of[r] < node_of[rank] ||
                    (node_of[r] == node_of[rank] && r < rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_split(comm, 0, position, ring_comm);
    if (rc != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "ring order: finding the nodes or "
                          "splitting the communicator failed");
done:
    free(node_of);
    return st;
}
