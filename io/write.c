/* write.c: parallel writing of output files (/o, /lse and the run's
 * attributes) and of generated input files (/q, /k, /v), each rank writing
 * only its own sequence slice into a file committed atomically. */
#include <stdlib.h>
#include <string.h>

#include "h5util.h"
#include "internal.h"

/* Creates dataset name of file type ftype and the given dims, and writes
 * buf, this rank's rows on axis (the dims, with rows.count on axis), from
 * float32; collective. */
static ra_status slab_write(hid_t file, const char *path, const char *name,
                            hid_t ftype, int rank, const hsize_t *dims,
                            int axis, ra_range rows, const float *buf)
{
    hid_t space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
    hid_t dset = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
    hid_t dxpl = H5I_INVALID_HID;
    const float dummy = 0.0f;
    ra_status st = RA_OK;

    /* every element gets written, so no fill pass over the whole file */
    if ((space = H5Screate_simple(rank, dims, NULL)) < 0 ||
        (dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0 ||
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0 ||
        (dxpl = h5io_dxpl_collective()) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: dataset %s: cannot set up its "
                          "dataspace or property lists", path, name);
        goto cleanup;
    }
    dset = H5Dcreate2(file, name, ftype, space, H5P_DEFAULT, dcpl,
                      H5P_DEFAULT);
    if (dset < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: dataset %s: creation failed", path,
                          name);
        goto cleanup;
    }
    if ((st = h5io_slab_select(path, name, space, rank, dims, axis, rows,
                               &mspace)) != RA_OK)
        goto cleanup;
    if (H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, space, dxpl,
                 rows.count ? (const void *)buf : (const void *)&dummy) < 0)
        st = ra_error_set(RA_ERR_IO, "%s: dataset %s: writing rows [%lld, "
                          "%lld) failed", path, name, (long long)rows.start,
                          (long long)(rows.start + rows.count));

cleanup:
    if (mspace >= 0) H5Sclose(mspace);
    if (dset >= 0) H5Dclose(dset);
    if (dxpl >= 0) H5Pclose(dxpl);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return st;
}

/* Writes a scalar root attribute of file type ftype from *value of memory
 * type mtype. Every rank must pass the same value. */
static ra_status attr_write(hid_t file, const char *path, const char *name,
                            hid_t ftype, hid_t mtype, const void *value)
{
    hid_t space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
    ra_status st = RA_OK;

    if ((space = H5Screate(H5S_SCALAR)) < 0 ||
        (attr = H5Acreate2(file, name, ftype, space, H5P_DEFAULT,
                           H5P_DEFAULT)) < 0 ||
        H5Awrite(attr, mtype, value) < 0)
        st = ra_error_set(RA_ERR_IO, "%s: writing attribute %s failed", path,
                          name);
    if (attr >= 0 && H5Aclose(attr) < 0 && st == RA_OK)
        st = ra_error_set(RA_ERR_IO, "%s: closing attribute %s failed", path,
                          name);
    if (space >= 0)
        H5Sclose(space);
    return st;
}

/* Writes a root attribute holding the fixed-length ASCII string value. */
static ra_status attr_write_string(hid_t file, const char *path,
                                   const char *name, const char *value)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    ra_status st;

    if (type < 0 || H5Tset_size(type, strlen(value) + 1) < 0 ||
        H5Tset_strpad(type, H5T_STR_NULLTERM) < 0) {
        st = ra_error_set(RA_ERR_IO, "%s: attribute %s: cannot make its "
                          "string type", path, name);
        goto cleanup;
    }
    st = attr_write(file, path, name, type, type, value);

cleanup:
    if (type >= 0)
        H5Tclose(type);
    return st;
}

static ra_status attr_write_int(hid_t file, const char *path,
                                const char *name, int value)
{
    return attr_write(file, path, name, H5T_STD_I32LE, H5T_NATIVE_INT,
                      &value);
}

static ra_status attr_write_int64(hid_t file, const char *path,
                                  const char *name, int64_t value)
{
    return attr_write(file, path, name, H5T_STD_I64LE, H5T_NATIVE_INT64,
                      &value);
}

/* ---- output files ---------------------------------------------------- */

typedef struct {
    const char *path;
    const ra_shape *shape;
    const ra_run_meta *meta;
    const float *o;    /* (B, n, H, Dv) */
    const float *lse;  /* (B, H, n) */
    ra_range rows;     /* this rank's queries: n = rows.count */
    int nranks;
} outputs_ctx;

static ra_status outputs_write(hid_t file, void *arg)
{
    const outputs_ctx *c = arg;
    const ra_shape *s = c->shape;
    const ra_run_meta *m = c->meta;
    const char *path = c->path;
    const hsize_t odims[4] = {(hsize_t)s->B, (hsize_t)s->N, (hsize_t)s->H,
                              (hsize_t)s->Dv};
    const hsize_t ldims[3] = {(hsize_t)s->B, (hsize_t)s->H, (hsize_t)s->N};
    ra_status st;

    if ((st = slab_write(file, path, "/o", H5T_IEEE_F32LE, 4, odims, 1,
                         c->rows, c->o)) != RA_OK ||
        (st = slab_write(file, path, "/lse", H5T_IEEE_F32LE, 3, ldims, 2,
                         c->rows, c->lse)) != RA_OK ||
        (st = attr_write_string(file, path, "engine_version",
                                RA_VERSION_STRING)) != RA_OK ||
        (st = attr_write_int(file, path, "schema_version",
                             RA_SCHEMA_VERSION)) != RA_OK ||
        (st = attr_write_int(file, path, "causal",
                             m->params->causal)) != RA_OK ||
        (st = attr_write(file, path, "scale", H5T_IEEE_F64LE,
                         H5T_NATIVE_DOUBLE, &m->scale)) != RA_OK ||
        (st = attr_write_string(file, path, "layout",
                                ra_layout_name(m->params->layout))) != RA_OK ||
        (st = attr_write_int(file, path, "ranks", c->nranks)) != RA_OK ||
        (st = attr_write_int64(file, path, "block_q", m->block_q)) != RA_OK ||
        (st = attr_write_int64(file, path, "block_kv",
                               m->block_kv)) != RA_OK ||
        (st = attr_write_int64(file, path, "seq_q", s->N)) != RA_OK ||
        (st = attr_write_int64(file, path, "seq_kv", s->M)) != RA_OK)
        return st;
    return attr_write_string(file, path, "command_line",
                             m->command_line ? m->command_line : "");
}

ra_status ra_h5_write_outputs(MPI_Comm comm, const char *path, int force,
                              const ra_shape *shape, const ra_run_meta *meta,
                              const float *o, const float *lse)
{
    outputs_ctx c = {path, shape, meta, o, lse, {0, 0}, 0};
    h5io_quiet quiet;
    ra_status st;
    int rank;

    if (!path || !meta || !meta->params)
        return ra_error_set(RA_ERR_ARG, "ra_h5_write_outputs: path, meta and "
                            "meta->params are required");
    if ((st = ra_shape_check(shape)) != RA_OK)
        return st;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &c.nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);
    c.rows = ra_shard_range(shape->N, rank, c.nranks);

    h5io_quiet_begin(&quiet);
    st = h5io_commit(comm, path, force, outputs_write, &c);
    h5io_quiet_end(&quiet);
    return st;
}

/* ---- generated input files -------------------------------------------- */

typedef struct {
    const char *path;
    const ra_shape *shape;
    int f64;
    uint64_t seed;
    int rank, nranks;
    float *buf;  /* room for this rank's largest slab of q, k or v */
} gen_ctx;

static ra_status gen_write(hid_t file, void *arg)
{
    const gen_ctx *c = arg;
    const ra_shape *s = c->shape;
    const char *const names[3] = {"/q", "/k", "/v"};
    const int64_t len[3] = {s->N, s->M, s->M};
    const int64_t heads[3] = {s->H, s->G, s->G};
    const int64_t dim[3] = {s->D, s->D, s->Dv};
    hid_t ftype = c->f64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
    ra_status st;

    /* stream t numbers tensor t; element (b, i, h, d) of it has the flat
     * index ((b * len + i) * heads + h) * dim + d, whatever the slicing */
    for (int t = 0; t < 3; t++) {
        const ra_range rows = ra_shard_range(len[t], c->rank, c->nranks);
        const int64_t row = heads[t] * dim[t];
        const hsize_t dims[4] = {(hsize_t)s->B, (hsize_t)len[t],
                                 (hsize_t)heads[t], (hsize_t)dim[t]};

        ra_random_slab(c->seed, (uint64_t)t, s->B, len[t], row, rows, c->buf);
        if ((st = slab_write(file, c->path, names[t], ftype, 4, dims, 1, rows,
                             c->buf)) != RA_OK)
            return st;
    }
    if ((st = attr_write_string(file, c->path, "engine_version",
                                RA_VERSION_STRING)) != RA_OK ||
        (st = attr_write_int(file, c->path, "schema_version",
                             RA_SCHEMA_VERSION)) != RA_OK ||
        (st = attr_write(file, c->path, "seed", H5T_STD_U64LE,
                         H5T_NATIVE_UINT64, &c->seed)) != RA_OK)
        return st;
    return attr_write_string(file, c->path, "generator",
                             "splitmix64-boxmuller");
}

/* Elements of the largest of this rank's q, k and v slabs (B, rows, heads,
 * dim), at least 1; it fits int64 because the whole tensors do. */
static int64_t gen_buffer_len(const ra_shape *s, int rank, int nranks)
{
    const int64_t n = ra_shard_range(s->N, rank, nranks).count;
    const int64_t m = ra_shard_range(s->M, rank, nranks).count;
    const int64_t q = s->B * n * s->H * s->D;
    const int64_t k = s->B * m * s->G * s->D;
    const int64_t v = s->B * m * s->G * s->Dv;
    int64_t most = 1;

    most = q > most ? q : most;
    most = k > most ? k : most;
    return v > most ? v : most;
}

ra_status ra_h5_gen(MPI_Comm comm, const char *path, int force,
                    const ra_shape *shape, int f64, uint64_t seed)
{
    gen_ctx c = {path, shape, f64, seed, 0, 0, NULL};
    int64_t most;
    h5io_quiet quiet;
    ra_status st;

    if (!path)
        return ra_error_set(RA_ERR_ARG, "ra_h5_gen: path is required");
    if ((st = ra_shape_check(shape)) != RA_OK)
        return st;
    if (MPI_Comm_rank(comm, &c.rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &c.nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);

    most = gen_buffer_len(shape, c.rank, c.nranks);
    c.buf = malloc((size_t)most * sizeof *c.buf);
    st = c.buf ? RA_OK
               : ra_error_set(RA_ERR_NOMEM, "%s: cannot allocate %lld bytes "
                              "for the generated slices", path,
                              (long long)most * (long long)sizeof *c.buf);
    if ((st = h5io_agree(comm, st)) != RA_OK)
        goto cleanup;

    h5io_quiet_begin(&quiet);
    st = h5io_commit(comm, path, force, gen_write, &c);
    h5io_quiet_end(&quiet);

cleanup:
    free(c.buf);
    return st;
}
