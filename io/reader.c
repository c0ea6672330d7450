/* reader.c: an input file open for collective reading with MPI-IO, the one
 * way every reader of io/ opens and closes one, and the token slices each
 * rank reads or writes. */
#include "h5io.h"
#include "h5util.h"
#include "internal.h"

ra_status h5io_reader_open(MPI_Comm comm, const char *path,
                           const ra_h5_tuning *t, h5io_reader *r)
{
    r->file = r->fapl = r->dxpl = H5I_INVALID_HID;
    const ra_status st = h5io_tuning_check(t, path);
    if (st != RA_OK)
        return st;
    if ((r->fapl = h5io_fapl_mpio(comm, t)) < 0 ||
        (r->dxpl = h5io_dxpl_collective()) < 0) {
        r->dxpl = H5I_INVALID_HID;
        return ra_error_set(RA_ERR_IO, "%s: cannot set up MPI-IO file access",
                            path);
    }
    return h5io_file_open(path, r->fapl, &r->file);
}

ra_status h5io_reader_close(h5io_reader *r, const char *path, ra_status st)
{
    if (r->file >= 0 && H5Fclose(r->file) < 0 && st == RA_OK)
        st = ra_error_set(RA_ERR_IO, "%s: closing the file failed", path);
    if (r->dxpl >= 0)
        H5Pclose(r->dxpl);
    if (r->fapl >= 0)
        H5Pclose(r->fapl);
    r->file = r->dxpl = r->fapl = H5I_INVALID_HID;
    return st;
}

ra_status h5io_rank_slices(MPI_Comm comm, const char *path, ra_layout layout,
                           ra_band cut, const ra_shape *s, ra_slice *sq,
                           ra_slice *sk)
{
    int rank, nranks;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);
    *sq = ra_band_slice(layout, cut, s->N, rank, nranks);
    *sk = ra_band_slice(layout, cut, s->M, rank, nranks);
    return RA_OK;
}

ra_status h5io_slices_check(const char *path, const ra_shape *s,
                            ra_layout layout)
{
    const ra_status st = ra_shape_check(s);
    if (st == RA_OK &&
        (layout == RA_LAYOUT_AUTO || (unsigned)layout > RA_LAYOUT_BALANCED))
        return ra_error_set(RA_ERR_ARG, "%s: unknown layout %d", path,
                            (int)layout);
    return st;
}
