/* read.c: parallel reading of input files, /q (B, N, H, D), /k (B, M, G, Dk)
 * and /v (B, M, G, Dv), each rank reading only the tokens its layout slice
 * names. */
#include <string.h>

#include "h5util.h"
#include "internal.h"

/* Checks that the sizes of /q, /k and /v fit one problem and fills shape. */
static ra_status shape_match(const char *path, const hsize_t *q,
                             const hsize_t *k, const hsize_t *v,
                             ra_shape *shape)
{
    char why[256];
    ra_status st;

    if (k[0] != q[0] || v[0] != q[0])
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: batch B = %llu "
                            "differs from /q (B = %llu)", path,
                            k[0] != q[0] ? "/k" : "/v",
                            (unsigned long long)(k[0] != q[0] ? k[0] : v[0]),
                            (unsigned long long)q[0]);
    if (v[1] != k[1])
        return ra_error_set(RA_ERR_INPUT, "%s: dataset /v: length M = %llu "
                            "differs from /k (M = %llu)", path,
                            (unsigned long long)v[1],
                            (unsigned long long)k[1]);
    if (v[2] != k[2])
        return ra_error_set(RA_ERR_INPUT, "%s: dataset /v: kv heads G = %llu "
                            "differ from /k (G = %llu)", path,
                            (unsigned long long)v[2],
                            (unsigned long long)k[2]);
    if (q[2] % k[2] != 0)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset /k: kv heads G = %llu "
                            "do not divide the query heads H = %llu of /q",
                            path, (unsigned long long)k[2],
                            (unsigned long long)q[2]);

    memset(shape, 0, sizeof *shape); /* fields not read here: defaults */
    shape->B = (int64_t)q[0];
    shape->N = (int64_t)q[1];
    shape->H = (int64_t)q[2];
    shape->D = (int64_t)q[3];
    shape->M = (int64_t)k[1];
    shape->G = (int64_t)k[2];
    shape->Dv = (int64_t)v[3];
    /* keys of another dim than the queries: only the additive score takes
     * them, which ra_forward_ex checks (and `ringattn run` explains) */
    shape->Dk = k[3] != q[3] ? (int64_t)k[3] : 0;
    if ((st = ra_shape_check(shape)) != RA_OK) {
        snprintf(why, sizeof why, "%s", ra_error_message());
        return ra_error_set(RA_ERR_INPUT, "%s: %s", path, why);
    }
    return RA_OK;
}

static ra_status shape_read(MPI_Comm comm, const char *path, ra_shape *shape)
{
    hid_t fapl = H5I_INVALID_HID, file = H5I_INVALID_HID;
    hsize_t q[4], k[4], v[4];
    ra_status st;

    if ((fapl = h5io_fapl_mpio(comm)) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: cannot set up MPI-IO file access",
                          path);
        goto cleanup;
    }
    if ((st = h5io_file_open(path, fapl, &file)) != RA_OK ||
        (st = h5io_dset_open(file, path, "/q", H5T_FLOAT, 4, q,
                             NULL)) != RA_OK ||
        (st = h5io_dset_open(file, path, "/k", H5T_FLOAT, 4, k,
                             NULL)) != RA_OK ||
        (st = h5io_dset_open(file, path, "/v", H5T_FLOAT, 4, v,
                             NULL)) != RA_OK)
        goto cleanup;
    st = shape_match(path, q, k, v, shape);

cleanup:
    if (file >= 0 && H5Fclose(file) < 0 && st == RA_OK)
        st = ra_error_set(RA_ERR_IO, "%s: closing the file failed", path);
    if (fapl >= 0)
        H5Pclose(fapl);
    return st;
}

ra_status ra_h5_read_shape(MPI_Comm comm, const char *path, ra_shape *shape)
{
    ra_error_clear();
    h5io_quiet quiet;
    ra_status st;

    h5io_quiet_begin(&quiet);
    st = ra_agree(comm, shape_read(comm, path, shape));
    h5io_quiet_end(&quiet);
    return st;
}

/* Reads this rank's slice of one input tensor (B, len, heads, dim) along
 * axis 1 into buf (B, slice->count, heads, dim), converting to float32;
 * collective. */
static ra_status tensor_read(hid_t file, hid_t dxpl, const char *path,
                             const char *name, const int64_t want[4],
                             const ra_slice *slice, float *buf)
{
    hid_t dset = H5I_INVALID_HID;
    hsize_t dims[4];
    char found[96], expect[96];
    ra_status st;

    if ((st = h5io_dset_open(file, path, name, H5T_FLOAT, 4, dims,
                             &dset)) != RA_OK)
        goto cleanup;
    for (int i = 0; i < 4; i++) {
        if (dims[i] != (hsize_t)want[i]) {
            hsize_t w[4] = {(hsize_t)want[0], (hsize_t)want[1],
                            (hsize_t)want[2], (hsize_t)want[3]};
            h5io_dims_format(dims, 4, found, sizeof found);
            h5io_dims_format(w, 4, expect, sizeof expect);
            st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: shape %s differs "
                              "from the expected %s", path, name, found,
                              expect);
            goto cleanup;
        }
    }
    st = h5io_dset_read(dset, dxpl, path, name, H5T_NATIVE_FLOAT, 4, dims, 1,
                        slice, buf);

cleanup:
    if (dset >= 0) H5Dclose(dset);
    return st;
}

static ra_status inputs_read(MPI_Comm comm, const char *path,
                             const ra_shape *s, ra_layout layout, float *q,
                             float *k, float *v)
{
    hid_t fapl = H5I_INVALID_HID, dxpl = H5I_INVALID_HID;
    hid_t file = H5I_INVALID_HID;
    const int64_t qdims[4] = {s->B, s->N, s->H, s->D};
    const int64_t kdims[4] = {s->B, s->M, s->G, ra_shape_dk(s)};
    const int64_t vdims[4] = {s->B, s->M, s->G, s->Dv};
    ra_slice sq, sk;
    ra_status st;
    int rank, nranks;

    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);
    sq = ra_layout_slice(layout, s->N, rank, nranks);
    sk = ra_layout_slice(layout, s->M, rank, nranks);

    if ((fapl = h5io_fapl_mpio(comm)) < 0 ||
        (dxpl = h5io_dxpl_collective()) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: cannot set up MPI-IO file access",
                          path);
        goto cleanup;
    }
    if ((st = h5io_file_open(path, fapl, &file)) == RA_OK &&
        (st = tensor_read(file, dxpl, path, "/q", qdims, &sq, q)) == RA_OK &&
        (st = tensor_read(file, dxpl, path, "/k", kdims, &sk, k)) == RA_OK)
        st = tensor_read(file, dxpl, path, "/v", vdims, &sk, v);

cleanup:
    if (file >= 0 && H5Fclose(file) < 0 && st == RA_OK)
        st = ra_error_set(RA_ERR_IO, "%s: closing the file failed", path);
    if (dxpl >= 0) H5Pclose(dxpl);
    if (fapl >= 0) H5Pclose(fapl);
    return st;
}

ra_status ra_h5_read_inputs(MPI_Comm comm, const char *path,
                            const ra_shape *shape, ra_layout layout,
                            float *q, float *k, float *v)
{
    ra_error_clear();
    h5io_quiet quiet;
    ra_status st;

    if ((st = ra_shape_check(shape)) != RA_OK)
        return st;
    if ((unsigned)layout > RA_LAYOUT_STRIPED)
        return ra_error_set(RA_ERR_ARG, "%s: unknown layout %d", path,
                            (int)layout);
    h5io_quiet_begin(&quiet);
    st = ra_agree(comm, inputs_read(comm, path, shape, layout, q, k, v));
    h5io_quiet_end(&quiet);
    return st;
}
