/* backward.c (io): the files of a backward pass. /do (B, N, H, Dv) is read
 * beside the inputs; /o (either order) and /lse from a forward output,
 * whose attributes must describe the same problem; /dq (B, N, H, D), /dk
 * (B, M, G, Dk) and /dv (B, M, G, Dv) (or each heads-first; and the
 * additive score's /dw_q, /dw_k, /dw_v) are written as float32 into a file
 * committed atomically, each rank writing the tokens of its layout
 * slices. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "agree.h"
#include "h5io.h"
#include "h5util.h"
#include "internal.h"
#include "score_features.h"

/* One float dataset a backward pass reads: its name, rank and expected
 * dims want[rank]; a 4-D one is a tensor (B, N, H, D) stored in the order
 * its axes attribute names, else axes (h5io_axes_of); a 3-D one is
 * (B, H, N). */
typedef struct {
    const char *name;
    int rank;
    const int64_t *want;
    ra_axes axes;
} slab_spec;

/* Reads this rank's slice (of the token axis) of dataset sp from the open
 * file; collective. */
static ra_status slab_read(hid_t file, hid_t dxpl, const char *path,
                           const slab_spec *sp, const ra_slice *slice,
                           float *buf)
{
    const char *name = sp->name;
    const int rank = sp->rank;
    const int64_t *want = sp->want;
    ra_axes axes = sp->axes;
    hid_t dset = H5I_INVALID_HID;
    hsize_t fdims[4], dims[4], w[4];
    char found[96], expect[96];
    ra_status st = h5io_dset_open(file, path, name, H5T_FLOAT, rank, fdims,
                                  &dset);
    memcpy(dims, fdims, sizeof dims);
    if (st == RA_OK && rank == 4 &&
        (st = h5io_axes_of(dset, path, name, axes, &axes)) == RA_OK)
        h5io_axes_dims(axes, fdims, dims);
    for (int i = 0; st == RA_OK && i < rank; i++) {
        w[i] = (hsize_t)want[i];
        if (dims[i] != w[i]) {
            for (int j = 0; j < rank; j++)
                w[j] = (hsize_t)want[j];
            h5io_dims_format(dims, rank, found, sizeof found);
            h5io_dims_format(w, rank, expect, sizeof expect);
            st = ra_error_set(RA_ERR_INPUT, "%s: dataset %s: shape %s differs "
                              "from the expected %s", path, name, found,
                              expect);
        }
    }
    if (st == RA_OK && rank == 4)
        st = h5io_dset_read_axes(dset, dxpl, path, name,
                                 &(h5io_region){H5T_NATIVE_FLOAT, 4, fdims,
                                                h5io_axes_token_axis(axes),
                                                slice},
                                 buf);
    else if (st == RA_OK) /* (B, H, N): the tokens on axis 2 */
        st = h5io_dset_read(dset, dxpl, path, name,
                            &(h5io_region){H5T_NATIVE_FLOAT, rank, dims, 2,
                                           slice},
                            buf);
    if (dset >= 0)
        H5Dclose(dset);
    return st;
}

/* Reads dataset sp's slab from path with MPI-IO; collective. */
static ra_status file_slab(MPI_Comm comm, const char *path,
                           const ra_h5_tuning *tuning, const slab_spec *sp,
                           const ra_slice *slice, float *buf)
{
    h5io_reader in;
    ra_status st = h5io_reader_open(comm, path, tuning, &in);
    if (st == RA_OK)
        st = slab_read(in.file, in.dxpl, path, sp, slice, buf);
    return h5io_reader_close(&in, path, st);
}

/* The forward's arithmetic against this run's (issue 39, class 2): /o and
 * /lse of a bf16 forward (its tile products, or K/V rounded on the wire)
 * differ from an fp32 one's by far more than the gradients' rounding, and
 * the backward's numbers follow from them; a forward of other arithmetic
 * is refused, naming the option that makes this run's match. */
static ra_status fwd_arith_check(const char *fwd, const h5io_run_attrs *a,
                                 const ra_params *p)
{
    const char *mine = ra_precision_name(p->num.precision);
    if (strcmp(a->precision, mine) != 0)
        return ra_error_set(RA_ERR_INPUT, "%s: a forward output of other "
                            "arithmetic: its tile products are %s (attribute "
                            "precision), this run's %s (--precision %s); "
                            "pass --precision %s, or --recompute", fwd,
                            a->precision, mine, mine, a->precision);
    const char *wire = ra_params_wire_bf16(p) ? "bf16" : "fp32";
    if (strcmp(a->wire, wire) != 0)
        return ra_error_set(RA_ERR_INPUT, "%s: a forward output of other "
                            "arithmetic: its K/V travelled as %s (attribute "
                            "wire), this run's as %s (--wire); pass --wire "
                            "%s, or --recompute", fwd, a->wire, wire,
                            a->wire);
    return RA_OK;
}

/* The score feature the forward recorded otherwise than p has it, said
 * into buf ("NAME (attribute NAME, OPTION)"), or NULL. */
static const char *feature_differs(const h5io_run_attrs *a,
                                   const ra_params *p, char *buf, size_t n)
{
    const ra_score_feature *f = ra_features_differ(&a->features, &p->num);
    if (!f)
        return NULL;
    snprintf(buf, n, "%s (attribute %s, %s)", f->name, f->name, f->option);
    return buf;
}

ra_status h5io_fwd_check(const char *fwd, const ra_shape *s,
                         const ra_params *p)
{
    h5io_run_attrs a;
    ra_status st = h5io_read_run_attrs(fwd, &a);
    if (st != RA_OK)
        return st;
    const double scale = ra_params_scale(p, s);
    const char *what = NULL;
    if (a.seq_q != s->N || a.seq_kv != s->M)
        what = "sequence lengths (attributes seq_q, seq_kv)";
    else if (a.causal != p->num.causal)
        what = "causal mask (attribute causal)";
    else if (a.window != (p->num.window ? 1 : 0) ||
             (p->num.window && (a.window_left != p->num.window_left ||
                                a.window_right != p->num.window_right)))
        what = "window (attributes window, window_left, window_right)";
    else if (strcmp(a.score, ra_score_name(p->num.score)) != 0)
        what = "score (attribute score)";
    else if (p->num.score == RA_SCORE_DOT &&
             !(fabs(a.scale - scale) <= 1e-6 * fabs(scale)))
        what = "scale (attribute scale)";
    else if (p->num.score == RA_SCORE_GAUSSIAN &&
             !(fabs(a.sigma - p->num.sigma) <= 1e-6 * p->num.sigma))
        what = "Gaussian bandwidth (attribute sigma)";
    else if (strcmp(a.rope, ra_rope_name(p->num.rope)) != 0 ||
             (p->num.rope != RA_ROPE_NONE &&
              !(fabs(a.rope_base - p->num.rope_base) <=
                1e-9 * p->num.rope_base)))
        what = "rotary embedding (attributes rope, rope_base)";
    else if (a.alibi != (p->num.alibi ? 1 : 0) ||
             (p->num.alibi &&
              strcmp(a.alibi_slopes,
                     p->num.alibi_slopes ? "/alibi_slopes" : "standard") != 0))
        what = "ALiBi (attributes alibi, alibi_slopes)";
    else if (strcmp(a.align, ra_align_name(p->num.align)) != 0)
        what = "query alignment (attribute align, --align-per-sequence)";
    else if ((a.sinks_dataset[0] != '\0') != (p->num.sinks != NULL))
        what = "sinks (attribute sinks_dataset, --sinks)";
    char feature[96];
    if (!what)
        what = feature_differs(&a, p, feature, sizeof feature);
    if (what)
        return ra_error_set(RA_ERR_INPUT, "%s: a forward output of another "
                            "problem: its %s do not match this run's", fwd,
                            what);
    ra_dtype stored = RA_DTYPE_F32;
    if (ra_dtype_parse(a.out_dtype, &stored) == RA_OK &&
        (stored == RA_DTYPE_F16 || stored == RA_DTYPE_BF16))
        return ra_error_set(RA_ERR_INPUT, "%s: /o is stored as %s (attribute "
                            "out_dtype, run --out-dtype %s): gradients from "
                            "it would be off by its rounding; refused: rerun "
                            "the forward with --out-dtype fp32 or fp64, or "
                            "pass --recompute", fwd, ra_dtype_name(stored),
                            ra_dtype_name(stored));
    return fwd_arith_check(fwd, &a, p);
}

/* The first NaN or infinity of a local (B, n, H, Dv) tensor; lse may hold
 * -inf (rows that see nothing) but never NaN or +inf. */
static ra_status finite_check(const char *path, const char *name,
                              const float *x, int64_t count, int lse)
{
    for (int64_t i = 0; i < count; i++)
        if (lse ? (isnan(x[i]) || x[i] == INFINITY) : !isfinite(x[i]))
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s holds %s "
                                "values (%s at local entry %lld of this "
                                "rank)", path, name,
                                isnan(x[i]) ? "NaN" : "infinite",
                                isnan(x[i]) ? "nan" : "inf", (long long)i);
    return RA_OK;
}

ra_status h5io_read_backward(MPI_Comm comm, const h5io_bwd_files *f,
                             const ra_shape *s, const ra_params *p,
                             float *dout, float *o, float *lse)
{
    const char *in = f->in, *fwd = f->fwd;
    ra_slice qs, ks;
    ra_status st =
        h5io_rank_slices(comm, in, p->exec.layout, ra_cut_band(p), s, &qs, &ks);
    if (st != RA_OK)
        return st;
    const int64_t odims[4] = {s->B, s->N, s->H, s->Dv};
    const int64_t ldims[3] = {s->B, s->H, s->N};
    const int64_t n_o = s->B * qs.count * s->H * s->Dv;
    h5io_quiet quiet;
    h5io_quiet_begin(&quiet);
    const slab_spec sdo = {"/do", 4, odims, f->axes};
    const slab_spec so = {"/o", 4, odims, RA_AXES_BNHD};
    const slab_spec slse = {"/lse", 3, ldims, RA_AXES_NONE};
    st = ra_agree(comm, file_slab(comm, in, f->tuning, &sdo, &qs, dout));
    if (st == RA_OK)
        st = ra_agree(comm, finite_check(in, "/do", dout, n_o, 0));
    if (st == RA_OK && fwd) {
        st = ra_agree(comm, file_slab(comm, fwd, f->tuning, &so, &qs, o));
        if (st == RA_OK)
            st = ra_agree(comm,
                          file_slab(comm, fwd, f->tuning, &slse, &qs, lse));
        if (st == RA_OK)
            st = ra_agree(comm, finite_check(fwd, "/o", o, n_o, 0));
        if (st == RA_OK)
            st = ra_agree(comm, finite_check(fwd, "/lse", lse,
                                             s->B * s->H * qs.count, 1));
    }
    h5io_quiet_end(&quiet);
    return st;
}

typedef struct {
    const char *path;
    const ra_shape *shape;
    const h5io_grads_meta *meta;
    const float *dq, *dk, *dv;
    ra_slice qs, ks;
    int rank, nranks;
} grads_ctx;

/* How the gradients were made: the forward's recipe (h5io_record) and the
 * backward's own attributes. */
static ra_status grads_attrs(hid_t file, MPI_Comm comm, const grads_ctx *c)
{
    const ra_params *p = c->meta->params;
    const ra_shape *s = c->shape;
    const char *path = c->path;
    const h5io_recipe recipe = {
        .kind = "gradients", .params = p, .scale = ra_params_scale(p, s),
        .nranks = c->nranks, .has_qkv = 1, .masks = c->meta->masks,
        .source = c->meta->source,
        .out_dtype = RA_DTYPE_F32, .command_line = c->meta->command_line,
        .fingerprint = c->meta->fingerprint};
    ra_status st;
    if ((st = h5io_record(comm, file, path, &recipe)) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "pass",
                                     "backward")) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, c->path, "forward",
                                     c->meta->forward)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, path, "seq_q", s->N)) != RA_OK)
        return st;
    return h5io_attr_write_int64(comm, file, path, "seq_kv", s->M);
}

/* The additive score's weight gradients, the same on every rank: rank 0
 * writes them whole. */
static ra_status weights_write(hid_t file, MPI_Comm comm, const grads_ctx *c)
{
    const ra_additive_grads *dw = c->meta->dw;
    const int64_t A = c->meta->params->num.additive->A;
    const hsize_t dims[3][2] = {{(hsize_t)A, (hsize_t)c->shape->D},
                                {(hsize_t)A, (hsize_t)ra_shape_dk(c->shape)},
                                {(hsize_t)A, 1}};
    const char *const names[3] = {"/dw_q", "/dw_k", "/dw_v"};
    const float *const bufs[3] = {dw->dw_q, dw->dw_k, dw->dw_v};
    const ra_slice slice = h5io_slice_range((ra_range){0, c->rank ? 0 : A});
    ra_status st = RA_OK;
    for (int i = 0; i < 3 && st == RA_OK; i++)
        st = h5io_dset_write(comm, file, c->path, names[i], H5T_IEEE_F32LE,
                             &(h5io_region){H5T_NATIVE_FLOAT, i == 2 ? 1 : 2,
                                            dims[i], 0, &slice},
                             bufs[i]);
    return st;
}

/* The sinks' gradient (H,), the same on every rank: rank 0 writes it. */
static ra_status dsinks_write(hid_t file, MPI_Comm comm, const grads_ctx *c)
{
    const hsize_t dims[1] = {(hsize_t)c->shape->H};
    const ra_slice slice =
        h5io_slice_range((ra_range){0, c->rank ? 0 : c->shape->H});
    return h5io_dset_write(comm, file, c->path, "/dsinks", H5T_IEEE_F32LE,
                           &(h5io_region){H5T_NATIVE_FLOAT, 1, dims, 0,
                                          &slice},
                           c->meta->dsinks);
}

/* The recomputed forward's /o (B, N, H, Dv) and /lse (B, H, N), float32,
 * tokens first: what the gradients were computed from. */
static ra_status forward_write(hid_t file, MPI_Comm comm, const grads_ctx *c)
{
    const ra_shape *s = c->shape;
    const hsize_t od[4] = {(hsize_t)s->B, (hsize_t)s->N, (hsize_t)s->H,
                           (hsize_t)s->Dv};
    const hsize_t ld[3] = {(hsize_t)s->B, (hsize_t)s->H, (hsize_t)s->N};
    const h5io_storage plain = {0, 0, 0};
    ra_status st = h5io_dset_write_stored(
        comm, file, c->path, "/o", H5T_IEEE_F32LE,
        &(h5io_region){H5T_NATIVE_FLOAT, 4, od, 1, &c->qs}, c->meta->o,
        &plain);
    return st != RA_OK ? st : h5io_dset_write_stored(
        comm, file, c->path, "/lse", H5T_IEEE_F32LE,
        &(h5io_region){H5T_NATIVE_FLOAT, 3, ld, 2, &c->qs}, c->meta->lse,
        &plain);
}

static ra_status grads_write(hid_t file, MPI_Comm comm, void *arg)
{
    const grads_ctx *c = arg;
    const ra_shape *s = c->shape;
    const hsize_t qd[4] = {(hsize_t)s->B, (hsize_t)s->N, (hsize_t)s->H,
                           (hsize_t)s->D};
    const hsize_t kd[4] = {(hsize_t)s->B, (hsize_t)s->M, (hsize_t)s->G,
                           (hsize_t)ra_shape_dk(s)};
    const hsize_t vd[4] = {(hsize_t)s->B, (hsize_t)s->M, (hsize_t)s->G,
                           (hsize_t)s->Dv};
    const h5io_region rq = {H5T_NATIVE_FLOAT, 4, qd, 1, &c->qs};
    const h5io_region rk = {H5T_NATIVE_FLOAT, 4, kd, 1, &c->ks};
    const h5io_region rv = {H5T_NATIVE_FLOAT, 4, vd, 1, &c->ks};
    const h5io_storage order = {0, 0, c->meta->out_axes == RA_AXES_BHND};
    const hid_t f32 = H5T_IEEE_F32LE;
    ra_status st;
    if ((st = h5io_dset_write_stored(comm, file, c->path, "/dq", f32, &rq,
                                     c->dq, &order)) != RA_OK ||
        (st = h5io_dset_write_stored(comm, file, c->path, "/dk", f32, &rk,
                                     c->dk, &order)) != RA_OK ||
        (st = h5io_dset_write_stored(comm, file, c->path, "/dv", f32, &rv,
                                     c->dv, &order)) != RA_OK ||
        (c->meta->dw && (st = weights_write(file, comm, c)) != RA_OK) ||
        (c->meta->dsinks && (st = dsinks_write(file, comm, c)) != RA_OK) ||
        (c->meta->o && (st = forward_write(file, comm, c)) != RA_OK))
        return st;
    return grads_attrs(file, comm, c);
}

ra_status h5io_write_grads(MPI_Comm comm, const char *path, int force,
                           const ra_shape *shape, const h5io_grads_meta *meta,
                           const float *dq, const float *dk, const float *dv)
{
    grads_ctx c = {path, shape, meta, dq, dk, dv, {0}, {0}, 0, 0};
    ra_status st =
        h5io_rank_slices(comm, path, meta->params->exec.layout,
                         ra_cut_band(meta->params), shape, &c.qs, &c.ks);
    if (st == RA_OK && (MPI_Comm_rank(comm, &c.rank) != MPI_SUCCESS ||
                        MPI_Comm_size(comm, &c.nranks) != MPI_SUCCESS))
        st = ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);
    if (st != RA_OK)
        return st;
    const int64_t dq4[4] = {shape->B, shape->N, shape->H, shape->D};
    const int64_t dkv[4] = {shape->B, shape->M, shape->G,
                            ra_shape_dk(shape) + shape->Dv};
    const int64_t o4[4] = {shape->B, shape->N, shape->H, shape->Dv + 1};
    const h5io_job job = {path, force, 4 * (uint64_t)(ra_count_checked(4, dq4)
                                              + ra_count_checked(4, dkv)
                                              + (meta->o ? ra_count_checked(
                                                     4, o4) : 0)),
                          grads_write, &c, meta->tuning};
    h5io_quiet quiet;
    h5io_quiet_begin(&quiet);
    st = h5io_commit(comm, &job);
    h5io_quiet_end(&quiet);
    return st;
}
