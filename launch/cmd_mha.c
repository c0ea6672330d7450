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
    const char *in, *out;
    int force, pos, pos_kind;
    int64_t H, G;
} mha_opts;

static const char *const encodings[] = {"sinusoidal", NULL};

static const cli_opt mha_own[] = {
    CLI_OPT_REQUIRED(mha_opts, "--in", "FILE", in,
        "input: /x (or /x_q, /x_kv) and the weights (see below)"),
    CLI_OPT_REQUIRED(mha_opts, "--out", "FILE", out,
                     "output /y (B,N,Eout), renamed into place when complete"),
    CLI_OPT_FORCE(mha_opts, force),
    {.name = "--heads", .kind = CLI_INT, .meta = "H",
     .offset = CLI_FIELD(mha_opts, H, int64_t), .lo = 1, .hi = 1 << 20,
     .shown = "attribute heads", .help = "heads of the projections"},
    {.name = "--kv-heads", .kind = CLI_INT, .meta = "G",
     .offset = CLI_FIELD(mha_opts, G, int64_t), .lo = 1, .hi = 1 << 20,
     .shown = "attribute kv_heads, else H", .help = "kv heads"},
    {.name = "--pos-encoding", .kind = CLI_CHOICE, .meta = "sinusoidal",
     .offset = CLI_FIELD(mha_opts, pos_kind, int), .choices = encodings,
     .seen = CLI_SEEN(mha_opts, pos),
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

/* Everything one layer run owns between validate and report. */
typedef struct {
    cli_pass_data d;
    h5io_mha_weights lw;
    int self;
    const char *q_seg, *kv_seg;
    ra_slice qs, ks;
    float *mem, *xq, *xkv, *y; /* x_q (B,n,Eq) | x_kv (B,m,Ekv) | y (B,n,Eout) */
    double t_read, t_layer, t_write;
} mha_state;

/* What the layer owns beyond the shared data. */
static void mha_release(mha_state *r)
{
    free(r->lw.mem);
    free(r->mem);
}

/* Every check that needs no compute; the ranks agree on the verdict. */
static ra_status mha_validate(const cli_ctx *ctx, mha_opts *o, mha_state *r)
{
    r->d.in = o->in;
    r->d.out = o->out;
    ra_status st = cli_paths_agree(ctx, (const h5io_named_path[]){
        {"--in", o->in, 0}, {"--out", o->out, 1}, {NULL, NULL, 0}});
    if (st == RA_OK)
        st = cli_output_agree(ctx, o->out, o->force,
                              (const char *const[]){o->in, NULL});
    if (st != RA_OK)
        return st;
    st = h5io_mha_shape(o->in, o->H, o->G, &r->self, &r->d.s, &r->lw.layer);
    if (st == RA_OK)
        st = cli_params_check(&o->p, &r->d.s, NULL);
    if (st == RA_OK)
        st = cli_ulysses_check(&o->p, &r->d.s, ctx->nranks);
    if (st == RA_OK)
        st = h5io_mha_weights_read(o->in, &r->d.s, &r->lw);
    if (st == RA_OK)
        st = h5io_alibi_read(o->in, &r->d.s, &o->p, &r->d.slopes);
    if (st == RA_OK)
        st = h5io_segment_names(o->in, &r->q_seg, &r->kv_seg);
    r->lw.layer.pos_encoding = o->pos;
    return ra_agree(ctx->comm, st);
}

static ra_status mha_setup(const cli_ctx *ctx, mha_opts *o, mha_state *r)
{
    const ra_shape *s = &r->d.s;
    const ra_mha *L = &r->lw.layer;
    cli_pass_layout(&r->d, &o->p, r->q_seg != NULL);
    r->qs =
        ra_params_slice(&o->p, o->p.exec.layout, s->N, ctx->rank, ctx->nranks);
    r->ks =
        ra_params_slice(&o->p, o->p.exec.layout, s->M, ctx->rank, ctx->nranks);
    const int64_t nxq = ra_mul_checked(s->B * r->qs.count, L->Eq);
    const int64_t nxk = r->self ? 0 : ra_mul_checked(s->B * r->ks.count, L->Ekv);
    const int64_t ny = ra_mul_checked(s->B * r->qs.count, L->Eout);
    /* the library's projected heads beside them: q, o (B, n, H, D + Dv),
     * lse (B, H, n), k, v (B, m, G, D + Dv) */
    const int64_t fq[4] = {s->B, r->qs.count, s->H, s->D + s->Dv + 1};
    const int64_t fk[4] = {s->B, r->ks.count, s->G, s->D + s->Dv};
    const int64_t heads = ra_add_checked(ra_count_checked(4, fq),
                                         ra_count_checked(4, fk));
    ra_status st =
        cli_mem_check(ctx,
                      ra_mul_checked(ra_add_checked(ra_add_checked(nxq, nxk),
                                                    ra_add_checked(ny, heads)),
                                     (int64_t)sizeof(float)),
                      o->p.exec.mem_limit, "the layer's slices and heads");
    if (st == RA_OK && (nxq < 0 || nxk < 0 || ny < 0 ||
        !(r->mem = malloc(sizeof(float) * (size_t)(nxq + nxk + ny + 1)))))
        st = ra_error_set(RA_ERR_NOMEM, "run --mha: cannot allocate the local "
                          "slices of rank %d", ctx->rank);
    if ((st = ra_agree(ctx->comm, st)) != RA_OK)
        return st;
    r->xq = r->mem;
    r->xkv = r->self ? r->xq : r->xq + nxq;
    r->y = r->xq + nxq + nxk;
    const ra_numerics num = cli_numerics(&o->p);
    return ra_h5_read_masks(ctx->comm, o->in,
                            &(ra_h5_source){.tuning = &ctx->tuning}, s,
                            o->p.exec.layout, &num, &r->d.masks);
}

/* Reads this rank's tokens; the reader refuses non-finite ones
 * (collective). */
static ra_status mha_read(const cli_ctx *ctx, const mha_opts *o, mha_state *r)
{
    const ra_shape *s = &r->d.s;
    const ra_mha *L = &r->lw.layer;
    const char *xq_name = r->self ? "/x" : "/x_q";
    const int64_t dq[3] = {s->B, s->N, L->Eq}, dk[3] = {s->B, s->M, L->Ekv};
    ra_status st = h5io_read_tokens(ctx->comm, o->in, xq_name, dq, &r->qs,
                                    &ctx->tuning, r->xq);
    if (st == RA_OK && !r->self)
        st = h5io_read_tokens(ctx->comm, o->in, "/x_kv", dk, &r->ks,
                              &ctx->tuning, r->xkv);
    return ra_agree(ctx->comm, st);
}

static ra_status mha_compute(const cli_ctx *ctx, const mha_opts *o,
                             mha_state *r)
{
    const ra_shape *s = &r->d.s;
    const ra_mha *L = &r->lw.layer;
    const int64_t dy[3] = {s->B, s->N, L->Eout};
    const double t0 = MPI_Wtime();
    ra_status st = mha_read(ctx, o, r);
    const double t1 = MPI_Wtime();
    if (st == RA_OK &&
        (st = ra_call_mha(ctx->comm, s, &o->p, &r->d.masks.view, L,
                          &(ra_mha_io){r->xq, r->xkv, r->y}, NULL)) ==
            RA_ERR_MPI)
        cli_pass_stalled(ctx, &r->d); /* a stalled ring */
    const double t2 = MPI_Wtime();
    const h5io_layer_output out = {s, &o->p, o->pos, dy, &r->qs, r->y,
                                   ctx->command_line, &ctx->tuning};
    if (st == RA_OK)
        st = h5io_write_layer_output(ctx->comm, o->out, o->force, &out);
    r->t_read = t1 - t0;
    r->t_layer = t2 - t1;
    r->t_write = MPI_Wtime() - t2;
    return st;
}

static ra_status mha_report(const cli_ctx *ctx, const mha_opts *o,
                            const mha_state *r)
{
    const ra_shape *s = &r->d.s;
    const ra_mha *L = &r->lw.layer;
    if (ctx->rank == 0)
        printf("ringattn run --mha: layer %.3f s on %d ranks (H=%lld G=%lld "
               "D=%lld Dv=%lld, Eq=%lld Ekv=%lld Eout=%lld%s); read %.3f s, "
               "write %.3f s; wrote %s\n",
               r->t_layer, ctx->nranks, (long long)s->H, (long long)s->G,
               (long long)s->D, (long long)s->Dv, (long long)L->Eq,
               (long long)L->Ekv, (long long)L->Eout,
               o->pos ? ", sinusoidal positions" : "", r->t_read, r->t_write,
               o->out);
    return RA_OK;
}

int cmd_run_mha(const cli_ctx *ctx, int argc, char **argv)
{
    mha_opts o = {0};
    mha_state r = {0};
    const int code = cli_parse_pass(ctx, &mha_spec, &o, &o.p, argc, argv);
    if (code >= 0)
        return code;
    cli_pass_begin(ctx, &r.d, &o.p);
    ra_status st = mha_validate(ctx, &o, &r);
    if (st == RA_OK)
        st = mha_setup(ctx, &o, &r);
    if (st == RA_OK) {
        cli_pass_echo(ctx, &r.d, &o.p);
        st = mha_compute(ctx, &o, &r);
    }
    cli_pass_writing(ctx, &r.d, &o.p);
    if (st == RA_OK)
        st = mha_report(ctx, &o, &r);
    mha_release(&r);
    return cli_pass_end(ctx, &r.d, st);
}
