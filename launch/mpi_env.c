/* mpi_env.c: MPI settings the command line makes before MPI starts. */
#include <stdlib.h>

#include "cli.h"

void cli_mpi_env(void)
{
    /* Open MPI's MPI-IO (OMPIO), when the ranks of a job span nodes, opens
     * every file with a shared file pointer kept in a lock file beside it
     * ("FILE-JOB-PID.lock"). ringattn never uses shared file pointers, and a
     * killed job would leave that file next to the user's input. The user's
     * own setting wins. */
    setenv("OMPI_MCA_sharedfp", "^lockedfile", 0);
}
