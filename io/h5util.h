/* h5util.h: plumbing shared by the files of io/ only.
 *
 * Conventions: handles start as H5I_INVALID_HID and are closed on one
 * cleanup path; each function returning ra_status has set the error
 * message when the status is not RA_OK. */
#ifndef RA_H5UTIL_H
#define RA_H5UTIL_H

#include <stddef.h>

#include <hdf5.h>
#include <mpi.h>

#include "ringattn.h"

/* The HDF5 error printer of the caller, saved while io/ silences it so that
 * failures surface only through ra_error_message(). */
typedef struct {
    H5E_auto2_t func;
    void *data;
} h5io_quiet;

void h5io_quiet_begin(h5io_quiet *saved);
void h5io_quiet_end(const h5io_quiet *saved);

/* Collective over comm: returns RA_OK when st is RA_OK on every rank, else
 * the status and message of the lowest failing rank, on every rank. Call it
 * before any collective step a local failure would otherwise skip. */
ra_status h5io_agree(MPI_Comm comm, ra_status st);

/* New property lists (caller closes): MPI-IO file access over comm, and
 * collective transfers. Negative on failure. */
hid_t h5io_fapl_mpio(MPI_Comm comm);
hid_t h5io_dxpl_collective(void);

/* Opens an existing file read-only with the given access list; explains a
 * missing, unreadable or non-HDF5 file. */
ra_status h5io_file_open(const char *path, hid_t fapl, hid_t *file);

/* Opens dataset name (e.g. "/q") and checks that it is a float32 or
 * float64 dataset of the given rank with every size positive; fills dims
 * [rank]. On RA_OK, *dset is open (caller closes) unless dset is NULL. */
ra_status h5io_dset_open(hid_t file, const char *path, const char *name,
                         int rank, hsize_t *dims, hid_t *dset);

/* Formats dims as "(2, 128, 8, 64)" into buf. */
void h5io_dims_format(const hsize_t *dims, int rank, char *buf, size_t len);

/* Names a datatype the way numpy would: float32, int64, uint8, string... */
void h5io_type_name(hid_t type, char *buf, size_t len);

/* Selects, in fspace of the given dims, indices [start, start + count) on
 * axis and all of every other axis; *mspace becomes a matching dense memory
 * space (caller closes). A count of 0 selects nothing in both, so that the
 * rank can still take part in a collective transfer. */
ra_status h5io_slab_select(const char *path, const char *name, hid_t fspace,
                           int rank, const hsize_t *dims, int axis,
                           ra_range rows, hid_t *mspace);

/* Fills an open new file: this rank's part of every dataset, and the
 * attributes; returns this rank's status. */
typedef ra_status (*h5io_writer)(hid_t file, void *ctx);

/* Creates path atomically, collective over comm. Rank 0 refuses an existing
 * path unless force, and makes an empty temporary file next to it; every
 * rank creates it as HDF5 with MPI-IO, calls writer(file, ctx), closes it.
 * When all ranks succeeded, rank 0 fsyncs the file, renames it to path and
 * fsyncs the directory; otherwise it removes the temporary file. writer must
 * make the same collective HDF5 calls on every rank. Every rank returns the
 * same status and message. */
ra_status h5io_commit(MPI_Comm comm, const char *path, int force,
                      h5io_writer writer, void *ctx);

#endif /* RA_H5UTIL_H */
