/* write.c: parallel writing of output files, /o (B, N, H, Dv), /lse
 * (B, H, N) and the run's attributes, each rank writing only the queries
 * its layout slice names, into a file committed atomically. */
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

static ra_status outputs_write(hid_t file, void *arg)
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

    if ((st = h5io_dset_write(file, path, "/o", H5T_IEEE_F32LE,
                              H5T_NATIVE_FLOAT, 4, odims, 1, &c->rows,
                              c->o)) != RA_OK ||
        (st = h5io_dset_write(file, path, "/lse", H5T_IEEE_F32LE,
                              H5T_NATIVE_FLOAT, 3, ldims, 2, &c->rows,
                              c->lse)) != RA_OK ||
        (st = h5io_attr_write_string(file, path, "engine_version",
                                     RA_VERSION_STRING)) != RA_OK ||
        (st = h5io_attr_write_int(file, path, "schema_version",
                                  RA_SCHEMA_VERSION)) != RA_OK ||
        (st = h5io_attr_write_int(file, path, "causal", p->causal)) != RA_OK ||
        (st = h5io_attr_write_int(file, path, "window",
                                  p->window ? 1 : 0)) != RA_OK ||
        (st = h5io_attr_write_int64(file, path, "window_left",
                                    p->window_left)) != RA_OK ||
        (st = h5io_attr_write_int64(file, path, "window_right",
                                    p->window_right)) != RA_OK ||
        (st = h5io_attr_write_double(file, path, "scale",
                                     m->scale)) != RA_OK ||
        (st = h5io_attr_write_string(file, path, "layout",
                                     ra_layout_name(ra_params_layout(p, 0)))) != RA_OK ||
        (st = h5io_attr_write_int(file, path, "ranks", c->nranks)) != RA_OK ||
        (st = h5io_attr_write_int64(file, path, "block_q",
                                    m->block_q)) != RA_OK ||
        (st = h5io_attr_write_int64(file, path, "block_kv",
                                    m->block_kv)) != RA_OK ||
        (st = h5io_attr_write_string(file, path, "command_line",
                                     m->command_line ? m->command_line
                                                     : "")) != RA_OK ||
        (st = h5io_attr_write_int64(file, path, "seq_q", s->N)) != RA_OK ||
        (st = h5io_attr_write_int64(file, path, "seq_kv", s->M)) != RA_OK)
        return st;
    return h5io_attr_write_string(file, path, "masks",
                                  m->masks ? m->masks : "");
}

ra_status ra_h5_write_outputs(MPI_Comm comm, const char *path, int force,
                              const ra_shape *shape, const ra_run_meta *meta,
                              const float *o, const float *lse)
{
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
