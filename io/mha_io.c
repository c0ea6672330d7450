/* mha_io.c: files of the attention layer (ringattn run --mha): token slices
 * of /x or /x_q and /x_kv (B, len, E) read collectively, the weights read
 * whole on every rank, /y (B, N, Eout) written collectively and atomically;
 * and the random layer inputs of `ringattn gen --mha`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

ra_status h5io_read_tokens(MPI_Comm comm, const char *path, const char *name,
                           const int64_t dims[3], const ra_slice *slice,
                           const ra_h5_tuning *tuning, float *out)
{
    hid_t dset = H5I_INVALID_HID;
    hsize_t found[3];
    const hsize_t want[3] = {(hsize_t)dims[0], (hsize_t)dims[1],
                             (hsize_t)dims[2]};
    h5io_reader in;
    h5io_quiet quiet;

    h5io_quiet_begin(&quiet);
    ra_status st = h5io_reader_open(comm, path, tuning, &in);
    if (st == RA_OK)
        st = h5io_dset_open(in.file, path, name, H5T_FLOAT, 3, found, &dset);
    if (st == RA_OK && memcmp(found, want, sizeof want) != 0)
        st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: expected shape "
                          "(%lld, %lld, %lld), found (%llu, %llu, %llu)", path,
                          name, (long long)dims[0], (long long)dims[1],
                          (long long)dims[2], (unsigned long long)found[0],
                          (unsigned long long)found[1],
                          (unsigned long long)found[2]);
    /* every rank checked the same metadata; agree before the collective */
    if ((st = ra_agree(comm, st)) == RA_OK)
        st = h5io_dset_read(dset, in.dxpl, path, name,
                            &(h5io_region){H5T_NATIVE_FLOAT, 3, want, 1,
                                           slice},
                            out);
    if ((st = ra_agree(comm, st)) == RA_OK)
        st = h5io_scan_tokens(comm, path, name, dims, slice, out);
    if (dset >= 0) H5Dclose(dset);
    st = ra_agree(comm, h5io_reader_close(&in, path, st));
    h5io_quiet_end(&quiet);
    return st;
}

typedef struct {
    const char *path;
    const h5io_layer_output *out;
} y_ctx;

static ra_status y_write(hid_t file, MPI_Comm comm, void *arg)
{
    const y_ctx *c = arg;
    const h5io_layer_output *out = c->out;
    const hsize_t dims[3] = {(hsize_t)out->dims[0], (hsize_t)out->dims[1],
                             (hsize_t)out->dims[2]};
    ra_status st;
    int nranks;
    MPI_Comm_size(comm, &nranks);
    const h5io_recipe recipe = {
        .kind = "mha", .params = out->params,
        .scale = ra_params_scale(out->params, out->shape), .nranks = nranks,
        .command_line = out->command_line};
    const h5io_region rg = {H5T_NATIVE_FLOAT, 3, dims, 1, out->slice};
    if ((st = h5io_dset_write(comm, file, c->path, "/y", H5T_IEEE_F32LE, &rg,
                              out->y)) != RA_OK ||
        (st = h5io_record(comm, file, c->path, &recipe)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, c->path, "heads",
                                  (int)out->shape->H)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, c->path, "kv_heads",
                                  (int)out->shape->G)) != RA_OK)
        return st;
    return h5io_attr_write_int(comm, file, c->path, "pos_encoding",
                               out->pos_encoding);
}

ra_status h5io_write_layer_output(MPI_Comm comm, const char *path, int force,
                                  const h5io_layer_output *out)
{
    y_ctx c = {path, out};
    const h5io_job job = {path, force,
                          4 * (uint64_t)ra_count_checked(3, out->dims),
                          y_write, &c, out->tuning};
    h5io_quiet quiet;
    h5io_quiet_begin(&quiet);
    ra_status st = h5io_commit(comm, &job);
    h5io_quiet_end(&quiet);
    return st;
}

/* ---- gen --mha ---------------------------------------------------------- */

typedef struct {
    const char *path;
    const ra_shape *shape;
    int64_t E;
    int cross;
    uint64_t seed;
    int rank, nranks;
} mha_gen_ctx;

/* A (rows, cols) weight with entries N(0, 1/cols), or with cols 0 a (rows)
 * bias with entries N(0, 0.01); the same on every rank, written by rank 0
 * alone. */
static ra_status weight_write(hid_t file, MPI_Comm comm, const mha_gen_ctx *c,
                              const char *name, uint64_t stream, int64_t rows,
                              int64_t cols)
{
    const int64_t count = ra_mul_checked(rows, cols > 0 ? cols : 1);
    const int64_t bytes = ra_mul_checked(ra_add_checked(count, 1),
                                         (int64_t)sizeof(float));
    float *w = bytes < 0 ? NULL : malloc((size_t)bytes); /* cols 0: a bias */
    int bad = w == NULL, any;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm);
    if (any) {
        free(w);
        return ra_error_set(RA_ERR_NOMEM, "%s: out of memory for %s", c->path,
                            name);
    }
    ra_random_normal(c->seed, stream, 0, count, w);
    for (int64_t i = 0; i < count; i++)
        w[i] *= (float)(cols > 0 ? 1.0 / sqrt((double)cols) : 0.1);
    const hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
    const ra_slice mine = {1, {{0, c->rank == 0 ? rows : 0, 1}},
                           c->rank == 0 ? rows : 0};
    const int rank = cols > 0 ? 2 : 1;
    const hsize_t dims1[1] = {(hsize_t)rows};
    const h5io_region rg = {H5T_NATIVE_FLOAT, rank, rank == 2 ? dims : dims1,
                            0, &mine};
    ra_status st = h5io_dset_write(comm, file, c->path, name, H5T_IEEE_F32LE,
                                   &rg, w);
    free(w);
    return st;
}

static ra_status mha_gen_write(hid_t file, MPI_Comm comm, void *arg)
{
    const mha_gen_ctx *c = arg;
    const ra_shape *s = c->shape;
    const int64_t E = c->E;
    ra_status st;
    const char *names[2] = {c->cross ? "/x_q" : "/x", "/x_kv"};
    const int64_t lens[2] = {s->N, s->M};
    for (int t = 0; t < (c->cross ? 2 : 1); t++) {
        const ra_range r = ra_shard_range(lens[t], c->rank, c->nranks);
        const int64_t f[4] = {s->B, r.count, E, (int64_t)sizeof(float)};
        const int64_t bytes = ra_count_checked(4, f);
        float *x = bytes < 0 ? NULL : malloc((size_t)(bytes + 4));
        int bad = x == NULL, any;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm);
        if (any) {
            free(x);
            return ra_error_set(RA_ERR_NOMEM, "%s: out of memory", c->path);
        }
        ra_random_slab(c->seed, 40 + (uint64_t)t, s->B, lens[t], E, r, x);
        const hsize_t dims[3] = {(hsize_t)s->B, (hsize_t)lens[t], (hsize_t)E};
        const ra_slice sl = {1, {{r.start, r.count, 1}}, r.count};
        st = h5io_dset_write(comm, file, c->path, names[t], H5T_IEEE_F32LE,
                             &(h5io_region){H5T_NATIVE_FLOAT, 3, dims, 1, &sl},
                             x);
        free(x);
        if (st != RA_OK)
            return st;
    }
    if ((st = weight_write(file, comm, c, "/w_q", 50, s->H * s->D, E)) != RA_OK ||
        (st = weight_write(file, comm, c, "/w_k", 51, s->G * s->D, E)) != RA_OK ||
        (st = weight_write(file, comm, c, "/w_v", 52, s->G * s->Dv, E)) != RA_OK ||
        (st = weight_write(file, comm, c, "/w_o", 53, E, s->H * s->Dv)) != RA_OK ||
        (st = weight_write(file, comm, c, "/b_q", 54, s->H * s->D, 0)) != RA_OK ||
        (st = weight_write(file, comm, c, "/b_k", 55, s->G * s->D, 0)) != RA_OK ||
        (st = weight_write(file, comm, c, "/b_v", 56, s->G * s->Dv, 0)) != RA_OK ||
        (st = weight_write(file, comm, c, "/b_o", 57, E, 0)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, c->path, "heads", (int)s->H)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, c->path, "kv_heads", (int)s->G)) != RA_OK)
        return st;
    return h5io_attr_write_string(comm, file, c->path, "engine_version",
                                  RA_VERSION_STRING);
}

ra_status h5io_gen_mha(MPI_Comm comm, const char *path, int force,
                       const ra_shape *shape, int64_t E, int cross,
                       uint64_t seed, const ra_h5_tuning *tuning)
{
    mha_gen_ctx c = {path, shape, E, cross, seed, 0, 1};
    MPI_Comm_rank(comm, &c.rank);
    MPI_Comm_size(comm, &c.nranks);
    /* the token tensors (the weights are small) */
    const int64_t x[3] = {shape->B, cross ? shape->N + shape->M : shape->N, E};
    const h5io_job job = {path, force, 4 * (uint64_t)ra_count_checked(3, x),
                          mha_gen_write, &c, tuning};
    h5io_quiet quiet;
    h5io_quiet_begin(&quiet);
    ra_status st = h5io_commit(comm, &job);
    h5io_quiet_end(&quiet);
    return st;
}
