/* h5io.h: single-rank readers of ringattn files, for the command line's
 * verify and info subcommands (not part of the public header).
 *
 * Every function here opens the file with the default (sec2) driver and
 * independent I/O, so it may run on one rank alone; none is collective.
 * Failures return a status and set ra_error_message() to one line naming
 * the file, the dataset or attribute, and the problem. */
#ifndef RA_H5IO_H
#define RA_H5IO_H

#include <stdint.h>
#include <stdio.h>

#include "ringattn.h"

/* Reads dset[b, row0 : row0 + nrows, :, :] of a rank-4 float dataset (e.g.
 * "/o" or "/q") into out, converted to double; out holds nrows * dims[2] *
 * dims[3] values, row-major. RA_ERR_ARG when the rows lie outside. */
ra_status h5io_read_rows(const char *path, const char *dset, int64_t b,
                         int64_t row0, int64_t nrows, double *out);

/* Reads lse[b, h, i0 : i0 + n] of the rank-3 /lse (B, H, N) into out. */
ra_status h5io_read_lse(const char *path, int64_t b, int64_t h, int64_t i0,
                        int64_t n, double *out);

/* Reads the root attributes of an output file that a check needs. */
ra_status h5io_read_run_attrs(const char *path, int *causal, double *scale,
                              int64_t *seq_q, int64_t *seq_kv);

/* Reads the sizes of /o (B, N, H, Dv) and /lse (B, H, N). */
ra_status h5io_read_out_shape(const char *path, int64_t dims_o[4],
                              int64_t dims_lse[3]);

/* Prints every dataset (path, shape, dtype) and every root attribute
 * (name = value) of the file to out, in aligned columns. */
ra_status h5io_info(const char *path, FILE *out);

#endif /* RA_H5IO_H */
