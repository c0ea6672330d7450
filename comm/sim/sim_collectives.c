/* sim_collectives.c: the library's non-blocking collectives (and
 * MPI_Comm_idup), run blocking under SMPI. SimGrid 3.32 runs
 * MPI_Iallreduce, MPI_Ibcast and MPI_Ireduce_scatter with naive algorithms
 * outside its collective selector: at 128 ranks one agreement took
 * minutes of wall time. The linker sends comm/'s calls
 * here (--wrap, sim.cmake), which run the blocking collective that the
 * selector (Open MPI's algorithms, ringattn-sim.sh) times, and return a
 * request already complete (MPI_REQUEST_NULL, which MPI_Wait and MPI_Test
 * take). Every such collective in comm/ is waited for before the rank
 * computes again (agreement, counts, the tree's reduce-scatter), so the
 * simulated time is that of the blocking one. MPI_Iallgatherv (the tree's
 * gathers, segment ids) is left to SMPI: its nine parameters are over the
 * project's limit of eight. */
#include <mpi.h>

int __wrap_MPI_Iallreduce(const void *send, void *recv, int count,
                          MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                          MPI_Request *req)
{
    *req = MPI_REQUEST_NULL;
    return MPI_Allreduce(send, recv, count, type, op, comm);
}

int __wrap_MPI_Ibcast(void *buf, int count, MPI_Datatype type, int root,
                      MPI_Comm comm, MPI_Request *req)
{
    *req = MPI_REQUEST_NULL;
    return MPI_Bcast(buf, count, type, root, comm);
}

int __wrap_MPI_Ireduce_scatter(const void *send, void *recv, const int *rcounts,
                               MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                               MPI_Request *req)
{
    *req = MPI_REQUEST_NULL;
    return MPI_Reduce_scatter(send, recv, rcounts, type, op, comm);
}

/* SMPI 3.32 has no MPI_Comm_idup (it aborts "Not yet implemented"). */
int __wrap_MPI_Comm_idup(MPI_Comm comm, MPI_Comm *out, MPI_Request *req)
{
    *req = MPI_REQUEST_NULL;
    return MPI_Comm_dup(comm, out);
}
