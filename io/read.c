/* read.c: parallel reading of input files, /q (B, N, H, D), /k (B, M, G, D)
 * and /v (B, M, G, Dv), each rank reading only its own sequence slice. */
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
    if (k[3] != q[3])
        return ra_error_set(RA_ERR_INPUT, "%s: dataset /k: head dim D = %llu "
                            "differs from /q (D = %llu)", path,
                            (unsigned long long)k[3],
                            (unsigned long long)q[3]);
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

    shape->B = (int64_t)q[0];
    shape->N = (int64_t)q[1];
    shape->H = (int64_t)q[2];
    shape->D = (int64_t)q[3];
    shape->M = (int64_t)k[1];
    shape->G = (int64_t)k[2];
    shape->Dv = (int64_t)v[3];
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
        (st = h5io_dset_open(file, path, "/q", 4, q, NULL)) != RA_OK ||
        (st = h5io_dset_open(file, path, "/k", 4, k, NULL)) != RA_OK ||
        (st = h5io_dset_open(file, path, "/v", 4, v, NULL)) != RA_OK)
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
    h5io_quiet quiet;
    ra_status st;

    h5io_quiet_begin(&quiet);
    st = h5io_agree(comm, shape_read(comm, path, shape));
    h5io_quiet_end(&quiet);
    return st;
}

/* Reads rows of one input tensor (B, len, heads, dim) along axis 1 into buf
 * (B, rows.count, heads, dim), converting to float32; collective. */
static ra_status slab_read(hid_t file, hid_t dxpl, const char *path,
                           const char *name, const int64_t want[4],
                           ra_range rows, float *buf)
{
    hid_t dset = H5I_INVALID_HID, fspace = H5I_INVALID_HID;
    hid_t mspace = H5I_INVALID_HID;
    hsize_t dims[4];
    char found[96], expect[96];
    float dummy;
    ra_status st;

    if ((st = h5io_dset_open(file, path, name, 4, dims, &dset)) != RA_OK)
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
    if ((fspace = H5Dget_space(dset)) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot get its "
                          "dataspace", path, name);
        goto cleanup;
    }
    if ((st = h5io_slab_select(path, name, fspace, 4, dims, 1, rows,
                               &mspace)) != RA_OK)
        goto cleanup;
    if (H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl,
                rows.count ? (void *)buf : (void *)&dummy) < 0)
        st = ra_error_set(RA_ERR_IO, "%s: dataset %s: reading rows [%lld, "
                          "%lld) failed", path, name, (long long)rows.start,
                          (long long)(rows.start + rows.count));

cleanup:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (dset >= 0) H5Dclose(dset);
    return st;
}

static ra_status inputs_read(MPI_Comm comm, const char *path,
                             const ra_shape *s, float *q, float *k, float *v)
{
    hid_t fapl = H5I_INVALID_HID, dxpl = H5I_INVALID_HID;
    hid_t file = H5I_INVALID_HID;
    const int64_t qdims[4] = {s->B, s->N, s->H, s->D};
    const int64_t kdims[4] = {s->B, s->M, s->G, s->D};
    const int64_t vdims[4] = {s->B, s->M, s->G, s->Dv};
    ra_range rq, rk;
    ra_status st;
    int rank, nranks;

    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);
    rq = ra_shard_range(s->N, rank, nranks);
    rk = ra_shard_range(s->M, rank, nranks);

    if ((fapl = h5io_fapl_mpio(comm)) < 0 ||
        (dxpl = h5io_dxpl_collective()) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: cannot set up MPI-IO file access",
                          path);
        goto cleanup;
    }
    if ((st = h5io_file_open(path, fapl, &file)) == RA_OK &&
        (st = slab_read(file, dxpl, path, "/q", qdims, rq, q)) == RA_OK &&
        (st = slab_read(file, dxpl, path, "/k", kdims, rk, k)) == RA_OK)
        st = slab_read(file, dxpl, path, "/v", vdims, rk, v);

cleanup:
    if (file >= 0 && H5Fclose(file) < 0 && st == RA_OK)
        st = ra_error_set(RA_ERR_IO, "%s: closing the file failed", path);
    if (dxpl >= 0) H5Pclose(dxpl);
    if (fapl >= 0) H5Pclose(fapl);
    return st;
}

ra_status ra_h5_read_inputs(MPI_Comm comm, const char *path,
                            const ra_shape *shape,
                            float *q, float *k, float *v)
{
    h5io_quiet quiet;
    ra_status st;

    if ((st = ra_shape_check(shape)) != RA_OK)
        return st;
    h5io_quiet_begin(&quiet);
    st = h5io_agree(comm, inputs_read(comm, path, shape, q, k, v));
    h5io_quiet_end(&quiet);
    return st;
}
