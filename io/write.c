/* write.c: parallel writing of output files, /o (B, N, H, Dv), /lse
 * (B, H, N) and the run's attributes, each rank writing only the queries
 * its layout slice names, into a file committed atomically. */
#include <stdio.h>
#include <string.h>

#include "h5util.h"
#include "internal.h"

typedef struct {
    const char *path;
    const ra_shape *shape;
    const ra_run_meta *meta;
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
    if ((st = h5io_dset_write(comm, file, c->path, "/attn_map",
                              H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, dims, 2,
                              &rows, map->out)) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, c->path, "attn_map_rows",
                                     text)) != RA_OK)
        return st;
    return h5io_attr_write_string(comm, file, c->path, "attn_map_heads", heads);
}

/* The input datasets read and the order of those without an axes
 * attribute (root attributes q_dataset, k_dataset, v_dataset, qkv_layout),
 * so that a check reads the same tensors. */
static ra_status source_write(hid_t file, MPI_Comm comm,
                              const outputs_ctx *c)
{
    const ra_h5_source *src = c->meta->source;
    const char *names[3] = {src && src->q ? src->q : "/q",
                            src && src->k ? src->k : "/k",
                            src && src->v ? src->v : "/v"};
    static const char *const attrs[3] = {"q_dataset", "k_dataset",
                                         "v_dataset"};
    ra_status st = h5io_attr_write_string(comm, file, c->path, "qkv_layout",
                                          src && src->axes == RA_AXES_BHND
                                              ? "bhnd" : "bnhd");
    for (int i = 0; i < 3 && st == RA_OK; i++)
        st = h5io_attr_write_string(comm, file, c->path, attrs[i], names[i]);
    return st;
}

static ra_status outputs_write(hid_t file, MPI_Comm comm, void *arg)
{
    const outputs_ctx *c = arg;
    const ra_shape *s = c->shape;
    const ra_run_meta *m = c->meta;
    const ra_params *p = m->params;
    const char *path = c->path;
    const hsize_t odims[4] = {(hsize_t)s->B, (hsize_t)s->N, (hsize_t)s->H,
                              (hsize_t)s->Dv};
    const hsize_t ldims[3] = {(hsize_t)s->B, (hsize_t)s->H, (hsize_t)s->N};
    ra_status st;

    if ((st = h5io_dset_write(comm, file, path, "/o", H5T_IEEE_F32LE,
                              H5T_NATIVE_FLOAT, 4, odims, 1, &c->rows,
                              c->o)) != RA_OK ||
        (st = h5io_dset_write(comm, file, path, "/lse", H5T_IEEE_F32LE,
                              H5T_NATIVE_FLOAT, 3, ldims, 2, &c->rows,
                              c->lse)) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "engine_version",
                                     RA_VERSION_STRING)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, path, "schema_version",
                                  RA_SCHEMA_VERSION)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, path, "causal",
                                  p->causal)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, path, "window",
                                  p->window ? 1 : 0)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, path, "window_left",
                                    p->window_left)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, path, "window_right",
                                    p->window_right)) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "layout",
                                     ra_layout_name(ra_params_layout(p, 0))))
            != RA_OK ||
        (st = h5io_attr_write_int(comm, file, path, "ranks",
                                  c->nranks)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, path, "block_q",
                                    m->block_q)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, path, "block_kv",
                                    m->block_kv)) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "command_line",
                                     m->command_line ? m->command_line
                                                     : "")) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, path, "seq_q",
                                    s->N)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, path, "seq_kv", s->M)) != RA_OK)
        return st;
    if ((st = h5io_attr_write_string(comm, file, path, "masks",
                                     m->masks ? m->masks : "")) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "score",
                                     ra_score_name(p->score))) != RA_OK)
        return st;
    if ((st = source_write(file, comm, c)) != RA_OK)
        return st;
    /* only the parameter the score applies is recorded */
    if (p->score == RA_SCORE_DOT)
        st = h5io_attr_write_double(comm, file, path, "scale", m->scale);
    else if (p->score == RA_SCORE_GAUSSIAN)
        st = h5io_attr_write_double(comm, file, path, "sigma", p->sigma);
    if (st != RA_OK)
        return st;
    return m->map ? map_write(file, comm, c) : RA_OK;
}

ra_status ra_h5_write_outputs(MPI_Comm comm, const char *path, int force,
                              const ra_shape *shape, const ra_run_meta *meta,
                              const float *o, const float *lse)
{
    ra_error_clear();
    outputs_ctx c = {path, shape, meta, o, lse, {0}, 0};
    h5io_quiet quiet;
    ra_status st;
    int rank;

    if (!path || !meta || !meta->params)
        return ra_error_set(RA_ERR_ARG, "ra_h5_write_outputs: path, meta and "
                            "meta->params are required");
    if ((st = ra_shape_check(shape)) != RA_OK)
        return st;
    if ((unsigned)ra_params_layout(meta->params, 0) > RA_LAYOUT_STRIPED)
        return ra_error_set(RA_ERR_ARG, "%s: unknown layout %d", path,
                            (int)ra_params_layout(meta->params, 0));
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &c.nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);
    c.rows = ra_layout_slice(ra_params_layout(meta->params, 0), shape->N, rank, c.nranks);

    h5io_quiet_begin(&quiet);
    st = h5io_commit(comm, path, force, outputs_write, &c);
    h5io_quiet_end(&quiet);
    return st;
}
