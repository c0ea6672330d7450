/* version.c: `ringattn --version`: what this build runs on. */
#include <stdio.h>
#include <string.h>

#include <cblas.h>
#include <hdf5.h>

#include "cli.h"
#include "kernel.h"

int cli_version(const cli_ctx *ctx)
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    unsigned major = 0, minor = 0, release = 0;
    if (MPI_Get_library_version(mpi, &len) != MPI_SUCCESS)
        snprintf(mpi, sizeof mpi, "unknown");
    mpi[strcspn(mpi, "\n")] = '\0'; /* the first line */
    if (H5get_libversion(&major, &minor, &release) < 0)
        major = minor = release = 0;
    if (ctx->rank == 0) {
        printf("ringattn %s\n", RA_VERSION_STRING);
        printf("  %-6s %s\n", "BLAS", openblas_get_config());
        printf("  %-6s %s\n", "MPI", mpi);
        printf("  %-6s HDF5 %u.%u.%u\n", "HDF5", major, minor, release);
        printf("  %-6s %s\n", "exp", ra_exp2_impl());
    }
    return CLI_EXIT_OK;
}
