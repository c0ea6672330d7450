/* agree.c: the one way ranks agree on an error before a collective step.
 * Validate locally, then agree, then start the collectives: a failure on one
 * rank must never leave the others waiting inside a collective. */
#include <stdio.h>
#include <string.h>

#include "agree.h"
#include "internal.h"

ra_status ra_agree(MPI_Comm comm, ra_status st)
{
    int rank, nranks, first;
    struct {
        int status;
        char message[512];
    } verdict;

    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Comm_rank/size failed");
    first = st != RA_OK ? rank : nranks;
    if (MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Allreduce of a status failed");
    if (first == nranks)
        return RA_OK;

    memset(&verdict, 0, sizeof verdict);
    if (rank == first) {
        verdict.status = (int)st;
        snprintf(verdict.message, sizeof verdict.message, "%s",
                 ra_error_message());
    }
    if (MPI_Bcast(&verdict, (int)sizeof verdict, MPI_BYTE, first, comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "MPI_Bcast of an error failed");
    if (rank == first)
        return st;
    return ra_error_set((ra_status)verdict.status, "%s", verdict.message);
}
