/* gen.c: parallel writing of generated input files: unit-normal /q, /k, /v
 * and, when asked, random padding lengths and packed-sequence ids. Each
 * rank writes its contiguous slice (files do not depend on any layout);
 * every value depends only on (seed, stream, index), never on P.
 *
 * Streams of the seed: 0 q, 1 k, 2 v, 3 q_lens, 4 kv_lens, 5 segments or
 * q_segments, 6 kv_segments, 40 do, 41 sinks. Tensors are stored as float32, float64 or
 * float16; float16 is encoded here (half.c), as run's outputs are. */
#include <stdlib.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

typedef struct {
    const char *path;
    const ra_shape *shape;
    ra_dtype dtype; /* of q, k, v and do in the file: F32, F64 or F16 */
    uint64_t seed;
    int lens;
    int64_t segment_avg;
    int rank, nranks;
    float *buf;    /* room for this rank's largest slab of q, k or v */
    uint16_t *half; /* as much, float16 encoded (dtype F16 only) */
    int64_t *ids;  /* room for B lens, or this rank's (B, n) or (B, m) ids */
    int dout;      /* also /do (B, N, H, Dv), stream RA_STREAM_DO */
    int sinks;     /* also /sinks (H,), stream RA_STREAM_SINKS */
} gen_ctx;

/* Writes this rank's slab c->buf (n floats, rows slice of dims) of the
 * tensor name in c's dtype. */
static ra_status slab_write(hid_t file, MPI_Comm comm, const gen_ctx *c,
                            const char *name, const hsize_t *dims,
                            const ra_slice *slice, int64_t n)
{
    if (c->dtype != RA_DTYPE_F16)
        return h5io_dset_write(comm, file, c->path, name,
                               c->dtype == RA_DTYPE_F64 ? H5T_IEEE_F64LE
                                                        : H5T_IEEE_F32LE,
                               &(h5io_region){H5T_NATIVE_FLOAT, 4, dims, 1,
                                              slice},
                               c->buf);
    const hid_t type = h5io_dtype_file_type(RA_DTYPE_F16);
    if (type < 0)
        return ra_error_set(RA_ERR_IO, "%s: cannot make the type fp16 of %s",
                            c->path, name);
    h5io_half_encode(c->buf, c->half, (size_t)n, 0);
    const ra_status st = h5io_dset_write(
        comm, file, c->path, name, type,
        &(h5io_region){type, 4, dims, 1, slice}, c->half);
    H5Tclose(type);
    return st;
}

/* Writes /do (B, N, H, Dv), the output gradient of a backward pass. */
static ra_status dout_write(hid_t file, MPI_Comm comm, const gen_ctx *c)
{
    const ra_shape *s = c->shape;
    const ra_range rows = ra_shard_range(s->N, c->rank, c->nranks);
    const ra_slice slice = h5io_slice_range(rows);
    const hsize_t dims[4] = {(hsize_t)s->B, (hsize_t)s->N, (hsize_t)s->H,
                             (hsize_t)s->Dv};
    ra_random_slab(c->seed, RA_STREAM_DO, s->B, s->N, s->H * s->Dv, rows,
                   c->buf);
    return slab_write(file, comm, c, "/do", dims, &slice,
                      s->B * rows.count * s->H * s->Dv);
}

/* Writes /q, /k and /v (and /do when asked). Element (b, i, h, d) of tensor t has the flat index
 * ((b * len + i) * heads + h) * dim + d in stream t. */
static ra_status tensors_write(hid_t file, MPI_Comm comm, const gen_ctx *c)
{
    const ra_shape *s = c->shape;
    const char *const names[3] = {"/q", "/k", "/v"};
    const int64_t len[3] = {s->N, s->M, s->M};
    const int64_t heads[3] = {s->H, s->G, s->G};
    const int64_t dim[3] = {s->D, s->D, s->Dv};
    ra_status st;

    for (int t = 0; t < 3; t++) {
        const ra_range rows = ra_shard_range(len[t], c->rank, c->nranks);
        const ra_slice slice = h5io_slice_range(rows);
        const hsize_t dims[4] = {(hsize_t)s->B, (hsize_t)len[t],
                                 (hsize_t)heads[t], (hsize_t)dim[t]};

        ra_random_slab(c->seed, RA_STREAM_Q + (uint64_t)t, s->B, len[t],
                       heads[t] * dim[t], rows, c->buf);
        if ((st = slab_write(file, comm, c, names[t], dims, &slice,
                             s->B * rows.count * heads[t] * dim[t])) != RA_OK)
            return st;
    }
    return c->dout ? dout_write(file, comm, c) : RA_OK;
}

/* Writes /q_lens and /kv_lens (B,) int64; rank 0 writes them whole. */
static ra_status lens_write(hid_t file, MPI_Comm comm, const gen_ctx *c)
{
    const ra_shape *s = c->shape;
    const char *const names[2] = {"/q_lens", "/kv_lens"};
    const int64_t len[2] = {s->N, s->M};
    const hsize_t dims[1] = {(hsize_t)s->B};
    const ra_range all = {0, c->rank == 0 ? s->B : 0};
    const ra_slice slice = h5io_slice_range(all);
    ra_status st;

    for (int t = 0; t < 2; t++) {
        ra_random_lens(c->seed, RA_STREAM_Q_LENS + (uint64_t)t, s->B, len[t],
                       c->ids);
        if ((st = h5io_dset_write(comm, file, c->path, names[t], H5T_STD_I64LE,
                                  &(h5io_region){H5T_NATIVE_INT64, 1, dims, 0,
                                                 &slice},
                                  c->ids)) != RA_OK)
            return st;
    }
    return RA_OK;
}

/* Writes /segments (B, N) when N == M, else /q_segments (B, N) and
 * /kv_segments (B, M), int64. */
static ra_status segments_write(hid_t file, MPI_Comm comm, const gen_ctx *c)
{
    const ra_shape *s = c->shape;
    const int both = s->N == s->M;
    const char *const names[2] = {both ? "/segments" : "/q_segments",
                                  "/kv_segments"};
    const int64_t len[2] = {s->N, s->M};
    ra_status st;

    for (int t = 0; t < (both ? 1 : 2); t++) {
        const ra_slice slice =
            h5io_slice_range(ra_shard_range(len[t], c->rank, c->nranks));
        const hsize_t dims[2] = {(hsize_t)s->B, (hsize_t)len[t]};

        ra_random_segments(c->seed, RA_STREAM_Q_SEGMENTS + (uint64_t)t, s->B,
                           len[t], c->segment_avg, &slice, c->ids);
        if ((st = h5io_dset_write(comm, file, c->path, names[t], H5T_STD_I64LE,
                                  &(h5io_region){H5T_NATIVE_INT64, 2, dims, 1,
                                                 &slice},
                                  c->ids)) != RA_OK)
            return st;
    }
    return RA_OK;
}

/* /sinks (H,) float32: unit-normal logits, the spread of the scaled dot
 * scores of unit-normal q and k; rank 0 writes them. */
static ra_status sinks_write(hid_t file, MPI_Comm comm, const gen_ctx *c)
{
    const int64_t H = c->shape->H;
    float *sinks = malloc(sizeof(float) * (size_t)H);
    ra_status st = ra_agree(comm, sinks ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "%s: out of memory "
                                           "for /sinks", c->path));
    if (st != RA_OK)
        return st;
    ra_random_normal(c->seed, RA_STREAM_SINKS, 0, H, sinks);
    const hsize_t dims[1] = {(hsize_t)H};
    const ra_slice slice = h5io_slice_range((ra_range){0, c->rank ? 0 : H});
    st = h5io_dset_write(comm, file, c->path, "/sinks", H5T_IEEE_F32LE,
                         &(h5io_region){H5T_NATIVE_FLOAT, 1, dims, 0, &slice},
                         sinks);
    free(sinks);
    return st;
}

static ra_status gen_write(hid_t file, MPI_Comm comm, void *arg)
{
    const gen_ctx *c = arg;
    ra_status st;

    if ((st = tensors_write(file, comm, c)) != RA_OK ||
        (c->lens && (st = lens_write(file, comm, c)) != RA_OK) ||
        (c->segment_avg > 0 && (st = segments_write(file, comm, c)) != RA_OK) ||
        (c->sinks && (st = sinks_write(file, comm, c)) != RA_OK) ||
        (st = h5io_attr_write_string(comm, file, c->path, "engine_version",
                                     RA_VERSION_STRING)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, c->path, "schema_version",
                                  RA_SCHEMA_VERSION)) != RA_OK ||
        (st = h5io_attr_write_uint64(comm, file, c->path, "seed",
                                     c->seed)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, c->path, "lens",
                                  c->lens ? 1 : 0)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, c->path, "segment_avg",
                                    c->segment_avg)) != RA_OK)
        return st;
    return h5io_attr_write_string(comm, file, c->path, "generator",
                                  "splitmix64-boxmuller");
}

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
    int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* The bytes of the tensors, reserved before they are written (the masks
 * are small): q, k, v and, with dout, /do. */
static uint64_t gen_bytes(const ra_shape *s, ra_dtype dtype, int dout)
{
    const int64_t all[4][4] = {{s->B, s->N, s->H, s->D},
                               {s->B, s->M, s->G, s->D},
                               {s->B, s->M, s->G, s->Dv},
                               {s->B, s->N, s->H, s->Dv}};
    uint64_t bytes = 0;

    for (int i = 0; i < (dout ? 4 : 3); i++)
        bytes += (uint64_t)ra_count_checked(4, all[i]) *
                 (dtype == RA_DTYPE_F64 ? 8 : dtype == RA_DTYPE_F16 ? 2 : 4);
    return bytes;
}

/* The floats of the largest slice of q, k, v (and /do) and the ids of
 * the largest mask slice of rank of nranks: the buffers gen_write fills
 * one tensor at a time. */
static void gen_counts(const ra_shape *shape, int rank, int nranks,
                       int dout, int64_t *nfloat, int64_t *nids)
{
    /* these fit int64 because the whole tensors do (ra_shape_check) */
    const int64_t n = ra_shard_range(shape->N, rank, nranks).count;
    const int64_t m = ra_shard_range(shape->M, rank, nranks).count;
    const int64_t fq[4] = {shape->B, n, shape->H, shape->D};
    const int64_t fk[4] = {shape->B, m, shape->G, shape->D};
    const int64_t fv[4] = {shape->B, m, shape->G, shape->Dv};
    const int64_t fdo[4] = {shape->B, n, shape->H, shape->Dv};
    *nfloat = max3(ra_count_checked(4, fq), ra_count_checked(4, fk),
                   ra_count_checked(4, fv));
    *nfloat = dout ? max3(*nfloat, ra_count_checked(4, fdo), 0) : *nfloat;
    *nids = max3(shape->B, ra_mul_checked(shape->B, n),
                 ra_mul_checked(shape->B, m));
}

int64_t h5io_gen_bytes(const ra_shape *shape, int rank, int nranks, int dout,
                       ra_dtype dtype)
{
    int64_t nfloat, nids;
    gen_counts(shape, rank, nranks, dout, &nfloat, &nids);
    return ra_add_checked(ra_mul_checked(nfloat,
                                         dtype == RA_DTYPE_F16 ? 6 : 4),
                          ra_mul_checked(nids, 8));
}

ra_status h5io_gen_backward(MPI_Comm comm, const char *path, int force,
                            const ra_shape *shape, const h5io_gen_spec *g)
{
    const ra_dtype dtype = g->dtype;
    const int64_t segment_avg = g->segment_avg;
    const int dout = g->dout;
    gen_ctx c = {path, shape, dtype, g->seed, g->lens, segment_avg, 0, 0,
                 NULL, NULL, NULL, dout, g->sinks};
    int64_t nfloat, nids;
    h5io_quiet quiet;
    ra_status st;

    if (!path)
        return ra_error_set(RA_ERR_ARG, "generating an input file: a path "
                            "is required");
    if (segment_avg < 0)
        return ra_error_set(RA_ERR_ARG, "%s: segment_avg %lld is negative "
                            "(0: no segments)", path, (long long)segment_avg);
    if (dtype != RA_DTYPE_F32 && dtype != RA_DTYPE_F64 &&
        dtype != RA_DTYPE_F16)
        return ra_error_set(RA_ERR_ARG, "%s: dtype %s: generated files are "
                            "fp32, fp64 or fp16", path, ra_dtype_name(dtype));
    if ((st = ra_shape_check(shape)) != RA_OK)
        return st;
    if (MPI_Comm_rank(comm, &c.rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &c.nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);

    gen_counts(shape, c.rank, c.nranks, dout, &nfloat, &nids);
    c.buf = malloc((size_t)(nfloat ? nfloat : 1) * sizeof *c.buf);
    c.ids = malloc((size_t)nids * sizeof *c.ids);
    if (dtype == RA_DTYPE_F16)
        c.half = malloc((size_t)(nfloat ? nfloat : 1) * sizeof *c.half);
    st = c.buf && c.ids && (dtype != RA_DTYPE_F16 || c.half)
             ? RA_OK
             : ra_error_set(RA_ERR_NOMEM, "%s: cannot allocate %lld bytes "
                            "for the generated slices", path,
                            (long long)h5io_gen_bytes(shape, c.rank, c.nranks,
                                                      dout, dtype));
    if ((st = ra_agree(comm, st)) != RA_OK)
        goto cleanup;

    const h5io_job job = {path, force, gen_bytes(shape, dtype, dout),
                          gen_write, &c, g->tuning};
    h5io_quiet_begin(&quiet);
    st = h5io_commit(comm, &job);
    h5io_quiet_end(&quiet);

cleanup:
    free(c.half);
    free(c.ids);
    free(c.buf);
    return st;
}

ra_status ra_h5_gen(MPI_Comm comm, const char *path, int force,
                    const ra_shape *shape, ra_dtype dtype, uint64_t seed,
                    const ra_h5_tuning *tuning)
{
    ra_error_clear();
    ra_status st = ra_comm_usable(comm, "ra_h5_gen");
    if (st != RA_OK)
        return st;
    st = ra_agree(comm, path ? ra_shape_check(shape)
                             : ra_error_set(RA_ERR_ARG, "ra_h5_gen: path is "
                                            "required"));
    if (st != RA_OK)
        return st;
    const h5io_gen_spec g = {dtype, seed, 0, 0, 0, tuning};
    return h5io_gen_backward(comm, path, force, shape, &g);
}
