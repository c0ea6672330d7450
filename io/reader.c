/* reader.c: an input file open for collective reading with MPI-IO, the one
 * way every reader of io/ opens and closes one. */
#include "h5util.h"
#include "internal.h"

ra_status h5io_reader_open(MPI_Comm comm, const char *path, h5io_reader *r)
{
    r->file = H5I_INVALID_HID;
    if ((r->fapl = h5io_fapl_mpio(comm)) < 0 ||
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
