/* inspect.c: single-rank reading of ringattn files for the verify and info
 * subcommands: boxes of a dataset (as double, or int64 for masks), the run
 * attributes, and a listing. Default (sec2) driver, independent I/O, never
 * collective. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"
#include "score_features.h"

/* A box of a dataset: start[i] .. start[i] + count[i] on the first nfixed
 * axes and the whole of the others, of a dataset of rank dimensions and
 * class cls (as h5io_dset_open() checks), read as mtype. exact: the box
 * must be the whole dataset (a shape check). */
typedef struct {
    H5T_class_t cls;
    hid_t mtype;
    int rank, nfixed;
    const int64_t *start, *count;
    int exact;
} box_spec;

/* The file box of box_read(): fstart, fcount from bx, checked against
 * dims; *empty when it holds nothing. */
static ra_status box_bounds(const char *path, const char *name,
                            const box_spec *bx, const hsize_t *dims,
                            hsize_t *fstart, hsize_t *fcount, int *empty)
{
    const int rank = bx->rank, nfixed = bx->nfixed;
    const int64_t *start = bx->start, *count = bx->count;
    char found[96], expect[96];
    *empty = 0;
    for (int i = 0; i < rank; i++) {
        fstart[i] = i < nfixed ? (hsize_t)start[i] : 0;
        fcount[i] = i < nfixed ? (hsize_t)count[i] : dims[i];
        *empty |= fcount[i] == 0;
    }
    for (int i = 0; bx->exact && i < rank; i++) {
        if (fstart[i] != 0 || fcount[i] != dims[i]) {
            h5io_dims_format(fcount, rank, expect, sizeof expect);
            h5io_dims_format(dims, rank, found, sizeof found);
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: expected "
                                "shape %s, found %s", path, name, expect,
                                found);
        }
    }
    for (int i = 0; i < nfixed; i++)
        if (start[i] < 0 || count[i] < 0 || fstart[i] > dims[i] ||
            fcount[i] > dims[i] - fstart[i])
            return ra_error_set(RA_ERR_ARG, "%s: dataset %s: indices [%lld, "
                                "%lld) on axis %d lie outside its size %llu",
                                path, name, (long long)start[i],
                                (long long)start[i] + (long long)count[i], i,
                                (unsigned long long)dims[i]);
    return RA_OK;
}

/* Reads box bx of dataset name into out, row-major. RA_ERR_ARG when the
 * box sticks out of the dataset; with bx->exact, RA_ERR_INPUT unless the
 * box is the whole dataset. present NULL: the dataset must exist; else an
 * absent one sets *present = 0 and returns RA_OK. */
static ra_status box_read(const char *path, const char *name,
                          const box_spec *bx, void *out, int *present)
{
    hid_t file = H5I_INVALID_HID, dset = H5I_INVALID_HID;
    hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
    hsize_t dims[4], fstart[4], fcount[4];
    char why[H5IO_DETAIL_LEN];
    h5io_quiet quiet;
    ra_status st;
    int empty = 0;

    h5io_quiet_begin(&quiet);
    if (present)
        *present = 0;
    if ((st = h5io_file_open(path, H5P_DEFAULT, &file)) != RA_OK)
        goto cleanup;
    if ((st = h5io_link_check(file, path, name)) != RA_OK ||
        (present && H5Lexists(file, name, H5P_DEFAULT) <= 0))
        goto cleanup;
    if ((st = h5io_dset_open(file, path, name, bx->cls, bx->rank, dims,
                             &dset)) != RA_OK)
        goto cleanup;
    if (present)
        *present = 1;
    if ((st = box_bounds(path, name, bx, dims, fstart, fcount,
                         &empty)) != RA_OK || empty)
        goto cleanup;
    if ((fspace = H5Dget_space(dset)) < 0 ||
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, fstart, NULL, fcount,
                            NULL) < 0 ||
        (mspace = H5Screate_simple(bx->rank, fcount, NULL)) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot select the "
                          "elements to read", path, name);
        goto cleanup;
    }
    if (H5Dread(dset, bx->mtype, mspace, fspace, H5P_DEFAULT, out) < 0) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: reading failed: %s",
                          path, name, why);
    }

cleanup:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (dset >= 0) H5Dclose(dset);
    if (file >= 0) H5Fclose(file);
    h5io_quiet_end(&quiet);
    return st;
}

ra_status h5io_read_rows(const char *path, const char *dset, int64_t b,
                         int64_t row0, int64_t nrows, double *out)
{
    const int64_t start[2] = {b, row0};
    const int64_t count[2] = {1, nrows};
    const box_spec bx = {H5T_FLOAT, H5T_NATIVE_DOUBLE, 4, 2, start, count, 0};

    return box_read(path, dset, &bx, out, NULL);
}

ra_status h5io_out_name(const char *path, const char *leaf, char *name,
                        size_t len)
{
    char group[H5IO_OUT_GROUP_MAX + 1] = "";
    const char *problem;
    hid_t file = H5I_INVALID_HID;
    h5io_quiet quiet;
    h5io_quiet_begin(&quiet);
    ra_status st = h5io_file_open(path, H5P_DEFAULT, &file);
    if (st == RA_OK)
        st = h5io_attr_read_string(file, path, "out_group", group,
                                   sizeof group);
    if (file >= 0) H5Fclose(file);
    h5io_quiet_end(&quiet);
    if (st == RA_OK && group[0] && (problem = h5io_out_group_problem(group)))
        st = ra_error_set(RA_ERR_INPUT, "%s: attribute out_group '%s': %s",
                          path, group, problem);
    const size_t used = strlen(group);
    snprintf(name, len, "%s%s%s", group,
             used && group[used - 1] == '/' ? "" : "/", leaf);
    return st;
}

ra_status h5io_read_o_rows(const char *path, int64_t b, int64_t row0,
                           int64_t nrows, double *out)
{
    char name[300];
    ra_status st = h5io_out_name(path, "o", name, sizeof name);
    return st != RA_OK ? st : h5io_read_rows_as(path, name, RA_AXES_BNHD, b,
                                                row0, nrows, out);
}

ra_status h5io_read_lse(const char *path, int64_t b, int64_t h, int64_t i0,
                        int64_t n, double *out)
{
    const int64_t start[3] = {b, h, i0};
    const int64_t count[3] = {1, 1, n};
    const box_spec bx = {H5T_FLOAT, H5T_NATIVE_DOUBLE, 3, 3, start, count, 0};
    char name[300];
    ra_status st = h5io_out_name(path, "lse", name, sizeof name);

    return st != RA_OK ? st : box_read(path, name, &bx, out, NULL);
}

ra_status h5io_read_segments(const char *path, const char *dset, int64_t b,
                             int64_t start, int64_t count, int64_t *out,
                             int *present)
{
    const int64_t first[2] = {b, start};
    const int64_t n[2] = {1, count};
    const box_spec bx = {H5T_INTEGER, H5T_NATIVE_INT64, 2, 2, first, n, 0};

    return box_read(path, dset, &bx, out, present);
}

ra_status h5io_read_weights(const char *path, const char *name, int rank,
                            const int64_t *dims, float *out, int *present)
{
    const int64_t zero[4] = {0, 0, 0, 0};
    if (rank < 1 || rank > 4 ||
        ra_mul_checked(ra_count_checked(rank, dims), 4) < 0)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: its size "
                            "overflows 64 bits", path, name);
    const box_spec bx = {H5T_FLOAT, H5T_NATIVE_FLOAT, rank, rank, zero, dims,
                         1};
    ra_status st = box_read(path, name, &bx, out, present);
    if (st != RA_OK || !*present)
        return st;
    return h5io_scan_array(path, name, rank, dims, out);
}

static ra_status attr_read(hid_t file, const char *path, const char *name,
                           H5T_class_t cls, hid_t mtype, void *out,
                           int *present);

ra_status h5io_read_int_attr(const char *path, const char *name,
                             int64_t *out, int *present)
{
    hid_t file = H5I_INVALID_HID;
    h5io_quiet quiet;
    ra_status st;
    h5io_quiet_begin(&quiet);
    *present = 0;
    if ((st = h5io_file_open(path, H5P_DEFAULT, &file)) == RA_OK)
        st = attr_read(file, path, name, H5T_INTEGER, H5T_NATIVE_INT64, out,
                       present);
    if (file >= 0) H5Fclose(file);
    h5io_quiet_end(&quiet);
    return st;
}

ra_status h5io_dataset_dims(const char *path, const char *name, int *rank,
                            int64_t dims[4], int *present)
{
    hid_t file = H5I_INVALID_HID, dset = H5I_INVALID_HID;
    hid_t space = H5I_INVALID_HID;
    hsize_t d[4], fd[4];
    ra_axes axes = RA_AXES_BNHD;
    h5io_quiet quiet;
    ra_status st;

    h5io_quiet_begin(&quiet);
    *present = 0;
    if ((st = h5io_file_open(path, H5P_DEFAULT, &file)) != RA_OK)
        goto cleanup;
    if ((st = h5io_link_check(file, path, name)) != RA_OK ||
        H5Lexists(file, name, H5P_DEFAULT) <= 0)
        goto cleanup;
    if ((dset = H5Dopen2(file, name, H5P_DEFAULT)) < 0 ||
        (space = H5Dget_space(dset)) < 0 ||
        (*rank = H5Sget_simple_extent_ndims(space)) < 0 || *rank > 4 ||
        H5Sget_simple_extent_dims(space, fd, NULL) < 0) {
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: cannot read its "
                          "shape (rank must be at most 4)", path, name);
        goto cleanup;
    }
    memcpy(d, fd, sizeof d);
    if (*rank == 4) { /* a tensor: (B, N, H, D) in either stored order */
        if ((st = h5io_axes_of(dset, path, name, RA_AXES_BNHD, &axes)) !=
            RA_OK)
            goto cleanup;
        h5io_axes_dims(axes, fd, d);
    }
    for (int i = 0; i < *rank; i++)
        dims[i] = (int64_t)d[i];
    *present = 1;
cleanup:
    if (space >= 0) H5Sclose(space);
    if (dset >= 0) H5Dclose(dset);
    if (file >= 0) H5Fclose(file);
    h5io_quiet_end(&quiet);
    return st;
}

ra_status h5io_segment_names_from(const char *path, const ra_h5_source *src,
                                  const char **q_name, const char **kv_name)
{
    const char *both = src && src->segments ? src->segments : "/segments";
    const char *q = src && src->q_segments ? src->q_segments : "/q_segments";
    const char *kv = src && src->kv_segments ? src->kv_segments
                                             : "/kv_segments";
    int64_t probe;
    int present;
    ra_status st;
    *q_name = *kv_name = NULL;
    /* one dataset serves both sides of self-attention */
    if ((st = h5io_read_segments(path, both, 0, 0, 1, &probe,
                                 &present)) != RA_OK)
        return st;
    if (present) {
        *q_name = *kv_name = both;
        return RA_OK;
    }
    if ((st = h5io_read_segments(path, q, 0, 0, 1, &probe,
                                 &present)) != RA_OK)
        return st;
    if (present) {
        *q_name = q;
        *kv_name = kv;
    }
    return RA_OK;
}

ra_status h5io_segment_names(const char *path, const char **q_name,
                             const char **kv_name)
{
    return h5io_segment_names_from(path, NULL, q_name, kv_name);
}

ra_status h5io_read_out_shape(const char *path, int64_t dims_o[4],
                              int64_t dims_lse[3])
{
    hid_t file = H5I_INVALID_HID, oset = H5I_INVALID_HID;
    hsize_t fo[4], o[4], lse[3];
    char oname[300], lname[300];
    ra_axes axes;
    h5io_quiet quiet;
    ra_status st;

    if ((st = h5io_out_name(path, "o", oname, sizeof oname)) != RA_OK ||
        (st = h5io_out_name(path, "lse", lname, sizeof lname)) != RA_OK)
        return st;
    h5io_quiet_begin(&quiet);
    if ((st = h5io_file_open(path, H5P_DEFAULT, &file)) != RA_OK ||
        (st = h5io_dset_open(file, path, oname, H5T_FLOAT, 4, fo,
                             &oset)) != RA_OK ||
        (st = h5io_axes_of(oset, path, oname, RA_AXES_BNHD, &axes)) !=
            RA_OK ||
        (st = h5io_dset_open(file, path, lname, H5T_FLOAT, 3, lse,
                             NULL)) != RA_OK)
        goto cleanup;
    h5io_axes_dims(axes, fo, o); /* (B, N, H, Dv) in either order */
    for (int i = 0; i < 4; i++)
        dims_o[i] = (int64_t)o[i];
    for (int i = 0; i < 3; i++)
        dims_lse[i] = (int64_t)lse[i];

cleanup:
    if (oset >= 0) H5Dclose(oset);
    if (file >= 0) H5Fclose(file);
    h5io_quiet_end(&quiet);
    return st;
}

/* Opens the root attribute name and checks that it holds one value of
 * class cls (what: its name in a message); the caller closes the three
 * handles, which stay negative where opening failed. */
static ra_status attr_open_one(hid_t file, const char *path, const char *name,
                               H5T_class_t cls, const char *what, hid_t *attr,
                               hid_t *type, hid_t *space)
{
    char tname[32];
    if ((*attr = H5Aopen(file, name, H5P_DEFAULT)) < 0 ||
        (*type = H5Aget_type(*attr)) < 0 ||
        (*space = H5Aget_space(*attr)) < 0)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute %s: cannot open it",
                            path, name);
    if (H5Tget_class(*type) != cls ||
        H5Sget_simple_extent_npoints(*space) != 1) {
        h5io_type_name(*type, tname, sizeof tname);
        return ra_error_set(RA_ERR_INPUT, "%s: attribute %s: expected one %s, "
                            "found %lld of %s", path, name, what,
                            (long long)H5Sget_simple_extent_npoints(*space),
                            tname);
    }
    return RA_OK;
}

/* Reads the open attribute name as mtype into buf; RA_ERR_INPUT with
 * HDF5's cause when that fails. */
static ra_status attr_fetch(hid_t attr, hid_t mtype, void *buf,
                           const char *path, const char *name)
{
    char why[H5IO_DETAIL_LEN];
    if (H5Aread(attr, mtype, buf) >= 0)
        return RA_OK;
    h5io_error_detail(why);
    return ra_error_set(RA_ERR_INPUT, "%s: attribute %s: reading failed: %s",
                        path, name, why);
}

/* Reads the single-valued root attribute name, of class cls, as mtype.
 * present NULL: the attribute must exist; else an absent one sets
 * *present = 0 and leaves out alone. */
static ra_status attr_read(hid_t file, const char *path, const char *name,
                           H5T_class_t cls, hid_t mtype, void *out,
                           int *present)
{
    hid_t attr = H5I_INVALID_HID, type = H5I_INVALID_HID;
    hid_t space = H5I_INVALID_HID;
    ra_status st = RA_OK;

    if (H5Aexists(file, name) <= 0) {
        if (present) {
            *present = 0;
            return RA_OK;
        }
        return ra_error_set(RA_ERR_INPUT, "%s: attribute %s: missing (not a "
                            "ringattn output file?)", path, name);
    }
    if (present)
        *present = 1;
    if ((st = attr_open_one(file, path, name, cls,
                            cls == H5T_FLOAT ? "float" : "integer", &attr,
                            &type, &space)) != RA_OK)
        goto cleanup;
    st = attr_fetch(attr, mtype, out, path, name);

cleanup:
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    return st;
}

ra_status h5io_attr_read_string(hid_t file, const char *path,
                                const char *name, char *out, size_t len)
{
    hid_t attr = H5I_INVALID_HID, type = H5I_INVALID_HID;
    hid_t space = H5I_INVALID_HID, mtype = H5I_INVALID_HID;
    ra_status st = RA_OK;
    char *vstr = NULL;
    size_t size;
    int variable;

    if (H5Aexists(file, name) <= 0)
        return RA_OK;
    if ((st = attr_open_one(file, path, name, H5T_STRING, "string", &attr,
                            &type, &space)) != RA_OK)
        goto cleanup;
    variable = H5Tis_variable_str(type) > 0;
    size = H5Tget_size(type);
    /* the character set must match: h5py writes UTF-8 strings */
    if ((mtype = H5Tcopy(H5T_C_S1)) < 0 ||
        H5Tset_size(mtype, variable ? H5T_VARIABLE : len) < 0 ||
        H5Tset_strpad(mtype, H5T_STR_NULLTERM) < 0 ||
        H5Tset_cset(mtype, H5Tget_cset(type)) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: attribute %s: cannot make a memory "
                          "type", path, name);
        goto cleanup;
    }
    if (!variable && size >= len) {
        st = ra_error_set(RA_ERR_INPUT, "%s: attribute %s: longer than %zu "
                          "characters", path, name, len - 1);
        goto cleanup;
    }
    if ((st = attr_fetch(attr, mtype, variable ? (void *)&vstr : (void *)out,
                         path, name)) != RA_OK)
        goto cleanup;
    if (variable) {
        if (vstr && strlen(vstr) >= len)
            st = ra_error_set(RA_ERR_INPUT, "%s: attribute %s: longer than "
                              "%zu characters", path, name, len - 1);
        else
            snprintf(out, len, "%s", vstr ? vstr : "");
    }

cleanup:
    if (vstr) H5free_memory(vstr);
    if (mtype >= 0) H5Tclose(mtype);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    return st;
}

/* Every score feature's attribute into num (0, off, when absent). */
static ra_status features_read(hid_t file, const char *path,
                               ra_numerics *num)
{
    ra_features_copy(num, NULL);
    for (int i = 0; i < ra_score_feature_count; i++) {
        double v = 0;
        int present;
        ra_status st = attr_read(file, path, ra_score_features[i].name,
                                 H5T_FLOAT, H5T_NATIVE_DOUBLE, &v, &present);
        if (st != RA_OK)
            return st;
        ra_feature_set(num, i, v);
    }
    return RA_OK;
}

/* RoPE, ALiBi, the score features and the sinks' dataset as the run
 * recorded them (defaults: none of them). */
static ra_status posenc_attrs_read(hid_t file, const char *path,
                                   h5io_run_attrs *a)
{
    int present;
    ra_status st;
    snprintf(a->rope, sizeof a->rope, "none");
    snprintf(a->align, sizeof a->align, "tensor");
    a->rope_base = RA_ROPE_BASE_DEFAULT;
    if ((st = h5io_attr_read_string(file, path, "rope", a->rope,
                               sizeof a->rope)) != RA_OK ||
        (st = attr_read(file, path, "rope_base", H5T_FLOAT, H5T_NATIVE_DOUBLE,
                        &a->rope_base, &present)) != RA_OK ||
        (st = attr_read(file, path, "alibi", H5T_INTEGER, H5T_NATIVE_INT,
                        &a->alibi, &present)) != RA_OK ||
        (st = h5io_attr_read_string(file, path, "align", a->align,
                                    sizeof a->align)) != RA_OK ||
        (st = features_read(file, path, &a->features)) != RA_OK ||
        (st = h5io_attr_read_string(file, path, "sinks_dataset",
                                    a->sinks_dataset,
                                    sizeof a->sinks_dataset)) != RA_OK)
        return st;
    return h5io_attr_read_string(file, path, "alibi_slopes", a->alibi_slopes,
                            sizeof a->alibi_slopes);
}

/* The arithmetic the run used: its precision and how K/V travelled
 * (defaults: fp32 both, as before they were recorded). */
static ra_status numerics_attrs_read(hid_t file, const char *path,
                                     h5io_run_attrs *a)
{
    ra_status st;
    snprintf(a->precision, sizeof a->precision, "fp32");
    snprintf(a->wire, sizeof a->wire, "fp32");
    if ((st = h5io_attr_read_string(file, path, "precision", a->precision,
                                    sizeof a->precision)) != RA_OK)
        return st;
    return h5io_attr_read_string(file, path, "wire", a->wire, sizeof a->wire);
}

/* The data a run read and wrote: datasets, their order, masks, /o's type;
 * the defaults of files written before these were recorded stay. */
static ra_status run_attrs_data(hid_t file, const char *path,
                                h5io_run_attrs *a)
{
    static const char *const names[3] = {"q_dataset", "k_dataset",
                                         "v_dataset"};
    static const char *const mask_attrs[5] = {
        "q_lens_dataset", "kv_lens_dataset", "segments_dataset",
        "q_segments_dataset", "kv_segments_dataset"};
    ra_status st;
    snprintf(a->qkv_layout, sizeof a->qkv_layout, "bnhd");
    snprintf(a->out_dtype, sizeof a->out_dtype, "fp32");
    for (int i = 0; i < 3; i++)
        snprintf(a->names[i], sizeof a->names[i], "/%c", "qkv"[i]);
    if ((st = h5io_attr_read_string(file, path, "masks", a->masks,
                                    sizeof a->masks)) != RA_OK ||
        (st = h5io_attr_read_string(file, path, "qkv_layout", a->qkv_layout,
                                    sizeof a->qkv_layout)) != RA_OK ||
        (st = h5io_attr_read_string(file, path, "out_dtype", a->out_dtype,
                                    sizeof a->out_dtype)) != RA_OK ||
        (st = h5io_attr_read_string(file, path, "forward", a->forward,
                                    sizeof a->forward)) != RA_OK)
        return st;
    for (int i = 0; i < 3 && st == RA_OK; i++)
        st = h5io_attr_read_string(file, path, names[i], a->names[i],
                                   sizeof a->names[i]);
    for (int i = 0; i < 5 && st == RA_OK; i++)
        st = h5io_attr_read_string(file, path, mask_attrs[i], a->mask_sets[i],
                                   sizeof a->mask_sets[i]);
    return st;
}

/* Values no run records (a scale not finite, a window beyond the
 * options' range [0, 2^40]) mean a damaged file: refused naming it. */
static ra_status run_attrs_range(const char *path, const h5io_run_attrs *a,
                                 int scale_present)
{
    const int64_t limit = (int64_t)1 << 40;
    if (scale_present && !isfinite(a->scale))
        return ra_error_set(RA_ERR_INPUT, "%s: attribute scale: %g is not a "
                            "finite number", path, a->scale);
    for (int side = 0; a->window && side < 2; side++) {
        const int64_t w = side ? a->window_right : a->window_left;
        if (w < 0 || w > limit)
            return ra_error_set(RA_ERR_INPUT, "%s: attribute %s: %lld is "
                                "outside [0, %lld]", path,
                                side ? "window_right" : "window_left",
                                (long long)w, (long long)limit);
    }
    return RA_OK;
}

ra_status h5io_read_run_attrs(const char *path, h5io_run_attrs *a)
{
    hid_t file = H5I_INVALID_HID;
    h5io_quiet quiet;
    ra_status st;
    int present, scale_present;

    memset(a, 0, sizeof *a);
    snprintf(a->layout, sizeof a->layout, "contiguous");
    snprintf(a->score, sizeof a->score, "dot");
    a->sigma = RA_SIGMA_DEFAULT;
    a->scale = NAN; /* absent: a score without a scale */
    h5io_quiet_begin(&quiet);
    if ((st = h5io_file_open(path, H5P_DEFAULT, &file)) != RA_OK ||
        (st = attr_read(file, path, "causal", H5T_INTEGER, H5T_NATIVE_INT,
                        &a->causal, NULL)) != RA_OK ||
        (st = attr_read(file, path, "scale", H5T_FLOAT, H5T_NATIVE_DOUBLE,
                        &a->scale, &scale_present)) != RA_OK ||
        (st = attr_read(file, path, "seq_q", H5T_INTEGER, H5T_NATIVE_INT64,
                        &a->seq_q, NULL)) != RA_OK ||
        (st = attr_read(file, path, "seq_kv", H5T_INTEGER, H5T_NATIVE_INT64,
                        &a->seq_kv, NULL)) != RA_OK ||
        (st = attr_read(file, path, "window", H5T_INTEGER, H5T_NATIVE_INT,
                        &a->window, &present)) != RA_OK ||
        (st = attr_read(file, path, "window_left", H5T_INTEGER,
                        H5T_NATIVE_INT64, &a->window_left,
                        &present)) != RA_OK ||
        (st = attr_read(file, path, "window_right", H5T_INTEGER,
                        H5T_NATIVE_INT64, &a->window_right,
                        &present)) != RA_OK ||
        (st = h5io_attr_read_string(file, path, "layout", a->layout,
                               sizeof a->layout)) != RA_OK ||
        (st = h5io_attr_read_string(file, path, "score", a->score,
                               sizeof a->score)) != RA_OK ||
        (st = attr_read(file, path, "sigma", H5T_FLOAT, H5T_NATIVE_DOUBLE,
                        &a->sigma, &present)) != RA_OK)
        goto cleanup;
    st = run_attrs_range(path, a, scale_present);
    if (st == RA_OK)
        st = run_attrs_data(file, path, a);
    if (st == RA_OK)
        st = posenc_attrs_read(file, path, a);
    if (st == RA_OK)
        st = numerics_attrs_read(file, path, a);

cleanup:
    if (file >= 0) H5Fclose(file);
    h5io_quiet_end(&quiet);
    return st;
}

/* ---- info ------------------------------------------------------------ */

#define INFO_MAX_VALUES 8 /* values of an array attribute shown */

/* State of the two passes over a file: pass 0 measures columns, pass 1
 * prints. */
typedef struct {
    FILE *out;
    const char *path;
    int pass;
    int name_w, shape_w;
    int count;
    ra_status st;  /* the first failure inside a callback */
} info_ctx;

/* Prints x with the fewest digits that read back as x. */
static void print_double(FILE *out, double x)
{
    char buf[40];

    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    fputs(buf, out);
}

/* Prints the n values in buf (each size bytes, read as attr_print's memory
 * type for an attribute of class cls and file type type): a number, a
 * quoted string, or a list of the first INFO_MAX_VALUES of them. */
static void values_print(FILE *out, H5T_class_t cls, hid_t type, int vstr,
                         const void *buf, hssize_t n, size_t size)
{
    const size_t shown = (size_t)n < INFO_MAX_VALUES ? (size_t)n
                                                     : INFO_MAX_VALUES;
    if (n > 1)
        fputc('[', out);
    for (size_t i = 0; i < shown; i++) {
        const char *at = (const char *)buf + i * size;
        if (i)
            fputs(", ", out);
        if (cls == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_NONE)
            fprintf(out, "%llu", *(const unsigned long long *)at);
        else if (cls == H5T_INTEGER)
            fprintf(out, "%lld", *(const long long *)at);
        else if (cls == H5T_FLOAT)
            print_double(out, *(const double *)at);
        else if (vstr)
            fprintf(out, "\"%s\"", *(char *const *)at ? *(char *const *)at
                                                        : "");
        else
            fprintf(out, "\"%.*s\"", (int)strnlen(at, size), at);
    }
    if ((size_t)n > shown)
        fprintf(out, ", ... (%lld values)", (long long)n);
    if (n > 1)
        fputc(']', out);
}

/* The memory type attr_print reads an attribute of file type type and class
 * cls as: 64-bit integers, doubles, or strings (a variable-length one
 * keeping the file's character set: h5py writes UTF-8); 0 for a class it
 * does not print, negative on failure. */
static hid_t attr_memtype(hid_t type, H5T_class_t cls, int vstr)
{
    hid_t mtype;
    if (cls == H5T_INTEGER)
        return H5Tcopy(H5Tget_sign(type) == H5T_SGN_NONE ? H5T_NATIVE_ULLONG
                                                         : H5T_NATIVE_LLONG);
    if (cls == H5T_FLOAT)
        return H5Tcopy(H5T_NATIVE_DOUBLE);
    if (cls != H5T_STRING)
        return 0;
    if (!vstr)
        return H5Tcopy(type);
    if ((mtype = H5Tcopy(H5T_C_S1)) >= 0 &&
        (H5Tset_size(mtype, H5T_VARIABLE) < 0 ||
         H5Tset_cset(mtype, H5Tget_cset(type)) < 0)) {
        H5Tclose(mtype);
        return H5I_INVALID_HID;
    }
    return mtype;
}

/* Prints the value of an attribute (values_print). */
static ra_status attr_print(FILE *out, const char *path, const char *name,
                            hid_t attr)
{
    hid_t type = H5I_INVALID_HID, space = H5I_INVALID_HID;
    hid_t mtype = H5I_INVALID_HID;
    H5T_class_t cls;
    ra_status st = RA_OK;
    hssize_t n;
    size_t size;
    char tname[32];
    void *buf = NULL;
    int vstr;

    if ((type = H5Aget_type(attr)) < 0 || (space = H5Aget_space(attr)) < 0 ||
        (n = H5Sget_simple_extent_npoints(space)) < 0) {
        st = ra_error_set(RA_ERR_INPUT, "%s: attribute %s: cannot open it",
                          path, name);
        goto cleanup;
    }
    cls = H5Tget_class(type);
    vstr = cls == H5T_STRING && H5Tis_variable_str(type) > 0;
    if ((mtype = attr_memtype(type, cls, vstr)) == 0) {
        mtype = H5I_INVALID_HID; /* nothing to close */
        h5io_type_name(type, tname, sizeof tname);
        fprintf(out, "(%s)", tname);
        goto cleanup;
    }
    if (mtype < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: attribute %s: cannot make a memory "
                          "type", path, name);
        goto cleanup;
    }
    size = H5Tget_size(mtype);
    if (n == 0) { /* an empty list */
        fputs("[]", out);
    } else if (!(buf = calloc((size_t)n, size))) {
        st = ra_error_set(RA_ERR_NOMEM, "%s: attribute %s: out of memory",
                          path, name);
    } else if ((st = attr_fetch(attr, mtype, buf, path, name)) == RA_OK) {
        values_print(out, cls, type, vstr, buf, n, size);
    }

cleanup:
    if (buf && vstr)
        for (hssize_t i = 0; i < n; i++)
            H5free_memory(((char **)buf)[i]);
    free(buf);
    if (mtype >= 0) H5Tclose(mtype);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    return st;
}

/* H5Lvisit callback: measures or prints one dataset, skips other objects. */
static herr_t info_dataset(hid_t group, const char *name,
                           const H5L_info_t *link, void *arg)
{
    info_ctx *c = arg;
    hid_t obj = H5I_INVALID_HID, space = H5I_INVALID_HID;
    hid_t type = H5I_INVALID_HID;
    hsize_t dims[H5S_MAX_RANK];
    char shape[256], tname[32], axes[64] = "";
    herr_t rc = 0;
    int rank, len;

    if (link->type != H5L_TYPE_HARD &&
        !h5io_link_followable(group, c->path, name)) {
        ra_error_clear(); /* listed as not followed by h5io_links_list() */
        return 0;
    }
    if ((obj = H5Oopen(group, name, H5P_DEFAULT)) < 0)
        return -1;
    if (H5Iget_type(obj) != H5I_DATASET)
        goto cleanup;
    if ((space = H5Dget_space(obj)) < 0 || (type = H5Dget_type(obj)) < 0 ||
        (rank = H5Sget_simple_extent_ndims(space)) < 0 ||
        H5Sget_simple_extent_dims(space, dims, NULL) < 0) {
        rc = -1;
        goto cleanup;
    }
    if (rank == 0)
        snprintf(shape, sizeof shape, "scalar");
    else
        h5io_dims_format(dims, rank, shape, sizeof shape);
    h5io_type_name(type, tname, sizeof tname);
    if (h5io_attr_read_string(obj, c->path, "axes", axes, sizeof axes) !=
        RA_OK)
        ra_error_clear(); /* an unreadable order: the line says none */
    len = (int)strlen(name) + 1;
    if (c->pass == 0) {
        c->name_w = len > c->name_w ? len : c->name_w;
        c->shape_w = (int)strlen(shape) > c->shape_w ? (int)strlen(shape)
                                                     : c->shape_w;
    } else {
        fprintf(c->out, "  /%-*s  %-*s  %s%s%s\n", c->name_w - 1, name,
                c->shape_w, shape, tname, axes[0] ? "  axes " : "", axes);
    }
    c->count++;

cleanup:
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    H5Oclose(obj);
    return rc;
}

/* H5Aiterate2 callback: measures or prints one root attribute. */
static herr_t info_attr(hid_t loc, const char *name, const H5A_info_t *ainfo,
                        void *arg)
{
    info_ctx *c = arg;
    hid_t attr;
    ra_status st;

    c->count++;
    if (c->pass == 0) {
        int len = (int)strlen(name);
        c->name_w = len > c->name_w ? len : c->name_w;
        return 0;
    }
    if ((attr = H5Aopen(loc, name, H5P_DEFAULT)) < 0)
        return -1;
    fprintf(c->out, "  %-*s = ", c->name_w, name);
    st = attr_print(c->out, c->path, name, attr);
    fputc('\n', c->out);
    H5Aclose(attr);
    if (st != RA_OK) {
        c->st = st;
        return -1;
    }
    return 0;
}

ra_status h5io_info(const char *path, FILE *out)
{
    hid_t file = H5I_INVALID_HID;
    info_ctx c = {out, path, 0, 0, 0, 0, RA_OK};
    h5io_quiet quiet;
    ra_status st;

    h5io_quiet_begin(&quiet);
    if ((st = h5io_file_open(path, H5P_DEFAULT, &file)) != RA_OK)
        goto cleanup;

    fprintf(out, "%s\ndatasets:\n", path);
    for (c.pass = 0; c.pass < 2; c.pass++) {
        c.count = 0;
        if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, info_dataset, &c) < 0) {
            char why[H5IO_DETAIL_LEN];
            h5io_error_detail(why);
            st = ra_error_set(RA_ERR_INPUT, "%s: listing the datasets failed: "
                              "%s", path, why);
            goto cleanup;
        }
    }
    if (c.count == 0)
        fprintf(out, "  (none)\n");
    h5io_links_list(file, path, out);

    fprintf(out, "attributes:\n");
    c.name_w = 0;
    for (c.pass = 0; c.pass < 2; c.pass++) {
        c.count = 0;
        if (H5Aiterate2(file, H5_INDEX_NAME, H5_ITER_INC, NULL, info_attr,
                        &c) < 0) {
            st = c.st != RA_OK ? c.st
                               : ra_error_set(RA_ERR_INPUT, "%s: listing the "
                                              "root attributes failed", path);
            goto cleanup;
        }
    }
    if (c.count == 0)
        fprintf(out, "  (none)\n");
    h5io_tmp_list(path, out);

cleanup:
    if (file >= 0) H5Fclose(file);
    h5io_quiet_end(&quiet);
    return st;
}
