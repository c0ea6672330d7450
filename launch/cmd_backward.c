/* cmd_backward.c: `ringattn run --backward`: the gradients dq, dk, dv of a
 * loss through the attention, from HDF5 to HDF5.
 * parse -> validate (output path, shapes, options; agreed) -> set up
 * (layout, buffers, masks) -> run (read, forward or --fwd, backward,
 * write) -> report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "cli.h"
#include "h5io.h"
#include "internal.h"
#include "placement.h"

typedef struct {
    ra_params p;
    const char *in, *out, *fwd;
    int force, recompute, backward;
} bwd_opts;

static const cli_opt bwd_own[] = {
    {.name = "--in", .kind = CLI_TEXT, .meta = "FILE",
     .required = 1,
     .offset = CLI_FIELD(bwd_opts, in, const char *),
     .help = "input with /q /k /v and the output gradient /do\n"
     "(B,N,H,Dv), e.g. from gen --backward"},
    {.name = "--out", .kind = CLI_TEXT, .meta = "FILE",
     .required = 1,
     .offset = CLI_FIELD(bwd_opts, out, const char *),
     .help = "output /dq /dk /dv; written to a temporary file,\n"
     "renamed at the end"},
    {.name = "--fwd", .kind = CLI_TEXT, .meta = "FILE",
     .offset = CLI_FIELD(bwd_opts, fwd, const char *),
     .help = "read /o and /lse from this forward output of the\n"
     "same problem (run on --in with the same options)"},
    {.name = "--recompute", .kind = CLI_FLAG,
     .offset = CLI_FIELD(bwd_opts, recompute, int),
     .help = "recompute /o and /lse with a forward pass instead"},
    {0},
};

static const cli_spec bwd_spec = {
    .name = "run --backward",
    .usage =
    "usage: mpirun -np P ringattn run --backward --in IN.h5 --out OUT.h5\n"
    "                                 (--fwd FWD.h5 | --recompute) [options]\n"
    "\n"
    "Gradients of L with dL/do = /do through o = softmax(score(q, k)) v:\n"
    "writes /dq (B,N,H,D), /dk (B,M,G,Dk), /dv (B,M,G,Dv) float32, and with\n"
    "--score additive the weights' /dw_q (A,D), /dw_k (A,Dk), /dw_v (A,).\n"
    "Masks, /additive weights and /alibi_slopes of IN.h5 apply as in run;\n"
    "every score, --rope and --alibi.\n",
    .groups = {{cli_backward_opts, offsetof(bwd_opts, backward)},
               {bwd_own, 0}, {cli_force_opts, offsetof(bwd_opts, force)},
               {cli_forward_opts, offsetof(bwd_opts, p)}},
};

/* Everything one run owns between validate and report. */
typedef struct {
    ra_shape s;
    const char *q_seg, *kv_seg;
    int layout_auto;
    cli_tensors t;
    float *mem, *dout, *dq, *dk, *dv, *dw; /* one allocation */
    cli_score_inputs score_in;  /* the additive score's weights */
    double *slopes;             /* /alibi_slopes, or NULL */
    ra_h5_masks masks;
    ra_timing tm_fwd, tm;
    double t_total;
} bwd_state;

static void bwd_free(bwd_state *r)
{
    cli_tensors_free(&r->t);
    free(r->mem);
    r->mem = NULL;
    cli_score_free(&r->score_in);
    free(r->slopes);
    r->slopes = NULL;
    ra_h5_masks_free(&r->masks);
}

static ra_status bwd_validate(const cli_ctx *ctx, bwd_opts *o, bwd_state *r)
{
    if (!o->fwd == !o->recompute)
        return ra_agree(ctx->comm,
                        ra_error_set(RA_ERR_ARG, "run --backward: give "
                                     "exactly one of --fwd FILE and "
                                     "--recompute"));
    ra_status st = cli_output_agree(ctx, o->out, o->force,
                                    (const char *const[]){o->in, o->fwd,
                                                          NULL});
    if (st == RA_OK)
        st = ra_h5_read_shape(ctx->comm, o->in, &r->s);
    if (st != RA_OK)
        return st;
    st = cli_params_check(&o->p, &r->s, NULL);
    if (st == RA_OK)
        st = cli_score_setup(o->in, &r->s, &o->p, &r->score_in);
    if (st == RA_OK)
        st = cli_alibi_setup(o->in, &r->s, &o->p, &r->slopes);
    if (st == RA_OK && o->fwd)
        st = h5io_fwd_check(o->fwd, &r->s, &o->p);
    if (st == RA_OK)
        st = h5io_segment_names(o->in, &r->q_seg, &r->kv_seg);
    return ra_agree(ctx->comm, st);
}

/* The layout, this rank's buffers (agreed) and the masks. */
static ra_status bwd_setup(const cli_ctx *ctx, bwd_opts *o, bwd_state *r)
{
    const ra_shape *s = &r->s;
    r->layout_auto = o->p.layout == RA_LAYOUT_AUTO;
    o->p.layout = ra_params_layout(&o->p, r->q_seg != NULL);
    ra_status st = cli_tensors_alloc(&r->t, s, o->p.layout, ctx->rank,
                                     ctx->nranks);
    const int64_t n = r->t.qs.count, m = r->t.ks.count;
    const int64_t A = o->p.score == RA_SCORE_ADDITIVE ? o->p.additive->A : 0;
    const int64_t f[5][4] = {{s->B, n, s->H, s->Dv}, {s->B, n, s->H, s->D},
                             {s->B, m, s->G, ra_shape_dk(s)},
                             {s->B, m, s->G, s->Dv},
                             {A, s->D + ra_shape_dk(s) + 1, 1, 1}};
    int64_t cnt[5], total = 0;
    for (int i = 0; i < 5; i++) {
        cnt[i] = ra_count_checked(4, f[i]);
        total = ra_add_checked(total, ra_add_checked(cnt[i], 16));
    }
    if (st == RA_OK) {
        r->mem = total > 0 && (uint64_t)total < SIZE_MAX / sizeof(float)
                     ? malloc(sizeof(float) * (size_t)total) : NULL;
        if (!r->mem)
            st = ra_error_set(RA_ERR_NOMEM, "run --backward: cannot allocate "
                              "the gradients of rank %d", ctx->rank);
    }
    if ((st = ra_agree(ctx->comm, st)) != RA_OK)
        return st;
    r->dout = r->mem;
    r->dq = r->dout + cnt[0] + 16;
    r->dk = r->dq + cnt[1] + 16;
    r->dv = r->dk + cnt[2] + 16;
    r->dw = r->dv + cnt[3] + 16;
    return ra_h5_read_masks(ctx->comm, o->in, s, o->p.layout, &r->masks);
}

/* Reads the inputs (and the forward state from --fwd), refusing
 * non-finite values; collective. */
static ra_status bwd_read(const cli_ctx *ctx, const bwd_opts *o, bwd_state *r)
{
    cli_tensors *t = &r->t;
    h5io_nonfinite bad;
    ra_status st = ra_h5_read_inputs(ctx->comm, o->in, &r->s, o->p.layout,
                                     t->q, t->k, t->v);
    if (st == RA_OK)
        st = h5io_scan_nonfinite(ctx->comm, o->in, NULL, &r->s, o->p.layout,
                                 t->q, t->k, t->v, &bad);
    if (st == RA_OK)
        st = h5io_read_backward(ctx->comm, o->in, o->fwd, &r->s, &o->p,
                                r->dout, t->o, t->lse);
    return st;
}

static ra_status bwd_compute(const cli_ctx *ctx, const bwd_opts *o,
                             bwd_state *r)
{
    cli_tensors *t = &r->t;
    const int additive = o->p.score == RA_SCORE_ADDITIVE;
    const int64_t A = additive ? o->p.additive->A : 0;
    const ra_additive_grads dw = {r->dw, r->dw + A * r->s.D,
                                  r->dw + A * (r->s.D + ra_shape_dk(&r->s))};
    const double t0 = MPI_Wtime();
    ra_status st = bwd_read(ctx, o, r);
    const int ran = st == RA_OK;
    if (st == RA_OK && o->recompute)
        st = ra_forward_ex(ctx->comm, &r->s, &o->p, &r->masks.view, t->q,
                           t->k, t->v, t->o, t->lse, &r->tm_fwd);
    if (st == RA_OK)
        st = ra_backward_ex(ctx->comm, &r->s, &o->p, &r->masks.view, t->q,
                            t->k, t->v, t->o, t->lse, r->dout, r->dq, r->dk,
                            r->dv, additive ? &dw : NULL, &r->tm);
    if (ran && st == RA_ERR_MPI) /* a stalled ring */
        cli_abort(ctx, ra_error_message());
    if (st == RA_OK) {
        char masks[64];
        snprintf(masks, sizeof masks, "%s%s%s",
                 r->masks.q_lens ? "q_lens," : "",
                 r->masks.kv_lens ? "kv_lens," : "",
                 r->masks.q_segments ? "segments," : "");
        if (masks[0])
            masks[strlen(masks) - 1] = '\0';
        const h5io_grads_meta meta = {&o->p, o->fwd ? o->fwd : "recomputed",
                                      masks, ctx->command_line,
                                      additive ? &dw : NULL};
        st = h5io_write_grads(ctx->comm, o->out, o->force, &r->s, &meta,
                              r->dq, r->dk, r->dv);
    }
    r->t_total = MPI_Wtime() - t0;
    return st;
}

static void bwd_report(const cli_ctx *ctx, const bwd_opts *o,
                       const bwd_state *r)
{
    const double flops = ra_backward_flops(&r->s, &o->p, &r->masks.view);
    double mine[3] = {r->tm.total, r->tm.comm_wait, r->tm_fwd.total};
    double worst[3];
    MPI_Reduce(mine, worst, 3, MPI_DOUBLE, MPI_MAX, 0, ctx->comm);
    if (ctx->rank != 0)
        return;
    printf("ringattn run --backward: backward %.3f s, %.1f GFLOP/s on %d "
           "ranks x %d threads (comm wait max %.3f s)%s; total %.3f s; "
           "wrote %s\n", worst[0], flops / worst[0] * 1e-9, ctx->nranks,
           ra_params_threads(&o->p), worst[1],
           o->recompute ? ", forward recomputed" : "", r->t_total, o->out);
}

int cmd_run_backward(const cli_ctx *ctx, int argc, char **argv)
{
    bwd_opts o = {0};
    int code = cli_parse_pass(ctx, &bwd_spec, &o, &o.p, argc, argv);
    if (code >= 0)
        return code;
    bwd_state r = {0};
    ra_status st = bwd_validate(ctx, &o, &r);
    if (st == RA_OK && (st = bwd_setup(ctx, &o, &r)) == RA_OK) {
        cli_placement_warn(ctx, ra_params_threads(&o.p));
        cli_print_params(ctx, &r.s, &o.p, r.layout_auto, o.in, o.out);
        st = bwd_compute(ctx, &o, &r);
    }
    if (st == RA_OK)
        bwd_report(ctx, &o, &r);
    bwd_free(&r);
    return st == RA_OK ? CLI_EXIT_OK : cli_fail_status(ctx, st);
}
