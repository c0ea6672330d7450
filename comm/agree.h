/* agree.h: collective error agreement (library internal, not installed). */
#ifndef RA_AGREE_H
#define RA_AGREE_H

#include <mpi.h>

#include "ringattn.h"

/* Collective over comm: returns RA_OK when st is RA_OK on every rank, else
 * the status and message of the lowest failing rank, on every rank (the
 * message is set with ra_error_set there). Call it after local validation
 * and before any collective step that a local failure would otherwise skip. */
ra_status ra_agree(MPI_Comm comm, ra_status st);

#endif /* RA_AGREE_H */
