/* version.c: `ringattn --version`: what this build is (the version and
 * the commit, RA_COMMIT from CMake) and what it runs on. */
#include <stdio.h>
#include <string.h>

#include <cblas.h>
#include <hdf5.h>

#include "cli.h"
#include "kernel.h"

/* The first line of the MPI library's version and HDF5's "major.minor.
 * release". */
static void versions(char *mpi, char *hdf5, size_t n)
{
    int len = 0;
    unsigned major = 0, minor = 0, release = 0;
    if (MPI_Get_library_version(mpi, &len) != MPI_SUCCESS)
        snprintf(mpi, MPI_MAX_LIBRARY_VERSION_STRING, "unknown");
    mpi[strcspn(mpi, "\n")] = '\0'; /* the first line */
    if (H5get_libversion(&major, &minor, &release) < 0)
        major = minor = release = 0;
    snprintf(hdf5, n, "HDF5 %u.%u.%u", major, minor, release);
}

int cli_version(const cli_ctx *ctx)
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING], hdf5[64];
    versions(mpi, hdf5, sizeof hdf5);
    if (ctx->rank == 0) {
        printf("ringattn %s (commit %s)\n", RA_VERSION_STRING, RA_COMMIT);
        printf("  %-6s %s\n", "BLAS", openblas_get_config());
        printf("  %-6s %s\n", "MPI", mpi);
        printf("  %-6s %s\n", "HDF5", hdf5);
        printf("  %-6s %s\n", "exp", ra_exp2_impl());
    }
    return CLI_EXIT_OK;
}

void cli_version_line(char *buf, size_t n)
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING], hdf5[64];
    versions(mpi, hdf5, sizeof hdf5);
    snprintf(buf, n, "ringattn %s (commit %s); BLAS %s; MPI %s; %s; exp %s",
             RA_VERSION_STRING, RA_COMMIT, openblas_get_config(), mpi, hdf5,
             ra_exp2_impl());
}
