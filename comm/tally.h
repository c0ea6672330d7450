/* tally.h: an error tally (compare.h) summed over the ranks (internal). */
#ifndef RA_TALLY_H
#define RA_TALLY_H

#include <mpi.h>

#include "compare.h"
#include "ringattn.h"

/* Collective over comm: *all = the tally of every rank's rows (sums of the
 * errors and counts, maxima of the worst errors), on every rank. */
ra_status ra_tally_allreduce(MPI_Comm comm, const ra_tally *mine,
                             ra_tally *all);

#endif /* RA_TALLY_H */
