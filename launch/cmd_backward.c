/* cmd_backward.c: `ringattn run --backward`: the gradients dq, dk, dv of a
 * loss through the attention, from HDF5 to HDF5.
 * parse -> validate (output path, shapes, options; agreed) -> set up
 * (layout, buffers, masks) -> run (read, forward or --fwd, backward,
 * write) -> report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "call.h"
#include "cli.h"
#include "driver.h"
#include "h5io.h"
#include "internal.h"
#include "placement.h"
#include "resume.h"

typedef struct {
    ra_params p;
    ra_h5_source src; /* /q /k /v, in src.axes without an axes attribute */
    const char *in, *out, *fwd, *profile;
    const char *sinks; /* --sinks, or the one --fwd's run recorded */
    int force, recompute, out_axes;
    cli_ckpt_args ck; /* --checkpoint, --resume */
} bwd_opts;

static const cli_opt bwd_own[] = {
    CLI_OPT_REQUIRED(bwd_opts, "--in", "FILE", in,
                     "input with /q /k /v and the output gradient /do"),
    CLI_OPT_REQUIRED(bwd_opts, "--out", "FILE", out,
                     "output /dq /dk /dv (renamed into place when complete)"),
    CLI_OPT_FORCE(bwd_opts, force),
    CLI_OPT_OUT_AXES(bwd_opts, out_axes),
    CLI_OPT_TEXT(bwd_opts, "--fwd", "FILE", fwd, NULL,
                 "read /o, /lse from this run of the same problem"),
    CLI_OPT_FLAG(bwd_opts, "--recompute", recompute,
                 "recompute /o and /lse with a forward pass instead"),
    CLI_OPT_TEXT(bwd_opts, "--sinks", "PATH", sinks, NULL,
                 "attention sinks (H,) of IN.h5 (with --fwd: its run's)"),
    CLI_OPT_QKV_LAYOUT(bwd_opts, src.axes),
    CLI_OPT_PROFILE(bwd_opts, profile),
    {0},
};

static const cli_spec bwd_spec = {
    .name = "run --backward",
    .usage =
    "usage: mpirun -np P ringattn run --backward --in IN.h5 --out OUT.h5\n"
    "                                 (--fwd FWD.h5 | --recompute) [options]\n"
    "\n"
    "Gradients of L with dL/do = /do through o = softmax(score(q, k)) v:\n"
    "writes /dq (B,N,H,D), /dk (B,M,G,Dk), /dv (B,M,G,Dv) float32, with\n"
    "--score additive the weights' /dw_q (A,D), /dw_k (A,Dk), /dw_v (A,),\n"
    "with sinks their gradient /dsinks (H,).\n"
    "Masks, /additive weights and /alibi_slopes of IN.h5 apply as in run;\n"
    "every score, --rope and --alibi.\n",
    .groups = {{bwd_own, 0}, {cli_forward_opts, offsetof(bwd_opts, p)},
               {cli_pass_opts, offsetof(bwd_opts, p)},
               {cli_ckpt_opts, offsetof(bwd_opts, ck)}},
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

/* Everything one run owns between validate and report. */
typedef struct {
    cli_pass_data d;
    const char *q_seg, *kv_seg;
    char fp_fwd[H5IO_FP_LEN];  /* the --fwd file's fingerprint */
    char fp_in[H5IO_FP_LEN];   /* this run's, from --in */
    char fwd_sinks[256];       /* the --fwd run's sinks_dataset ("": none) */
    float *dsinks;             /* (H) with sinks, else NULL */
    ra_timing tm_fwd, tm;
    double t_total;
    cli_ckpt ckpt;             /* --checkpoint, --resume */
} bwd_state;

/* The sinks' dataset: --sinks, else the one the --fwd run recorded (the
 * forward's sinks); a --sinks other than that run's is refused. Not
 * collective. */
static ra_status bwd_sinks(bwd_opts *o, bwd_state *r)
{
    h5io_run_attrs a;
    ra_status st = o->fwd ? h5io_read_run_attrs(o->fwd, &a) : RA_OK;
    if (st != RA_OK)
        return st;
    if (o->fwd) {
        snprintf(r->fwd_sinks, sizeof r->fwd_sinks, "%s", a.sinks_dataset);
        if (o->sinks && strcmp(o->sinks, r->fwd_sinks) != 0)
            return ra_error_set(RA_ERR_INPUT, "--sinks %s: the forward %s "
                                "was run with %s (attribute sinks_dataset)",
                                o->sinks, o->fwd, r->fwd_sinks[0]
                                    ? r->fwd_sinks : "no sinks");
        if (!o->sinks && r->fwd_sinks[0])
            o->sinks = r->fwd_sinks;
    }
    r->d.sinks_path = o->sinks;
    o->src.sinks = o->sinks; /* recorded in the gradients' file */
    return RA_OK;
}

static ra_status bwd_validate(const cli_ctx *ctx, bwd_opts *o, bwd_state *r)
{
    r->d.in = o->in;
    o->src.tuning = &ctx->tuning; /* every read of --in */
    r->d.out = o->out;
    r->d.profile = o->profile;
    r->d.backward = 1;
    if (!o->fwd == !o->recompute)
        return ra_agree(ctx->comm,
                        ra_error_set(RA_ERR_ARG, "run --backward: give "
                                     "exactly one of --fwd FILE and "
                                     "--recompute"));
    ra_status st = cli_paths_agree(ctx, (const h5io_named_path[]){
        {"--in", o->in, 0}, {"--fwd", o->fwd, 0}, {"--profile", o->profile, 0},
        {"--out", o->out, 1}, {NULL, NULL, 0}});
    const char *inputs[4] = {o->in, NULL, NULL, NULL}; /* those given */
    int n = 1;
    if (o->fwd)
        inputs[n++] = o->fwd;
    if (o->profile)
        inputs[n++] = o->profile;
    if (st == RA_OK)
        st = cli_output_agree(ctx, o->out, o->force, inputs);
    if (st == RA_OK)
        st = ra_h5_read_shape(ctx->comm, o->in, &o->src, &r->d.s, NULL);
    if (st != RA_OK)
        return st;
    st = bwd_sinks(o, r);
    if (st == RA_OK)
        st = cli_pass_params(o->in, &r->d, &o->p);
    if (st == RA_OK && o->fwd)
        st = h5io_fwd_check(o->fwd, &r->d.s, &o->p);
    if (st == RA_OK && o->fwd)
        st = h5io_fingerprint_read(o->fwd, r->fp_fwd, sizeof r->fp_fwd);
    if (st == RA_OK)
        st = h5io_segment_names(o->in, &r->q_seg, &r->kv_seg);
    st = ra_agree(ctx->comm, st);
    return st == RA_OK ? cli_ckpt_begin(ctx, &o->ck, "backward", &r->ckpt,
                                        &o->p)
                       : st;
}

/* The layout, this rank's buffers (agreed) and the masks. */
static ra_status bwd_setup(const cli_ctx *ctx, bwd_opts *o, bwd_state *r)
{
    cli_pass_layout(&r->d, &o->p, r->q_seg != NULL);
    ra_status st = cli_tensors_alloc(&r->d.t, &r->d.s, &o->p, ctx);
    const int64_t A =
        o->p.num.score == RA_SCORE_ADDITIVE ? o->p.num.additive->A : 0;
    if (st == RA_OK)
        st = cli_grads_alloc(&r->d, A, "run --backward", ctx,
                             o->p.exec.mem_limit);
    if (st == RA_OK && o->p.num.sinks &&
        !(r->dsinks = malloc(sizeof(float) * (size_t)r->d.s.H)))
        st = ra_error_set(RA_ERR_NOMEM, "run --backward: out of memory for "
                          "the sinks' gradient");
    if ((st = ra_agree(ctx->comm, st)) != RA_OK)
        return st;
    const ra_numerics num = cli_numerics(&o->p);
    st = ra_h5_read_masks(ctx->comm, o->in,
                          &(ra_h5_source){.tuning = &ctx->tuning}, &r->d.s,
                          o->p.exec.layout, &num, &r->d.masks);
    return st == RA_OK ? h5io_resume_key(&r->ckpt.r, &r->d.s, &o->p,
                                      &r->d.masks.view, 0)
                       : st;
}

/* Reads the inputs (and the forward state from --fwd), refusing
 * non-finite values, and a forward output that does not match the input
 * (fingerprint) or the masks (lse); collective. */
static ra_status bwd_read(const cli_ctx *ctx, const bwd_opts *o, bwd_state *r)
{
    cli_tensors *t = &r->d.t;
    h5io_nonfinite bad;
    const h5io_bwd_files files = {o->in, o->fwd, o->src.axes, &ctx->tuning};
    const ra_slice rows[2] = {t->qs, t->ks};
    ra_status st = ra_h5_read_inputs(ctx->comm, o->in, &o->src, &r->d.s,
                                     rows, t->q, t->k, t->v);
    const h5io_inputs in =
        {&o->src, &r->d.s, o->p.exec.layout, ra_cut_band(&o->p), t->q,
         t->k,    t->v};
    if (st == RA_OK)
        st = h5io_scan_nonfinite(ctx->comm, o->in, &in, &bad);
    if (st == RA_OK)
        st = h5io_read_backward(ctx->comm, &files, &r->d.s, &o->p,
                                r->d.g.dout, t->o, t->lse);
    if (st == RA_OK)
        st = cli_fingerprint(ctx, &r->d, &o->p, NULL, r->q_seg, r->kv_seg,
                             r->fp_in);
    if (st == RA_OK && o->fwd)
        st = ra_agree(ctx->comm, h5io_fingerprint_compare(o->fwd, r->fp_fwd,
                                                          r->fp_in));
    if (st == RA_OK && o->fwd)
        st = h5io_lse_check(ctx->comm, o->fwd, &r->d.s, &o->p,
                            &r->d.masks.view, t->lse);
    return st == RA_OK ? cli_ckpt_arm(&r->ckpt, r->fp_in) : st;
}

static ra_status bwd_compute(const cli_ctx *ctx, const bwd_opts *o,
                             bwd_state *r)
{
    const cli_tensors *t = &r->d.t;
    const cli_grads *g = &r->d.g;
    const int additive = o->p.num.score == RA_SCORE_ADDITIVE;
    const ra_additive_grads *dw = additive ? &g->dw_grads : NULL;
    const ra_qkv in = {t->q, t->k, t->v};
    const double t0 = MPI_Wtime();
    ra_status st = bwd_read(ctx, o, r);
    const int ran = st == RA_OK;
    ra_params fwd = o->p; /* checkpoints are the backward's */
    fwd.exec.checkpoint = NULL;
    if (st == RA_OK && o->recompute)
        st = ra_call_forward(ctx->comm, &r->d.s, &fwd, &r->d.masks.view,
                             &in, &(ra_out){t->o, t->lse, NULL}, &r->tm_fwd);
    if (st == RA_OK)
        st = ra_call_backward(ctx->comm, &r->d.s, &o->p, &r->d.masks.view,
                              &in,
                              &(ra_grads){t->o, t->lse, g->dout, g->dq, g->dk,
                                          g->dv, dw, r->dsinks},
                              &r->tm);
    if (ran && st == RA_ERR_MPI) /* a stalled ring */
        cli_pass_stalled(ctx, &r->d);
    if (st == RA_OK) {
        char masks[64];
        const h5io_grads_meta meta = {&o->p, o->fwd ? o->fwd : "recomputed",
                                      cli_mask_names(&r->d.masks, masks),
                                      ctx->command_line, dw,
                                      r->fp_in, &o->src,
                                      (ra_axes)(RA_AXES_BNHD + o->out_axes),
                                      &ctx->tuning, r->dsinks,
                                      o->recompute ? t->o : NULL,
                                      o->recompute ? t->lse : NULL};
        st = h5io_write_grads(ctx->comm, o->out, o->force, &r->d.s, &meta,
                              r->d.g.dq, r->d.g.dk, r->d.g.dv);
    }
    r->t_total = MPI_Wtime() - t0;
    return st;
}

static ra_status bwd_report(const cli_ctx *ctx, const bwd_opts *o,
                            const bwd_state *r)
{
    const double flops = ra_params_backward_flops(&r->d.s, &o->p,
                                                  &r->d.masks.view);
    double mine[3] = {r->tm.total, r->tm.comm_wait, r->tm_fwd.total};
    double worst[3];
    MPI_Reduce(mine, worst, 3, MPI_DOUBLE, MPI_MAX, 0, ctx->comm);
    if (ctx->rank != 0)
        return RA_OK;
    printf("ringattn run --backward: backward %.3f s, %.1f GFLOP/s on %d "
           "ranks x %d threads (comm wait max %.3f s)%s; total %.3f s; "
           "wrote %s\n", worst[0], flops / worst[0] * 1e-9, ctx->nranks,
           ra_params_threads(&o->p), worst[1],
           o->recompute ? ", forward recomputed" : "", r->t_total, o->out);
    return RA_OK;
}

int cmd_run_backward(const cli_ctx *ctx, int argc, char **argv)
{
    bwd_opts o = {0};
    bwd_state r = {0};
    const int code = cli_parse_pass(ctx, &bwd_spec, &o, &o.p, argc, argv);
    if (code >= 0)
        return code;
    cli_pass_begin(ctx, &r.d, &o.p);
    ra_status st = bwd_validate(ctx, &o, &r);
    if (st == RA_OK)
        st = bwd_setup(ctx, &o, &r);
    if (st == RA_OK) {
        cli_pass_echo(ctx, &r.d, &o.p);
        st = bwd_compute(ctx, &o, &r);
    }
    cli_pass_writing(ctx, &r.d, &o.p);
    if (st == RA_OK)
        st = bwd_report(ctx, &o, &r);
    st = cli_ckpt_end(&r.ckpt, st);
    free(r.dsinks);
    return cli_pass_end(ctx, &r.d, st);
}
