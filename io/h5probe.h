/* h5probe.h: the parallel HDF5 rates of a directory, for `ringattn probe`. */
#ifndef RA_H5PROBE_H
#define RA_H5PROBE_H

#include <stdint.h>

#include "ringattn.h"

/* Writes a scratch output of `rows` query rows per rank (/o (1, rows P, 8,
 * 128) float32 and its /lse) into dir through ra_h5_write_outputs, as run
 * writes its output, then reads /o back collectively through
 * ra_h5_read_inputs, as run reads its inputs (q, k and v all name /o,
 * so three times its bytes). The scratch file has an owned temporary name
 * (removed by the next writer into dir if this job dies of SIGKILL) and is
 * removed before returning, on success and on failure. *written and *read
 * are the bytes of all ranks, *t_write and *t_read the slowest rank's
 * seconds; tuning: the MPI-IO tuning of both (NULL: none). Collective;
 * every rank returns the same status. */
ra_status h5io_probe_rates(MPI_Comm comm, const char *dir, int64_t rows,
                           const ra_h5_tuning *tuning, double *written,
                           double *t_write, double *read, double *t_read);

#endif /* RA_H5PROBE_H */
