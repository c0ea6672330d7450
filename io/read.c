/* read.c: parallel reading of input files, /q (B, N, H, D), /k (B, M, G, Dk)
 * and /v (B, M, G, Dv) (other dataset names, heads-first storage: see
 * ra_h5_source), each rank reading only the tokens its layout slice
 * names. */
#include <string.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

/* The dataset names of a source, defaults filled, and its tuning. */
typedef struct {
    const char *name[3]; /* q, k, v */
    ra_axes axes;
    const ra_h5_tuning *tuning;
} source_names;

static source_names source_resolve(const ra_h5_source *src)
{
    source_names n = {{"/q", "/k", "/v"}, RA_AXES_NONE, NULL};
    if (src) {
        n.name[0] = src->q ? src->q : n.name[0];
        n.name[1] = src->k ? src->k : n.name[1];
        n.name[2] = src->v ? src->v : n.name[2];
        n.axes = src->axes;
        n.tuning = src->tuning;
    }
    return n;
}

/* Checks that the logical sizes (B, len, heads, dim) of q, k and v fit one
 * problem and fills shape. */
static ra_status shape_match(const char *path, const source_names *nm,
                             const hsize_t *q, const hsize_t *k,
                             const hsize_t *v, ra_shape *shape)
{
    const char *qn = nm->name[0], *kn = nm->name[1], *vn = nm->name[2];
    char why[256];
    ra_status st;

    if (k[0] != q[0] || v[0] != q[0])
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: batch B = %llu "
                            "differs from %s (B = %llu)", path,
                            k[0] != q[0] ? kn : vn,
                            (unsigned long long)(k[0] != q[0] ? k[0] : v[0]),
                            qn, (unsigned long long)q[0]);
    if (v[1] != k[1])
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: length M = %llu "
                            "differs from %s (M = %llu)", path, vn,
                            (unsigned long long)v[1], kn,
                            (unsigned long long)k[1]);
    if (v[2] != k[2])
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: kv heads G = %llu "
                            "differ from %s (G = %llu)", path, vn,
                            (unsigned long long)v[2], kn,
                            (unsigned long long)k[2]);
    if (q[2] % k[2] != 0)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: kv heads G = %llu "
                            "do not divide the query heads H = %llu of %s",
                            path, kn, (unsigned long long)k[2],
                            (unsigned long long)q[2], qn);

    memset(shape, 0, sizeof *shape); /* fields not read here: defaults */
    shape->B = (int64_t)q[0];
    shape->N = (int64_t)q[1];
    shape->H = (int64_t)q[2];
    shape->D = (int64_t)q[3];
    shape->M = (int64_t)k[1];
    shape->G = (int64_t)k[2];
    shape->Dv = (int64_t)v[3];
    /* keys of another dim than the queries: only the additive score takes
     * them, which ra_forward checks (and `ringattn run` explains) */
    shape->Dk = k[3] != q[3] ? (int64_t)k[3] : 0;
    if ((st = ra_shape_check(shape)) != RA_OK) {
        snprintf(why, sizeof why, "%s", ra_error_message());
        return ra_error_set(RA_ERR_INPUT, "%s: %s", path, why);
    }
    return RA_OK;
}

/* Opens input tensor i of nm in file: its file sizes, its order, and its
 * logical sizes (B, len, heads, dim). */
static ra_status tensor_open(hid_t file, const char *path,
                             const source_names *nm, int i, hid_t *dset,
                             hsize_t fdims[4], ra_axes *axes, hsize_t dims[4])
{
    ra_status st = h5io_dset_open(file, path, nm->name[i], H5T_FLOAT, 4,
                                  fdims, dset);
    if (st == RA_OK &&
        (st = h5io_axes_of(*dset, path, nm->name[i], nm->axes, axes)) == RA_OK)
        h5io_axes_dims(*axes, fdims, dims);
    return st;
}

static ra_status shape_read(MPI_Comm comm, const char *path,
                            const source_names *nm, ra_shape *shape,
                            ra_axes used[3])
{
    hid_t dset[3] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
    hsize_t fdims[4], dims[3][4];
    h5io_reader in;
    ra_status st = h5io_reader_open(comm, path, nm->tuning, &in);

    for (int i = 0; i < 3 && st == RA_OK; i++)
        st = tensor_open(in.file, path, nm, i, &dset[i], fdims, &used[i],
                         dims[i]);
    if (st == RA_OK)
        st = shape_match(path, nm, dims[0], dims[1], dims[2], shape);
    for (int i = 0; i < 3; i++)
        if (dset[i] >= 0) H5Dclose(dset[i]);
    return h5io_reader_close(&in, path, st);
}

ra_status ra_h5_read_shape(MPI_Comm comm, const char *path,
                           const ra_h5_source *src, ra_shape *shape,
                           ra_axes used[3])
{
    ra_error_clear();
    const source_names nm = source_resolve(src);
    ra_axes mine[3];
    h5io_quiet quiet;
    ra_status st = ra_comm_usable(comm, "ra_h5_read_shape");
    if (st != RA_OK)
        return st;
    st = ra_agree(comm, path && shape ? RA_OK
                                      : ra_error_set(RA_ERR_ARG,
                                                     "ra_h5_read_shape: path "
                                                     "and shape are "
                                                     "required"));
    if (st != RA_OK)
        return st;
    h5io_quiet_begin(&quiet);
    st = ra_agree(comm, shape_read(comm, path, &nm, shape, mine));
    h5io_quiet_end(&quiet);
    if (st == RA_OK && used)
        memcpy(used, mine, sizeof mine);
    return st;
}

/* Reads this rank's slice of input tensor i of nm (B, len, heads, dim)
 * along the token axis into buf (B, slice->count, heads, dim), converting
 * to float32; collective. */
static ra_status tensor_read(hid_t file, hid_t dxpl, const char *path,
                             const source_names *nm, int i,
                             const int64_t want[4], const ra_slice *slice,
                             float *buf)
{
    hid_t dset = H5I_INVALID_HID;
    hsize_t fdims[4], dims[4];
    char found[96], expect[96];
    ra_axes axes;
    ra_status st;

    if ((st = tensor_open(file, path, nm, i, &dset, fdims, &axes,
                          dims)) != RA_OK)
        goto cleanup;
    for (int a = 0; a < 4; a++) {
        if (dims[a] != (hsize_t)want[a]) {
            hsize_t w[4] = {(hsize_t)want[0], (hsize_t)want[1],
                            (hsize_t)want[2], (hsize_t)want[3]};
            h5io_dims_format(dims, 4, found, sizeof found);
            h5io_dims_format(w, 4, expect, sizeof expect);
            st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: shape %s (as "
                              "%s) differs from the expected %s", path,
                              nm->name[i], found, ra_axes_name(axes), expect);
            goto cleanup;
        }
    }
    const h5io_region rg = {H5T_NATIVE_FLOAT, 4, fdims,
                            h5io_axes_token_axis(axes), slice};
    st = h5io_dset_read_axes(dset, dxpl, path, nm->name[i], &rg, buf);

cleanup:
    if (dset >= 0) H5Dclose(dset);
    return st;
}

static ra_status inputs_read(MPI_Comm comm, const char *path,
                             const source_names *nm, const ra_shape *s,
                             const ra_slice rows[2], float *q, float *k,
                             float *v)
{
    const int64_t qdims[4] = {s->B, s->N, s->H, s->D};
    const int64_t kdims[4] = {s->B, s->M, s->G, ra_shape_dk(s)};
    const int64_t vdims[4] = {s->B, s->M, s->G, s->Dv};
    h5io_reader in;
    ra_status st;
    if ((st = h5io_reader_open(comm, path, nm->tuning, &in)) == RA_OK &&
        (st = tensor_read(in.file, in.dxpl, path, nm, 0, qdims, &rows[0],
                          q)) == RA_OK &&
        (st = tensor_read(in.file, in.dxpl, path, nm, 1, kdims, &rows[1],
                          k)) == RA_OK)
        st = tensor_read(in.file, in.dxpl, path, nm, 2, vdims, &rows[1], v);
    return h5io_reader_close(&in, path, st);
}

/* RA_ERR_ARG naming path unless sl is up to two runs of increasing
 * positions in [0, len) whose counts add up. */
static ra_status rows_check(const char *path, const char *what,
                            const ra_slice *sl, int64_t len)
{
    int64_t total = 0, after = 0; /* the first position a run may take */
    int ok = sl->nruns >= 0 && sl->nruns <= 2;
    for (int i = 0; ok && i < sl->nruns; i++) {
        const ra_run *r = &sl->run[i];
        ok = r->count >= 0 && r->stride >= 1 &&
             (r->count == 0 ||
              (r->start >= after &&
               r->start + (r->count - 1) * r->stride < len));
        after = r->count ? r->start + (r->count - 1) * r->stride + 1 : after;
        total += ok ? r->count : 0;
    }
    if (!ok || total != sl->count)
        return ra_error_set(RA_ERR_ARG, "%s: the %s rows are not runs of "
                            "increasing positions below %lld "
                            "(ra_layout_slice gives them)", path, what,
                            (long long)len);
    return RA_OK;
}

ra_status ra_h5_read_inputs(MPI_Comm comm, const char *path,
                            const ra_h5_source *src, const ra_shape *shape,
                            const ra_slice rows[2], float *q, float *k,
                            float *v)
{
    ra_error_clear();
    const source_names nm = source_resolve(src);
    h5io_quiet quiet;
    ra_status st = ra_comm_usable(comm, "ra_h5_read_inputs");
    if (st != RA_OK)
        return st;
    st = ra_shape_check(shape);
    if (st == RA_OK && (!rows || !path))
        st = ra_error_set(RA_ERR_ARG, "ra_h5_read_inputs: path and rows are "
                          "required");
    if (st == RA_OK && (st = rows_check(path, "query", &rows[0],
                                        shape->N)) == RA_OK)
        st = rows_check(path, "key", &rows[1], shape->M);
    if (st == RA_OK && ((!q && rows[0].count > 0) ||
                        ((!k || !v) && rows[1].count > 0)))
        st = ra_error_set(RA_ERR_ARG, "ra_h5_read_inputs: q, k and v are "
                          "required for the rows this rank reads");
    if ((st = ra_agree(comm, st)) != RA_OK) /* rows differ by rank */
        return st;
    h5io_quiet_begin(&quiet);
    st = ra_agree(comm, inputs_read(comm, path, &nm, shape, rows, q, k, v));
    h5io_quiet_end(&quiet);
    return st;
}
