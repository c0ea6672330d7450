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
    h5io_pass_req rq; /* the files, q/k/v's order, the sinks (or --fwd's) */
    const char *profile;
    int out_axes;     /* an index of cli_out_axes */
    cli_ckpt_args ck; /* --checkpoint, --resume */
} bwd_opts;

static const cli_opt bwd_own[] = {
    CLI_OPT_REQUIRED(bwd_opts, "--in", "FILE", rq.in,
                     "input with /q /k /v and the output gradient /do"),
    CLI_OPT_REQUIRED(bwd_opts, "--out", "FILE", rq.out,
                     "output /dq /dk /dv (renamed into place when complete)"),
    CLI_OPT_FORCE(bwd_opts, rq.force),
    CLI_OPT_OUT_AXES(bwd_opts, out_axes),
    CLI_OPT_TEXT(bwd_opts, "--fwd", "FILE", rq.fwd, NULL,
                 "read /o, /lse from this run of the same problem"),
    CLI_OPT_FLAG(bwd_opts, "--recompute", rq.recompute,
                 "recompute /o and /lse with a forward pass instead"),
    CLI_OPT_TEXT(bwd_opts, "--sinks", "PATH", rq.src.sinks, NULL,
                 "attention sinks (H,) of IN.h5 (with --fwd: its run's)"),
    CLI_OPT_QKV_LAYOUT(bwd_opts, rq.src.axes),
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

static ra_status bwd_validate(const cli_ctx *ctx, void *opts, cli_pass *r)
{
    bwd_opts *o = opts;
    r->d.profile = o->profile;
    r->d.backward = 1;
    if (!o->rq.fwd == !o->rq.recompute)
        return ra_agree(ctx->comm,
                        ra_error_set(RA_ERR_ARG, "run --backward: give "
                                     "exactly one of --fwd FILE and "
                                     "--recompute"));
    ra_status st = cli_paths_agree(ctx, (const h5io_named_path[]){
        {"--in", o->rq.in, 0}, {"--fwd", o->rq.fwd, 0},
        {"--profile", o->profile, 0}, {"--out", o->rq.out, 1},
        {NULL, NULL, 0}});
    const char *inputs[4] = {o->rq.in, NULL, NULL, NULL}; /* those given */
    int n = 1;
    if (o->rq.fwd)
        inputs[n++] = o->rq.fwd;
    if (o->profile)
        inputs[n++] = o->profile;
    if (st == RA_OK)
        st = cli_output_agree(ctx, o->rq.out, o->rq.force, inputs);
    cli_pass_ctx(ctx, &o->rq, H5IO_PASS_BACKWARD, &o->p);
    o->rq.out_axes = (ra_axes)(RA_AXES_BNHD + o->out_axes);
    if (st == RA_OK)
        st = h5io_pass_open(&o->rq, &r->j);
    if (st == RA_OK)
        st = cli_pass_inputs(ctx, &r->d, &r->j, &o->p, RA_OK);
    return st == RA_OK ? cli_ckpt_begin(ctx, &o->ck, "backward", &r->ckpt,
                                        &o->p)
                       : st;
}

static ra_status bwd_report(const cli_ctx *ctx, void *opts, cli_pass *r)
{
    const bwd_opts *o = opts;
    const double flops = ra_params_backward_flops(&r->d.s, &o->p,
                                                  &r->j.masks.view);
    double mine[3] = {r->j.tm.total, r->j.tm.comm_wait, r->j.tm_fwd.total};
    double worst[3];
    MPI_Reduce(mine, worst, 3, MPI_DOUBLE, MPI_MAX, 0, ctx->comm);
    if (ctx->rank != 0)
        return RA_OK;
    printf("ringattn run --backward: backward %.3f s, %.1f GFLOP/s on %d "
           "ranks x %d threads (comm wait max %.3f s)%s; total %.3f s; "
           "wrote %s\n", worst[0], flops / worst[0] * 1e-9, ctx->nranks,
           ra_params_threads(&o->p), worst[1],
           o->rq.recompute ? ", forward recomputed" : "", r->t_total,
           o->rq.out);
    return RA_OK;
}

int cmd_run_backward(const cli_ctx *ctx, int argc, char **argv)
{
    static const cli_pass_driver drv = {&bwd_spec, bwd_validate, NULL,
                                        bwd_report};
    bwd_opts o = {0};
    cli_pass r = {0};
    return cli_pass_main(ctx, &drv, &o, &o.p, &r, argc, argv);
}
