/* align.h: where each local query sits under params->align (ringattn.h,
 * ra_align): the one resolver of aligned query positions, for the ring's
 * forward and backward and for the check of a forward's lse (internal). */
#ifndef RA_ALIGN_H
#define RA_ALIGN_H

#include <mpi.h>

#include "internal.h"

/* Fills qalign (B, n) with the aligned position i' of every query of this
 * rank's slice under layout lay (resolved) and params->align: i + (M - N),
 * or each sequence bottom-right on its own lengths. With packed segments
 * and RA_ALIGN_SEQUENCE it is collective over comm: each rank's runs of
 * equal ids (batch, id, one past the run's last position) are gathered,
 * O(runs) memory, never the id arrays; every rank then returns the same
 * status. Otherwise it is local. */
ra_status ra_align_queries(MPI_Comm comm, const ra_shape *s, ra_layout lay,
                           const ra_params *p, const ra_masks *mk,
                           int64_t *qalign);

#endif /* RA_ALIGN_H */
