/* write.c: parallel writing of output files, /o (B, N, H, Dv) or
 * heads-first (B, H, N, Dv), /lse (B, H, N) and the run's attributes, each rank writing only the queries
 * its layout slice names, into a file committed atomically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "h5io.h"
#include "h5util.h"
#include "internal.h"

typedef struct {
    const char *path;
    const ra_shape *shape;
    const ra_run_meta *meta;
    ra_params params;  /* meta's num and exec joined */
    char o_name[300], lse_name[300], map_name[300]; /* under out_group */
    const float *o;    /* (B, n, H, Dv) */
    const float *lse;  /* (B, H, n) */
    ra_slice rows;     /* this rank's queries: n = rows.count */
    int nranks;
} outputs_ctx;


/* /attn_map (B, nheads, i1 - i0, M): each rank writes the map rows its
 * slice holds; root attributes attn_map_rows "i0:i1" and attn_map_heads
 * "h0,h1,..." say which query rows and heads they are. */
static ra_status map_write(hid_t file, MPI_Comm comm, const outputs_ctx *c)
{
    const ra_attn_map *map = c->meta->map;
    const ra_shape *s = c->shape;
    const hsize_t dims[4] = {(hsize_t)s->B, (hsize_t)map->nheads,
                             (hsize_t)(map->i1 - map->i0), (hsize_t)s->M};
    const ra_slice rows = ra_slice_clip(&c->rows, map->i0, map->i1);
    char text[64], heads[512] = "";
    ra_status st;
    for (int64_t i = 0; i < map->nheads; i++) {
        size_t used = strlen(heads);
        snprintf(heads + used, sizeof heads - used, "%s%lld", i ? "," : "",
                 (long long)map->heads[i]);
    }
    snprintf(text, sizeof text, "%lld:%lld", (long long)map->i0,
             (long long)map->i1);
    const h5io_region rg = {H5T_NATIVE_FLOAT, 4, dims, 2, &rows};
    if ((st = h5io_dset_write(comm, file, c->path, c->map_name,
                              H5T_IEEE_F32LE, &rg, map->out)) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, c->path, "attn_map_rows",
                                     text)) != RA_OK)
        return st;
    return h5io_attr_write_string(comm, file, c->path, "attn_map_heads", heads);
}

/* This rank's /o converted to the file type otype, in a new buffer
 * (*out, caller frees): parallel HDF5 writes collectively, which filtered
 * datasets need, only when no conversion is left to it; 16-bit types are
 * encoded by h5io_half_encode(). */
static ra_status o_convert(const outputs_ctx *c, hid_t otype, void **out)
{
    const ra_shape *s = c->shape;
    const size_t n = (size_t)(s->B * c->rows.count * s->H * s->Dv);
    const size_t size = H5Tget_size(otype);
    *out = malloc((n + 1) * (size > sizeof(float) ? size : sizeof(float)));
    if (!*out)
        return ra_error_set(RA_ERR_NOMEM, "%s: cannot allocate /o in %zu-byte "
                            "values", c->path, size);
    if (c->meta->out_dtype == RA_DTYPE_F16 ||
        c->meta->out_dtype == RA_DTYPE_BF16) {
        h5io_half_encode(c->o, *out, n, c->meta->out_dtype == RA_DTYPE_BF16);
        return RA_OK;
    }
    memcpy(*out, c->o, n * sizeof(float));
    if (n && H5Tconvert(H5T_NATIVE_FLOAT, otype, n, *out, NULL,
                        H5P_DEFAULT) < 0)
        return ra_error_set(RA_ERR_IO, "%s: converting /o to %s failed",
                            c->path, ra_dtype_name(c->meta->out_dtype));
    return RA_OK;
}

/* /o in the chosen type and /lse in float32, each in the chosen storage. */
static ra_status tensors_write(hid_t file, MPI_Comm comm,
                               const outputs_ctx *c)
{
    const ra_shape *s = c->shape;
    const ra_run_meta *m = c->meta;
    const hsize_t odims[4] = {(hsize_t)s->B, (hsize_t)s->N, (hsize_t)s->H,
                              (hsize_t)s->Dv};
    const hsize_t ldims[3] = {(hsize_t)s->B, (hsize_t)s->H, (hsize_t)s->N};
    const h5io_storage storage = {m->out_chunk, m->out_compress,
                                  m->out_axes == RA_AXES_BHND};
    hid_t otype = h5io_dtype_file_type(m->out_dtype);
    void *o = NULL;
    ra_status st = otype < 0 ? ra_error_set(RA_ERR_IO, "%s: cannot make the "
                                            "type %s of /o", c->path,
                                            ra_dtype_name(m->out_dtype))
                             : o_convert(c, otype, &o);
    const h5io_region org = {otype, 4, odims, 1, &c->rows};
    const h5io_region lrg = {H5T_NATIVE_FLOAT, 3, ldims, 2, &c->rows};
    if ((st = ra_agree(comm, st)) == RA_OK &&
        (st = h5io_dset_write_stored(comm, file, c->path, c->o_name, otype,
                                     &org, o, &storage)) == RA_OK)
        st = h5io_dset_write_stored(comm, file, c->path, c->lse_name,
                                    H5T_IEEE_F32LE, &lrg, c->lse, &storage);
    free(o);
    if (otype >= 0)
        H5Tclose(otype);
    return st;
}

/* Creates the output group with its parents; collective, agreed. */
static ra_status group_make(hid_t file, MPI_Comm comm, const char *path,
                            const char *group)
{
    char why[H5IO_DETAIL_LEN];
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), g = H5I_INVALID_HID;
    ra_status st = RA_OK;
    if (lcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0 ||
        (g = H5Gcreate2(file, group, lcpl, H5P_DEFAULT, H5P_DEFAULT)) < 0) {
        h5io_error_detail(why);
        st = ra_error_set(RA_ERR_IO, "%s: group %s: creation failed: %s",
                          path, group, why);
    }
    if (g >= 0) H5Gclose(g);
    if (lcpl >= 0) H5Pclose(lcpl);
    return ra_agree(comm, st);
}

static ra_status outputs_write(hid_t file, MPI_Comm comm, void *arg)
{
    const outputs_ctx *c = arg;
    const ra_run_meta *m = c->meta;
    const h5io_recipe recipe = {
        .out_group = m->out_group,
        .kind = "attention", .params = &c->params, .scale = m->scale,
        .nranks = c->nranks, .has_qkv = 1, .source = m->source,
        .masks = m->masks ? m->masks : "", .out_dtype = m->out_dtype,
        .out_chunk = m->out_chunk, .out_compress = m->out_compress,
        .command_line = m->command_line, .fingerprint = m->fingerprint};
    ra_status st;

    if (m->out_group && (st = group_make(file, comm, c->path,
                                         m->out_group)) != RA_OK)
        return st;
    if ((st = tensors_write(file, comm, c)) != RA_OK ||
        (st = h5io_record(comm, file, c->path, &recipe)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, c->path, "block_q",
                                    m->block_q)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, c->path, "block_kv",
                                    m->block_kv)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, c->path, "seq_q",
                                    c->shape->N)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, c->path, "seq_kv",
                                    c->shape->M)) != RA_OK)
        return st;
    return m->map ? map_write(file, comm, c) : RA_OK;
}

const char *h5io_storage_problem(int64_t chunk, int compress)
{
    if (chunk < 0)
        return "a chunk of fewer than 0 rows";
    if (compress < 0 || compress > 9)
        return "a gzip level outside 0..9";
    if (compress && !chunk)
        return "needs a chunk size, since gzip works on chunks";
    if (compress && !H5_VERSION_GE(1, 10, 2))
        return "this parallel HDF5 cannot write compressed datasets "
               "collectively (1.10.2 or later can)";
    return NULL;
}

/* The arguments of an output write, the same verdict on every rank. */
static ra_status outputs_check(const char *path, const ra_shape *shape,
                               const ra_run_meta *meta,
                               const ra_params *params)
{
    ra_status st;

    if ((st = ra_shape_check(shape)) != RA_OK)
        return st;
    if ((unsigned)meta->out_dtype > RA_DTYPE_F64)
        return ra_error_set(RA_ERR_ARG, "%s: unknown output type %d", path,
                            (int)meta->out_dtype);
    const char *bad_storage =
        h5io_storage_problem(meta->out_chunk, meta->out_compress);
    if (bad_storage)
        return ra_error_set(RA_ERR_ARG, "%s: chunk %lld, gzip level %d: %s",
                            path, (long long)meta->out_chunk,
                            meta->out_compress, bad_storage);
    const char *bad_group = meta->out_group
                                ? h5io_out_group_problem(meta->out_group)
                                : NULL;
    if (bad_group)
        return ra_error_set(RA_ERR_ARG, "%s: output group '%s': %s", path,
                            meta->out_group, bad_group);
    if ((unsigned)ra_params_layout(params, 0) > RA_LAYOUT_BALANCED)
        return ra_error_set(RA_ERR_ARG, "%s: unknown layout %d", path,
                            (int)ra_params_layout(params, 0));
    return RA_OK;
}

/* The bytes of /o, /lse and /attn_map, reserved before they are written;
 * 0 (nothing reserved) when compressed, whose size is not known ahead. */
static uint64_t outputs_bytes(const ra_shape *s, const ra_run_meta *m)
{
    const ra_dtype t = m->out_dtype;
    const int64_t o[4] = {s->B, s->N, s->H, s->Dv}, lse[3] = {s->B, s->H, s->N};
    const int64_t map[4] = {s->B, m->map ? m->map->nheads : 0,
                            m->map ? m->map->i1 - m->map->i0 : 0, s->M};
    const int64_t size = t == RA_DTYPE_F64 ? 8 : t == RA_DTYPE_F32 ? 4 : 2;

    if (m->out_compress)
        return 0;
    return (uint64_t)ra_count_checked(4, o) * (uint64_t)size +
           (uint64_t)ra_count_checked(3, lse) * 4 +
           (uint64_t)ra_count_checked(4, map) * 4;
}

ra_status h5io_write_outputs_staged(MPI_Comm comm, const char *path,
                                    int force, const ra_shape *shape,
                                    const ra_run_meta *meta, const float *o,
                                    const float *lse, h5io_staged *staged)
{
    outputs_ctx c = {.path = path, .shape = shape, .meta = meta, .o = o,
                     .lse = lse};
    h5io_quiet quiet;
    ra_status st;
    int rank;

    staged->tmp[0] = '\0';
    staged->f = NULL;
    if (!path || !meta)
        return ra_error_set(RA_ERR_ARG, "ra_h5_write_outputs: path and meta "
                            "are required");
    ra_params_join(meta->num, meta->exec, &c.params);
    if ((st = outputs_check(path, shape, meta, &c.params)) != RA_OK)
        return st;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &c.nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);
    const char *g = meta->out_group ? meta->out_group : "";
    const char *sep = g[0] && g[strlen(g) - 1] == '/' ? "" : "/";
    snprintf(c.o_name, sizeof c.o_name, "%s%so", g, sep);
    snprintf(c.lse_name, sizeof c.lse_name, "%s%slse", g, sep);
    snprintf(c.map_name, sizeof c.map_name, "%s%sattn_map", g, sep);
    c.rows = ra_params_slice(&c.params, ra_params_layout(&c.params, 0),
                             shape->N, rank, c.nranks);
    st = h5io_half_range_check(comm, path, c.o_name, meta->out_dtype, o,
                               (size_t)(shape->B * c.rows.count * shape->H *
                                        shape->Dv));
    if (st != RA_OK)
        return st;
    const h5io_job job = {path, force, outputs_bytes(shape, meta),
                          outputs_write, &c, meta->tuning};
    h5io_quiet_begin(&quiet);
    st = h5io_commit_stage(comm, &job, staged);
    h5io_quiet_end(&quiet);
    return st;
}

/* The public entry's arguments: path, shape and meta, meta's enums (its
 * num's and exec's too), and
 * o and lse for the rows this rank holds (NULL only where it holds none). */
static ra_status outputs_given(MPI_Comm comm, const char *path,
                               const ra_shape *shape, const ra_run_meta *meta,
                               const float *o, const float *lse)
{
    int rank, P;
    ra_status st = ra_shape_check(shape);
    if (st == RA_OK && (!path || !meta))
        st = ra_error_set(RA_ERR_ARG, "ra_h5_write_outputs: path and meta "
                          "are required");
    if (st == RA_OK && (unsigned)meta->out_axes > RA_AXES_BHND)
        st = ra_error_set(RA_ERR_ARG, "%s: meta.out_axes: unknown order %d",
                          path, (int)meta->out_axes);
    if (st != RA_OK)
        return st;
    ra_params p;
    ra_params_join(meta->num, meta->exec, &p);
    if ((st = ra_call_check_enums(&p)) != RA_OK)
        return st;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &P) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);
    if (ra_params_slice(&p, ra_params_layout(&p, 0), shape->N, rank,
                        P).count > 0 && (!o || !lse))
        return ra_error_set(RA_ERR_ARG, "%s: o and lse are required for the "
                            "rows rank %d holds", path, rank);
    return RA_OK;
}

ra_status ra_h5_write_outputs(MPI_Comm comm, const char *path, int force,
                              const ra_shape *shape, const ra_run_meta *meta,
                              const float *o, const float *lse)
{
    h5io_staged staged, *one = &staged;
    ra_error_clear();
    ra_status st = ra_comm_usable(comm, "ra_h5_write_outputs");
    if (st != RA_OK || (st = ra_agree(comm, outputs_given(comm, path, shape,
                                                          meta, o, lse))) !=
                           RA_OK)
        return st;
    st = h5io_write_outputs_staged(comm, path, force, shape, meta, o, lse,
                                   &staged);
    return st == RA_OK ? h5io_publish(comm, &one, 1) : st;
}
