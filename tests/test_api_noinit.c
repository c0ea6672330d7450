/* test_api_noinit.c: issue 39, class 18. Every function of ringattn.h
 * that takes a communicator, called before MPI_Init and again after
 * MPI_Finalize, returns RA_ERR_MPI with a message saying so instead of
 * aborting the process. One process, no mpiexec: MPI starts as a
 * singleton in between. Exit status 0 when every call was refused. */
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "ringattn.h"

/* 0 when st is RA_ERR_MPI and the message says what is wrong (want). */
static int refused(ra_status st, const char *call, const char *want)
{
    const int ok = st == RA_ERR_MPI && strstr(ra_error_message(), want);
    printf("%s %s: %s (%s)\n", ok ? "ok  " : "FAIL", call, ra_status_str(st),
           ra_error_message());
    return !ok;
}

/* Each function once; returns the number of calls not refused. */
static int calls_refused(const char *want)
{
    const ra_shape s = {1, 4, 4, 1, 1, 4, 4, 0};
    const MPI_Comm comm = MPI_COMM_WORLD;
    ra_nodes nodes;
    MPI_Comm ring;
    ra_shape got;
    int failed = 0;
    failed += refused(ra_forward(comm, &s, NULL, NULL, NULL, NULL, NULL, NULL),
                      "ra_forward", want);
    failed += refused(ra_backward(comm, &s, NULL, NULL, NULL, NULL, NULL,
                                  NULL), "ra_backward", want);
    failed += refused(ra_strategy_check(comm, &s, NULL, NULL, 0),
                      "ra_strategy_check", want);
    failed += refused(ra_mha_forward(comm, &s, NULL, NULL, NULL, NULL, NULL,
                                     NULL), "ra_mha_forward", want);
    failed += refused(ra_comm_nodes(comm, &nodes), "ra_comm_nodes", want);
    failed += refused(ra_comm_ring_order(comm, 1, &ring),
                      "ra_comm_ring_order", want);
    failed += refused(ra_h5_read_shape(comm, "x.h5", NULL, &got, NULL),
                      "ra_h5_read_shape", want);
    failed += refused(ra_h5_gen(comm, "x.h5", 0, &s, RA_DTYPE_F32, 1, NULL),
                      "ra_h5_gen", want);
    failed += refused(ra_h5_write_outputs(comm, "x.h5", 0, &s, NULL, NULL,
                                          NULL), "ra_h5_write_outputs", want);
    return failed;
}

int main(void)
{
    int failed = calls_refused("not initialised");
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS || MPI_Finalize() != MPI_SUCCESS)
        return 1;
    failed += calls_refused("finalised");
    return failed ? 1 : 0;
}
