/* cmd_mha.c: `ringattn run --mha`: the multi-head attention layer from
 * HDF5 to HDF5. Inputs: /x (B, N, E) for self-attention, or /x_q (B, N, Eq)
 * and /x_kv (B, M, Ekv); weights /w_q (H*D, Eq), /w_k (G*D, Ekv),
 * /w_v (G*Dv, Ekv), /w_o (Eout, H*Dv), optional biases /b_q /b_k /b_v /b_o.
 * H and G come from --heads/--kv-heads or the root attributes heads and
 * kv_heads. Output: /y (B, N, Eout). Masks (/q_lens ...) apply as in run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "call.h"
#include "cli.h"
#include "driver.h"
#include "h5io.h"
#include "internal.h"
#include "mha_weights.h"
#include "placement.h"

typedef struct {
    ra_params p;
    h5io_pass_req rq; /* the files, the heads, the positions */
    int pos_kind;
} mha_opts;

static const char *const encodings[] = {"sinusoidal", NULL};

static const cli_opt mha_own[] = {
    CLI_OPT_REQUIRED(mha_opts, "--in", "FILE", rq.in,
        "input: /x (or /x_q, /x_kv) and the weights (see below)"),
    CLI_OPT_REQUIRED(mha_opts, "--out", "FILE", rq.out,
                     "output /y (B,N,Eout), renamed into place when complete"),
    CLI_OPT_FORCE(mha_opts, rq.force),
    {.name = "--heads", .kind = CLI_INT, .meta = "H",
     .offset = CLI_FIELD(mha_opts, rq.heads, int64_t), .lo = 1, .hi = 1 << 20,
     .shown = "attribute heads", .help = "heads of the projections"},
    {.name = "--kv-heads", .kind = CLI_INT, .meta = "G",
     .offset = CLI_FIELD(mha_opts, rq.kv_heads, int64_t), .lo = 1,
     .hi = 1 << 20,
     .shown = "attribute kv_heads, else H", .help = "kv heads"},
    {.name = "--pos-encoding", .kind = CLI_CHOICE, .meta = "sinusoidal",
     .offset = CLI_FIELD(mha_opts, pos_kind, int), .choices = encodings,
     .seen = CLI_SEEN(mha_opts, rq.pos),
     .help = "add sinusoidal positions to x_q and x_kv first"},
    {0},
};

static const cli_spec mha_spec = {
    .name = "run --mha",
    .usage =
    "usage: mpirun -np P ringattn run --mha --in IN.h5 --out OUT.h5 [options]\n"
    "\n"
    "The multi-head attention layer: y = concat_h(attention(x_q W_q^T + b_q,\n"
    "x_kv W_k^T + b_k, x_kv W_v^T + b_v)) W_o^T + b_o, weights in the PyTorch\n"
    "Linear convention, scale 1/sqrt(D) with D the per-head dim. Projections\n"
    "run on each rank's slice, then the ring, then the output projection.\n"
    "Masks (/q_lens ...) apply as in run.\n",
    .groups = {{mha_own, 0}, {cli_forward_opts, offsetof(mha_opts, p)},
               {cli_pass_opts, offsetof(mha_opts, p)}},
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

/* Every check that needs no compute; the ranks agree on the verdict. */
static ra_status mha_validate(const cli_ctx *ctx, void *opts, cli_pass *r)
{
    mha_opts *o = opts;
    ra_status st = cli_paths_agree(ctx, (const h5io_named_path[]){
        {"--in", o->rq.in, 0}, {"--out", o->rq.out, 1},
        {NULL, NULL, 0}});
    if (st == RA_OK)
        st = cli_output_agree(ctx, o->rq.out, o->rq.force,
                              (const char *const[]){o->rq.in, NULL});
    cli_pass_ctx(ctx, &o->rq, H5IO_PASS_MHA, &o->p);
    if (st == RA_OK)
        st = h5io_pass_open(&o->rq, &r->j);
    return st == RA_OK ? cli_pass_inputs(ctx, &r->d, &r->j, &o->p, RA_OK)
                       : st;
}

static ra_status mha_report(const cli_ctx *ctx, void *opts, cli_pass *r)
{
    const mha_opts *o = opts;
    const ra_shape *s = &r->d.s;
    const ra_mha *L = &r->j.lw.layer;
    if (ctx->rank == 0)
        printf("ringattn run --mha: layer %.3f s on %d ranks (H=%lld G=%lld "
               "D=%lld Dv=%lld, Eq=%lld Ekv=%lld Eout=%lld%s); read %.3f s, "
               "write %.3f s; wrote %s\n",
               r->j.t_call, ctx->nranks, (long long)s->H, (long long)s->G,
               (long long)s->D, (long long)s->Dv, (long long)L->Eq,
               (long long)L->Ekv, (long long)L->Eout,
               o->rq.pos ? ", sinusoidal positions" : "", r->t_read,
               r->j.t_write, o->rq.out);
    return RA_OK;
}

int cmd_run_mha(const cli_ctx *ctx, int argc, char **argv)
{
    static const cli_pass_driver drv = {&mha_spec, mha_validate, NULL,
                                        mha_report};
    mha_opts o = {0};
    cli_pass r = {0};
    return cli_pass_main(ctx, &drv, &o, &o.p, &r, argc, argv);
}
