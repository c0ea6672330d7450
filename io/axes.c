/* axes.c: tensors stored tokens-first (B, N, H, D) or heads-first
 * (B, H, N, D): the order a dataset declares, and reading or writing a
 * rank's tokens of either from or into the engine's (B, n, H, D) without a
 * full-tensor copy. */
#include <string.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

const char *ra_axes_name(ra_axes axes)
{
    return axes == RA_AXES_BHND   ? "B,H,N,D"
           : axes == RA_AXES_BNHD ? "B,N,H,D"
                                  : "none";
}

const char *h5io_qkv_layout_name(ra_axes axes)
{
    return axes == RA_AXES_BHND ? "bhnd"
           : axes == RA_AXES_BNHD ? "bnhd"
                                  : "none";
}

ra_axes h5io_qkv_layout_parse(const char *name)
{
    return strcmp(name, "bhnd") == 0   ? RA_AXES_BHND
           : strcmp(name, "bnhd") == 0 ? RA_AXES_BNHD
                                       : RA_AXES_NONE;
}

/* value without blanks, into out[len] */
static void squeeze(const char *value, char *out, size_t len)
{
    size_t n = 0;
    for (const char *c = value; *c && n + 1 < len; c++)
        if (*c != ' ' && *c != '\t')
            out[n++] = *c;
    out[n] = '\0';
}

ra_status h5io_axes_of(hid_t dset, const char *path, const char *name,
                       ra_axes fallback, ra_axes *out)
{
    char value[64] = "", text[64], why[512];
    ra_status st;

    *out = fallback;
    const htri_t has = H5Aexists(dset, "axes");
    if (has == 0 && fallback == RA_AXES_NONE)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: no axes "
                            "attribute, and a 4-D tensor alone cannot say "
                            "whether it is (B,N,H,D) or (B,H,N,D): give "
                            "--qkv-layout bnhd or --qkv-layout bhnd (or the "
                            "attribute axes = \"B,N,H,D\" or \"B,H,N,D\")",
                            path, name);
    if (has == 0)
        return RA_OK;
    if (has < 0 || (st = h5io_attr_read_string(dset, path, "axes", value,
                                                sizeof value)) != RA_OK) {
        snprintf(why, sizeof why, "%s", has < 0 ? "cannot query attribute "
                 "axes" : ra_error_message());
        return ra_error_set(has < 0 ? RA_ERR_IO : st, "%s (of dataset %s)",
                            why, name);
    }
    squeeze(value, text, sizeof text);
    if (strcmp(text, "B,N,H,D") == 0)
        *out = RA_AXES_BNHD;
    else if (strcmp(text, "B,H,N,D") == 0)
        *out = RA_AXES_BHND;
    else
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: attribute axes "
                            "'%s' is neither B,N,H,D nor B,H,N,D", path, name,
                            value);
    return RA_OK;
}

void h5io_axes_dims(ra_axes axes, const hsize_t fdims[4], hsize_t dims[4])
{
    const int heads_first = axes == RA_AXES_BHND;
    dims[0] = fdims[0];
    dims[1] = fdims[heads_first ? 2 : 1];
    dims[2] = fdims[heads_first ? 1 : 2];
    dims[3] = fdims[3];
}

/* Selects, for batch b and head h of a (B, H, N, D) file space, the tokens
 * of slice in the file and the same tokens at head h of the dense memory
 * space (B, slice->count, H, D): both visit the tokens in increasing
 * position, so HDF5 pairs them in order. */
static herr_t head_select(hid_t fspace, hid_t mspace, const hsize_t fdims[4],
                          const ra_slice *slice, hsize_t b, hsize_t h)
{
    H5S_seloper_t op = H5S_SELECT_SET;
    hsize_t done = 0;
    herr_t err = 0;

    for (int r = 0; r < slice->nruns && err >= 0; r++) {
        const ra_run *run = &slice->run[r];
        if (run->count == 0)
            continue;
        const hsize_t n = (hsize_t)run->count;
        const hsize_t step = run->count == 1 ? 1 : (hsize_t)run->stride;
        const hsize_t fstart[4] = {b, h, (hsize_t)run->start, 0};
        const hsize_t fstride[4] = {1, 1, step, 1};
        const hsize_t fcount[4] = {1, 1, n, 1};
        const hsize_t fblock[4] = {1, 1, 1, fdims[3]};
        const hsize_t mstart[4] = {b, done, h, 0};
        const hsize_t mcount[4] = {1, n, 1, fdims[3]};
        err = H5Sselect_hyperslab(fspace, op, fstart, fstride, fcount,
                                  fblock);
        if (err >= 0)
            err = H5Sselect_hyperslab(mspace, op, mstart, NULL, mcount, NULL);
        op = H5S_SELECT_OR;
        done += n;
    }
    return err;
}

/* The file dataspace of dset into *fspace and a memory one of mdims into
 * *mspace; the caller closes both (those made), on failure too. */
static ra_status spaces_open(hid_t dset, const char *path, const char *name,
                             int mrank, const hsize_t *mdims, hid_t *fspace,
                             hid_t *mspace)
{
    if ((*fspace = H5Dget_space(dset)) < 0 ||
        (*mspace = H5Screate_simple(mrank, mdims, NULL)) < 0)
        return ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot get its "
                            "dataspace", path, name);
    return RA_OK;
}

/* The (B, H, N, D) transfer (dir: read into buf or write from it; where:
 * the file's path and the dataset's name): one per batch and head, the
 * same number on every rank, also after a failure (an empty slice, or a
 * rank that failed, selects nothing), so that no rank is left in a
 * collective. */
static ra_status heads_transfer(h5io_dir dir, hid_t dset, hid_t dxpl,
                                const char *const where[2], hid_t mtype,
                                const hsize_t fdims[4], const ra_slice *slice,
                                void *buf)
{
    const char *path = where[0], *name = where[1];
    const char *verb = dir == H5IO_READ ? "reading" : "writing";
    hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
    const hsize_t mdims[4] = {fdims[0], slice->count ? slice->count : 1,
                              fdims[1], fdims[3]};
    char why[H5IO_DETAIL_LEN];
    int64_t dummy = 0; /* a valid address for an empty selection */
    ra_status st = spaces_open(dset, path, name, 4, mdims, &fspace, &mspace);
    const hsize_t heads = st == RA_OK ? fdims[0] * fdims[1] : 0;
    for (hsize_t bh = 0; bh < heads; bh++) {
        const hsize_t b = bh / fdims[1], h = bh % fdims[1];
        const int mine = slice->count > 0 && st == RA_OK;
        herr_t err = mine ? head_select(fspace, mspace, fdims, slice, b, h)
                          : -1;
        if (mine && err < 0)
            st = ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot select the "
                              "tokens of head %llu", path, name,
                              (unsigned long long)h);
        if (err < 0 &&
            (H5Sselect_none(fspace) < 0 || H5Sselect_none(mspace) < 0) &&
            st == RA_OK)
            st = ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot select "
                              "nothing", path, name);
        void *at = err >= 0 ? buf : (void *)&dummy;
        const herr_t moved =
            dir == H5IO_READ ? H5Dread(dset, mtype, mspace, fspace, dxpl, at)
                             : H5Dwrite(dset, mtype, mspace, fspace, dxpl, at);
        if (moved < 0 && st == RA_OK) {
            h5io_error_detail(why);
            st = ra_error_set(dir == H5IO_READ ? RA_ERR_INPUT : RA_ERR_IO,
                              "%s: dataset %s: %s head %llu of this rank's "
                              "%lld tokens failed: %s", path, name, verb,
                              (unsigned long long)h, (long long)slice->count,
                              why);
        }
    }
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    return st;
}

int h5io_axes_token_axis(ra_axes axes)
{
    return axes == RA_AXES_BNHD ? 1 : 2;
}

ra_status h5io_dset_read_axes(hid_t dset, hid_t dxpl, const char *path,
                              const char *name, const h5io_region *rg,
                              void *buf)
{
    if (rg->axis == 1) /* stored (B, N, H, D): as it lies in memory */
        return h5io_dset_read(dset, dxpl, path, name, rg, buf);
    const char *const where[2] = {path, name};
    return heads_transfer(H5IO_READ, dset, dxpl, where, rg->mtype, rg->dims,
                          rg->slice, buf);
}

ra_status h5io_dset_write_heads(hid_t dset, hid_t dxpl, const char *path,
                                const char *name, hid_t mtype,
                                const hsize_t fdims[4], const ra_slice *slice,
                                const void *buf)
{
    const char *const where[2] = {path, name};
    return heads_transfer(H5IO_WRITE, dset, dxpl, where, mtype, fdims, slice,
                          (void *)buf);
}

/* Rows [row0, row0 + n) of batch b of an open (B, H, N, D) dataset into
 * out (n, H, D), head by head; independent I/O. */
static ra_status rows_read_heads(hid_t dset, const char *path,
                                 const char *name, const hsize_t fdims[4],
                                 hsize_t b, hsize_t row0, hsize_t n,
                                 double *out)
{
    hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
    const hsize_t mdims[3] = {n, fdims[1], fdims[3]};
    char why[H5IO_DETAIL_LEN];
    ra_status st = RA_OK;

    if ((st = spaces_open(dset, path, name, 3, mdims, &fspace,
                          &mspace)) != RA_OK)
        goto cleanup;
    for (hsize_t h = 0; h < fdims[1] && st == RA_OK; h++) {
        const hsize_t fstart[4] = {b, h, row0, 0};
        const hsize_t fcount[4] = {1, 1, n, fdims[3]};
        const hsize_t mstart[3] = {0, h, 0};
        const hsize_t mcount[3] = {n, 1, fdims[3]};
        if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, fstart, NULL, fcount,
                                NULL) < 0 ||
            H5Sselect_hyperslab(mspace, H5S_SELECT_SET, mstart, NULL, mcount,
                                NULL) < 0) {
            st = ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot select the "
                              "rows of head %llu", path, name,
                              (unsigned long long)h);
        } else if (H5Dread(dset, H5T_NATIVE_DOUBLE, mspace, fspace,
                           H5P_DEFAULT, out) < 0) {
            h5io_error_detail(why);
            st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: reading failed: "
                              "%s", path, name, why);
        }
    }

cleanup:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    return st;
}

ra_status h5io_read_rows_as(const char *path, const char *dset,
                            ra_axes fallback, int64_t b, int64_t row0,
                            int64_t nrows, double *out)
{
    hid_t file = H5I_INVALID_HID, id = H5I_INVALID_HID;
    hsize_t fdims[4], dims[4];
    ra_axes axes = fallback;
    h5io_quiet quiet;
    ra_status st;

    h5io_quiet_begin(&quiet);
    if ((st = h5io_file_open(path, H5P_DEFAULT, &file)) != RA_OK ||
        (st = h5io_dset_open(file, path, dset, H5T_FLOAT, 4, fdims,
                             &id)) != RA_OK ||
        (st = h5io_axes_of(id, path, dset, fallback, &axes)) != RA_OK)
        goto cleanup;
    h5io_axes_dims(axes, fdims, dims);
    if (b < 0 || (hsize_t)b >= dims[0] || row0 < 0 || nrows < 0 ||
        (hsize_t)(row0 + nrows) > dims[1])
        st = ra_error_set(RA_ERR_ARG, "%s: dataset %s: rows [%lld, %lld) of "
                          "batch %lld lie outside its size", path, dset,
                          (long long)row0, (long long)(row0 + nrows),
                          (long long)b);
    else if (axes == RA_AXES_BHND && nrows > 0)
        st = rows_read_heads(id, path, dset, fdims, (hsize_t)b,
                             (hsize_t)row0, (hsize_t)nrows, out);

cleanup:
    if (id >= 0) H5Dclose(id);
    if (file >= 0) H5Fclose(file);
    h5io_quiet_end(&quiet);
    if (st == RA_OK && axes == RA_AXES_BNHD)
        st = h5io_read_rows(path, dset, b, row0, nrows, out);
    return st;
}
