/* h5write.c: creating datasets and root attributes in a file open for
 * parallel writing, shared by the output (write.c) and input (gen.c)
 * writers. Every call here is collective over the file's communicator. */
#include <string.h>

#include "h5util.h"
#include "internal.h"

/* The creation list of a dataset: no fill pass (every element gets
 * written); with storage, chunks of chunk_rows tokens on the region's axis
 * (one index of the axes before it, all of those after), gzip-compressed
 * when asked. Negative on failure. */
static hid_t dcpl_make(const h5io_region *rg, const h5io_storage *storage)
{
    const int rank = rg->rank, axis = rg->axis;
    const hsize_t *dims = rg->dims;
    hsize_t chunk[H5S_MAX_RANK];
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    herr_t err = dcpl < 0 ? -1 : H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    if (err >= 0 && storage && storage->chunk_rows > 0) {
        for (int i = 0; i < rank; i++)
            chunk[i] = i < axis ? 1 : dims[i];
        if ((hsize_t)storage->chunk_rows < dims[axis])
            chunk[axis] = (hsize_t)storage->chunk_rows;
        err = H5Pset_chunk(dcpl, rank, chunk);
        if (err >= 0 && storage->gzip > 0)
            err = H5Pset_deflate(dcpl, (unsigned)storage->gzip);
    }
    return h5io_plist_keep(dcpl, err);
}

/* The order a tensor's axes attribute names, from its rank, its token axis
 * and whether it is stored heads-first; NULL: none (not a tensor of
 * tokens). */
static const char *axes_text(int rank, int axis, int heads_first)
{
    if (rank == 4 && axis == 1)
        return heads_first ? "B,H,N,D" : "B,N,H,D";
    if (rank == 3 && axis == 2)
        return "B,H,N";
    return rank == 4 && axis == 2 ? "B,H,N,M" : NULL;
}

/* Whether the dataset is a (B, N, H, D) tensor stored heads-first: then
 * fdims gets its file sizes (B, H, N, D), else dims. */
static int heads_first_dims(int rank, const hsize_t *dims, int axis,
                            const h5io_storage *storage, hsize_t *fdims)
{
    const int heads = rank == 4 && axis == 1 && storage &&
                      storage->heads_first;
    memcpy(fdims, dims, sizeof *dims * (size_t)rank);
    if (heads) {
        fdims[1] = dims[2];
        fdims[2] = dims[1];
    }
    return heads;
}

ra_status h5io_dset_write(MPI_Comm comm, hid_t file, const char *path,
                          const char *name, hid_t ftype,
                          const h5io_region *rg, const void *buf)
{
    return h5io_dset_write_stored(comm, file, path, name, ftype, rg, buf,
                                  NULL);
}

ra_status h5io_dset_write_stored(MPI_Comm comm, hid_t file, const char *path,
                                 const char *name, hid_t ftype,
                                 const h5io_region *rg, const void *buf,
                                 const h5io_storage *storage)
{
    hid_t space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
    hid_t dset = H5I_INVALID_HID, dxpl = H5I_INVALID_HID;
    hsize_t fdims[H5S_MAX_RANK];
    char why[H5IO_DETAIL_LEN];
    ra_status st = RA_OK;
    const int heads = heads_first_dims(rg->rank, rg->dims, rg->axis, storage,
                                       fdims);
    const char *axes = axes_text(rg->rank, rg->axis, heads);
    /* the dataset as the file holds it: heads-first moves the token axis */
    const h5io_region file_rg = {rg->mtype, rg->rank, fdims,
                                 heads ? 2 : rg->axis, rg->slice};

    if ((space = H5Screate_simple(rg->rank, fdims, NULL)) < 0 ||
        (dcpl = dcpl_make(&file_rg, storage)) < 0 ||
        (dxpl = h5io_dxpl_collective()) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot set up its "
                          "dataspace or property lists", path, name);
        goto cleanup;
    }
    dset = H5Dcreate2(file, name, ftype, space, H5P_DEFAULT, dcpl,
                      H5P_DEFAULT);
    if (dset < 0) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: dataset %s: creation failed: %s",
                          path, name, why);
        goto cleanup;
    }
    /* a tensor of tokens says its order, which a shape alone cannot (a
     * reader would have to be told) */
    if (axes && (st = h5io_attr_write_string(comm, dset, path, "axes",
                                             axes)) != RA_OK)
        goto cleanup;
    /* room for the data before it goes out; the transfer only reads buf
     * when it writes */
    const haddr_t at = H5Dget_offset(dset); /* undefined when chunked */
    if (at != HADDR_UNDEF &&
        (st = h5io_reserve_allocated(comm, file, path,
                                     at + H5Dget_storage_size(dset))) != RA_OK)
        goto cleanup;
    st = heads ? h5io_dset_write_heads(dset, dxpl, path, name, rg->mtype,
                                       fdims, rg->slice, buf)
               : h5io_slice_transfer(H5IO_WRITE, dset, space, dxpl, path,
                                     name, rg, (void *)buf);

cleanup:
    if (dset >= 0 && H5Dclose(dset) < 0 && st == RA_OK) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: dataset %s: closing failed: %s",
                          path, name, why);
    }
    if (dxpl >= 0) H5Pclose(dxpl);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return ra_agree(comm, st);
}

/* Writes a scalar root attribute of file type ftype from *value of memory
 * type mtype. */
static ra_status attr_write(MPI_Comm comm, hid_t file, const char *path,
                            const char *name, hid_t ftype, hid_t mtype,
                            const void *value)
{
    hid_t space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
    char why[H5IO_DETAIL_LEN];
    ra_status st = RA_OK;

    if ((space = H5Screate(H5S_SCALAR)) < 0 ||
        (attr = H5Acreate2(file, name, ftype, space, H5P_DEFAULT,
                           H5P_DEFAULT)) < 0 ||
        H5Awrite(attr, mtype, value) < 0) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: writing attribute %s failed: %s",
                          path, name, why);
    }
    if (attr >= 0 && H5Aclose(attr) < 0 && st == RA_OK) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: closing attribute %s failed: %s",
                          path, name, why);
    }
    if (space >= 0)
        H5Sclose(space);
    return ra_agree(comm, st);
}

/* Defines h5io_attr_write_SUFFIX(comm, file, path, name, ctype value):
 * value as a scalar of file type ftype (declared in h5util.h). */
#define ATTR_WRITER(suffix, ctype, ftype, mtype)                              \
    ra_status h5io_attr_write_##suffix(MPI_Comm comm, hid_t file,             \
                                       const char *path, const char *name,    \
                                       ctype value)                           \
    {                                                                         \
        return attr_write(comm, file, path, name, ftype, mtype, &value);      \
    }

ATTR_WRITER(int, int, H5T_STD_I32LE, H5T_NATIVE_INT)
ATTR_WRITER(int64, int64_t, H5T_STD_I64LE, H5T_NATIVE_INT64)
ATTR_WRITER(uint64, uint64_t, H5T_STD_U64LE, H5T_NATIVE_UINT64)
ATTR_WRITER(double, double, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE)

ra_status h5io_attr_write_string(MPI_Comm comm, hid_t file, const char *path,
                                 const char *name, const char *value)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    ra_status st;

    /* variable-length UTF-8: h5py reads it as str, not bytes */
    if (type < 0 || H5Tset_size(type, H5T_VARIABLE) < 0 ||
        H5Tset_cset(type, H5T_CSET_UTF8) < 0) {
        st = ra_agree(comm, ra_error_set(RA_ERR_IO, "%s: attribute %s: "
                                           "cannot make its string type",
                                           path, name));
        goto cleanup;
    }
    st = attr_write(comm, file, path, name, type, type, &value);

cleanup:
    if (type >= 0)
        H5Tclose(type);
    return st;
}
