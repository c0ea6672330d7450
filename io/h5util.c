/* h5util.c: error silencing, property lists, and the checks
 * and selections every reader and writer of io/ shares. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5util.h"
#include "internal.h"

void h5io_quiet_begin(h5io_quiet *saved)
{
    if (H5Eget_auto2(H5E_DEFAULT, &saved->func, &saved->data) < 0) {
        saved->func = NULL;
        saved->data = NULL;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void h5io_quiet_end(const h5io_quiet *saved)
{
    H5Eset_auto2(H5E_DEFAULT, saved->func, saved->data);
}


hid_t h5io_plist_keep(hid_t plist, herr_t set)
{
    if (plist >= 0 && set < 0) {
        H5Pclose(plist);
        return H5I_INVALID_HID;
    }
    return plist;
}

hid_t h5io_fapl_mpio(MPI_Comm comm, const ra_h5_tuning *t)
{
    const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    return h5io_plist_keep(fapl,
                           fapl < 0 ? -1 : h5io_fapl_tune(fapl, comm, t));
}

hid_t h5io_dxpl_collective(void)
{
    const hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    return h5io_plist_keep(dxpl, dxpl < 0 ? -1 : H5Pset_dxpl_mpio(
                                     dxpl, H5FD_MPIO_COLLECTIVE));
}

/* H5Ewalk2 callback: keeps the description of the most specific error,
 * skipping the plugin search's own errors (a missing filter fails in the
 * search of the plugin directory, which says nothing about the filter). */
static herr_t error_innermost(unsigned n, const H5E_error2_t *err, void *buf)
{
    char *out = buf;

    (void)n;
    if (!out[0] && err->desc && err->desc[0] && err->maj_num != H5E_PLUGIN)
        snprintf(out, H5IO_DETAIL_LEN, "%s", err->desc);
    return 0;
}

void h5io_error_detail(char *buf)
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, error_innermost, buf);
    if (!buf[0])
        snprintf(buf, H5IO_DETAIL_LEN, "no detail");
}

/* Whether the file starts with the HDF5 signature (at 0 or after a user
 * block of 512, 1024, ... bytes). */
static int has_hdf5_signature(const char *path)
{
    static const char sig[8] = "\211HDF\r\n\032\n";
    char head[8];
    int found = 0;
    FILE *f = fopen(path, "rb");

    for (long at = 0; f && !found && at <= (1L << 20); at = at ? 2 * at : 512)
        found = fseek(f, at, SEEK_SET) == 0 &&
                fread(head, 1, sizeof head, f) == sizeof head &&
                memcmp(head, sig, sizeof sig) == 0;
    if (f)
        fclose(f);
    return found;
}

/* H5Ewalk2 callback: whether the stack holds a failed file lock. */
static herr_t error_lock(unsigned n, const H5E_error2_t *err, void *found)
{
    (void)n;
    if (err->desc && strstr(err->desc, "unable to lock"))
        *(int *)found = 1;
    return 0;
}

ra_status h5io_file_open(const char *path, hid_t fapl, hid_t *file)
{
    char why[H5IO_DETAIL_LEN];
    struct stat sb;
    int locked = 0;

    /* opening a FIFO blocks until a writer comes; a device never ends */
    *file = H5I_INVALID_HID;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return ra_error_set(RA_ERR_INPUT, "%s: not a regular file (%s)", path,
                            S_ISFIFO(sb.st_mode) ? "a FIFO" :
                            S_ISDIR(sb.st_mode) ? "a directory" :
                            S_ISCHR(sb.st_mode) ? "a character device" :
                            S_ISBLK(sb.st_mode) ? "a block device" :
                            S_ISSOCK(sb.st_mode) ? "a socket" : "special");
    *file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (*file >= 0)
        return RA_OK;
    h5io_error_detail(why);
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, error_lock, &locked);
    if (access(path, R_OK) != 0)
        return ra_error_set(RA_ERR_INPUT, "%s: cannot open: %s", path,
                            strerror(errno));
    if (locked)
        return ra_error_set(RA_ERR_INPUT, "%s: locked by another process that "
                            "has it open for writing: %s", path, why);
    if (has_hdf5_signature(path))
        return ra_error_set(RA_ERR_INPUT, "%s: an HDF5 file that cannot be "
                            "opened (truncated or corrupted?): %s", path,
                            why);
    return ra_error_set(RA_ERR_INPUT,
                        "%s: cannot open as HDF5 (not an HDF5 file?)", path);
}

/* The axis letters of the datasets ringattn knows, for messages. */
static const char *const *dset_axes(const char *name, int rank)
{
    static const char *const q[] = {"B", "N", "H", "D"};
    static const char *const k[] = {"B", "M", "G", "D"};
    static const char *const v[] = {"B", "M", "G", "Dv"};
    static const char *const o[] = {"B", "N", "H", "Dv"};
    static const char *const lse[] = {"B", "H", "N"};
    static const char *const bn[] = {"B", "N"};
    static const char *const bm[] = {"B", "M"};
    static const char *const any[] = {"d0", "d1", "d2", "d3", "d4", "d5"};

    if (rank == 4 && strcmp(name, "/q") == 0) return q;
    if (rank == 4 && strcmp(name, "/k") == 0) return k;
    if (rank == 4 && strcmp(name, "/v") == 0) return v;
    if (rank == 4 && (strcmp(name, "/o") == 0 || strcmp(name, "/do") == 0))
        return o;
    if (rank == 3 && strcmp(name, "/lse") == 0) return lse;
    if (rank == 2 && (strcmp(name, "/q_segments") == 0 ||
                      strcmp(name, "/segments") == 0)) return bn;
    if (rank == 2 && strcmp(name, "/kv_segments") == 0) return bm;
    if (rank == 1 && (strcmp(name, "/q_lens") == 0 ||
                      strcmp(name, "/kv_lens") == 0)) return bn;
    return any;
}

/* Formats the axis letters as "(B, N, H, D)" into legend[len]. */
static void dset_legend(const char *const *axes, int rank, char *legend,
                        size_t len)
{
    size_t used = (size_t)snprintf(legend, len, "(");
    for (int i = 0; i < rank && used < len; i++)
        used += (size_t)snprintf(legend + used, len - used, "%s%s",
                                 i ? ", " : "", axes[i]);
    if (used < len)
        snprintf(legend + used, len - used, ")");
}

/* Opens dataset name into *id after the checks of what it depends on; the
 * caller closes it. */
static ra_status dset_find(hid_t file, const char *path, const char *name,
                           const char *legend, hid_t *id)
{
    char why[H5IO_DETAIL_LEN];
    ra_status st;

    *id = H5I_INVALID_HID;
    if ((st = h5io_link_check(file, path, name)) != RA_OK)
        return st;
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: not found "
                            "(expected %s)", path, name, legend);
    if ((*id = H5Dopen2(file, name, H5P_DEFAULT)) < 0) {
        h5io_error_detail(why);
        return ra_error_set(RA_ERR_INPUT, "%s: %s: exists but is not a "
                            "readable dataset: %s", path, name, why);
    }
    if ((st = h5io_dset_deps_check(*id, path, name)) != RA_OK) {
        H5Dclose(*id);
        *id = H5I_INVALID_HID;
    }
    return st;
}

ra_status h5io_dset_open(hid_t file, const char *path, const char *name,
                         H5T_class_t cls, int rank, hsize_t *dims,
                         hid_t *dset)
{
    ra_status st = RA_OK;
    hid_t id = H5I_INVALID_HID, space = H5I_INVALID_HID;
    hid_t type = H5I_INVALID_HID;
    const char *const *axes = dset_axes(name, rank);
    char legend[64], tname[32];
    int found;

    dset_legend(axes, rank, legend, sizeof legend);
    if ((st = dset_find(file, path, name, legend, &id)) != RA_OK)
        goto cleanup;
    if ((space = H5Dget_space(id)) < 0 || (type = H5Dget_type(id)) < 0) {
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: cannot read its "
                          "dataspace or datatype", path, name);
        goto cleanup;
    }
    found = H5Sget_simple_extent_ndims(space);
    if (found != rank) {
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: expected rank %d %s, "
                          "found rank %d", path, name, rank, legend, found);
        goto cleanup;
    }
    if (H5Sget_simple_extent_dims(space, dims, NULL) < 0) {
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: cannot read its "
                          "sizes", path, name);
        goto cleanup;
    }
    if (H5Tget_class(type) != cls ||
        (cls == H5T_FLOAT && H5Tget_size(type) != 2 &&
         H5Tget_size(type) != 4 && H5Tget_size(type) != 8)) {
        h5io_type_name(type, tname, sizeof tname);
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: expected %s, found "
                          "%s", path, name, cls == H5T_FLOAT ?
                          "a 16-, 32- or 64-bit float" : "an integer type",
                          tname);
        goto cleanup;
    }
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 0 || dims[i] > (hsize_t)INT64_MAX) {
            st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: size %s = %llu; "
                              "every size must be positive and fit in int64",
                              path, name, axes[i],
                              (unsigned long long)dims[i]);
            goto cleanup;
        }
    }
    if (dset) {
        *dset = id;
        id = H5I_INVALID_HID;
    }

cleanup:
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    if (id >= 0) H5Dclose(id);
    return st;
}

void h5io_dims_format(const hsize_t *dims, int rank, char *buf, size_t len)
{
    size_t used;

    snprintf(buf, len, "(");
    for (int i = 0; i < rank; i++) {
        used = strlen(buf);
        snprintf(buf + used, len - used, "%s%llu", i ? ", " : "",
                 (unsigned long long)dims[i]);
    }
    used = strlen(buf);
    snprintf(buf + used, len - used, rank == 1 ? ",)" : ")");
}

void h5io_type_name(hid_t type, char *buf, size_t len)
{
    size_t bits = H5Tget_size(type) * 8;

    switch (H5Tget_class(type)) {
    case H5T_FLOAT: {
        size_t spos, epos, esize, mpos, msize;
        const int brain = bits == 16 &&
                          H5Tget_fields(type, &spos, &epos, &esize, &mpos,
                                        &msize) >= 0 && esize == 8;
        snprintf(buf, len, brain ? "bfloat16" : "float%zu", bits);
        break;
    }
    case H5T_INTEGER:
        snprintf(buf, len, "%sint%zu",
                 H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
        break;
    case H5T_STRING: snprintf(buf, len, "string"); break;
    case H5T_BITFIELD: snprintf(buf, len, "bitfield"); break;
    case H5T_OPAQUE: snprintf(buf, len, "opaque"); break;
    case H5T_COMPOUND: snprintf(buf, len, "compound"); break;
    case H5T_REFERENCE: snprintf(buf, len, "reference"); break;
    case H5T_ENUM: snprintf(buf, len, "enum"); break;
    case H5T_VLEN: snprintf(buf, len, "vlen"); break;
    case H5T_ARRAY: snprintf(buf, len, "array"); break;
    case H5T_TIME: snprintf(buf, len, "time"); break;
    default: snprintf(buf, len, "unknown type"); break;
    }
}

ra_slice h5io_slice_range(ra_range r)
{
    ra_slice s = {1, {{r.start, r.count, 1}}, r.count};
    return s;
}

/* Selects in fspace the union of the slice's runs on axis (whole extents
 * on the other axes). HDF5 visits a hyperslab selection in the row-major
 * order of the file dataspace, whatever order the runs were added in, so
 * within each index of the leading axes the tokens come in increasing
 * position: the local order of the slice, which is also the order of the
 * dense memory space. */
static herr_t select_runs(hid_t fspace, const h5io_region *rg)
{
    const ra_slice *slice = rg->slice;
    const int axis = rg->axis;
    hsize_t start[H5S_MAX_RANK], stride[H5S_MAX_RANK];
    hsize_t count[H5S_MAX_RANK], block[H5S_MAX_RANK];
    H5S_seloper_t op = H5S_SELECT_SET;
    herr_t err = 0;

    for (int i = 0; i < rg->rank; i++) {
        start[i] = 0;
        stride[i] = 1;
        count[i] = 1;
        block[i] = rg->dims[i];
    }
    for (int r = 0; r < slice->nruns && err >= 0; r++) {
        const ra_run *run = &slice->run[r];
        if (run->count == 0)
            continue;
        start[axis] = (hsize_t)run->start;
        if (run->stride == 1 || run->count == 1) { /* one block */
            stride[axis] = 1;
            count[axis] = 1;
            block[axis] = (hsize_t)run->count;
        } else {
            stride[axis] = (hsize_t)run->stride;
            count[axis] = (hsize_t)run->count;
            block[axis] = 1;
        }
        err = H5Sselect_hyperslab(fspace, op, start, stride, count, block);
        op = H5S_SELECT_OR;
    }
    return err;
}

/* Selects region rg in fspace (the union of the slice's runs); *mspace
 * becomes the matching dense memory space (caller closes). An empty slice
 * selects nothing in both, so that the rank can still take part in a
 * collective transfer. */
static ra_status slice_select(const char *path, const char *name,
                              hid_t fspace, const h5io_region *rg,
                              hid_t *mspace)
{
    const ra_slice *slice = rg->slice;
    hsize_t mdims[H5S_MAX_RANK];
    static const hsize_t one = 1;
    herr_t err = 0;

    *mspace = H5I_INVALID_HID;
    if (slice->count == 0) {
        *mspace = H5Screate_simple(1, &one, NULL);
        err = *mspace < 0 ? -1 : H5Sselect_none(*mspace);
        if (err >= 0)
            err = H5Sselect_none(fspace);
        goto done;
    }
    for (int i = 0; i < rg->rank; i++)
        mdims[i] = rg->dims[i];
    mdims[rg->axis] = (hsize_t)slice->count;
    err = select_runs(fspace, rg);
    if (err >= 0)
        *mspace = H5Screate_simple(rg->rank, mdims, NULL);
    if (*mspace < 0)
        err = -1;

done:
    if (err < 0) {
        if (*mspace >= 0)
            H5Sclose(*mspace);
        *mspace = H5I_INVALID_HID;
        return ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot select this "
                            "rank's %lld tokens on axis %d (%d runs from "
                            "%lld)", path, name, (long long)slice->count,
                            rg->axis, slice->nruns,
                            (long long)slice->run[0].start);
    }
    return RA_OK;
}

ra_status h5io_slice_transfer(h5io_dir dir, hid_t dset, hid_t fspace,
                              hid_t dxpl, const char *path, const char *name,
                              const h5io_region *rg, void *buf)
{
    hid_t mspace = H5I_INVALID_HID;
    int64_t dummy = 0; /* a valid address for an empty selection */
    void *at = rg->slice->count ? buf : (void *)&dummy;
    char why[H5IO_DETAIL_LEN];
    ra_status st = slice_select(path, name, fspace, rg, &mspace);
    if (st != RA_OK)
        return st;
    const herr_t err =
        dir == H5IO_READ
            ? H5Dread(dset, rg->mtype, mspace, fspace, dxpl, at)
            : H5Dwrite(dset, rg->mtype, mspace, fspace, dxpl, at);
    if (err < 0) {
        h5io_error_detail(why);
        st = ra_error_set(dir == H5IO_READ ? RA_ERR_INPUT : RA_ERR_IO,
                          "%s: dataset %s: %s this rank's %lld tokens failed: "
                          "%s", path, name,
                          dir == H5IO_READ ? "reading" : "writing",
                          (long long)rg->slice->count, why);
    }
    H5Sclose(mspace);
    return st;
}

ra_status h5io_dset_read(hid_t dset, hid_t dxpl, const char *path,
                         const char *name, const h5io_region *rg, void *buf)
{
    const hid_t fspace = H5Dget_space(dset);
    if (fspace < 0)
        return ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot get its "
                            "dataspace", path, name);
    const ra_status st = h5io_slice_transfer(H5IO_READ, dset, fspace, dxpl,
                                             path, name, rg, buf);
    H5Sclose(fspace);
    return st;
}
