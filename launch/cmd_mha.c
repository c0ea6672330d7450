/* cmd_mha.c: `ringattn run --mha`: the multi-head attention layer from
 * HDF5 to HDF5. Inputs: /x (B, N, E) for self-attention, or /x_q (B, N, Eq)
 * and /x_kv (B, M, Ekv); weights /w_q (H*D, Eq), /w_k (G*D, Ekv),
 * /w_v (G*Dv, Ekv), /w_o (Eout, H*Dv), optional biases /b_q /b_k /b_v /b_o.
 * H and G come from --heads/--kv-heads or the root attributes heads and
 * kv_heads. Output: /y (B, N, Eout). Masks (/q_lens ...) apply as in run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "h5io.h"
#include "internal.h"

static const char mha_help[] =
    "usage: mpirun -np P ringattn run --mha --in IN.h5 --out OUT.h5 [options]\n"
    "\n"
    "The multi-head attention layer: y = concat_h(attention(x_q W_q^T + b_q,\n"
    "x_kv W_k^T + b_k, x_kv W_v^T + b_v)) W_o^T + b_o, weights in the PyTorch\n"
    "Linear convention, scale 1/sqrt(D) with D the per-head dim. Projections\n"
    "run on each rank's slice, then the ring, then the output projection.\n"
    "\n"
    "  --in, --out, --force, --causal, --window, --layout, --block-q,\n"
    "  --block-kv, --threads    as in run\n"
    "  --heads H --kv-heads G   heads of the projections (default: the\n"
    "                           input's root attributes heads, kv_heads)\n"
    "  --pos-encoding sinusoidal  add P(i,2j) = sin(i/10000^(2j/E)),\n"
    "                           P(i,2j+1) = cos(...) at global positions i\n"
    "                           to x_q and x_kv first\n";

/* The layer's weights, read whole on every rank: one allocation. */
typedef struct {
    float *mem;
    ra_mha layer;
} layer_weights;

/* Reads one weight or bias of the expected dims; required ones must exist. */
static ra_status weight(const char *in, const char *name, int rank,
                        const int64_t *dims, int required, float **cursor,
                        const float **out)
{
    int present;
    ra_status st = h5io_read_weights(in, name, rank, dims, *cursor, &present);
    if (st != RA_OK)
        return st;
    if (!present) {
        if (required)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: missing (the "
                                "layer needs /w_q, /w_k, /w_v, /w_o)", in, name);
        *out = NULL;
        return RA_OK;
    }
    *out = *cursor;
    *cursor += rank == 2 ? dims[0] * dims[1] : dims[0];
    return RA_OK;
}

/* Shapes from the datasets: fills s (B, N, M, H, G, D, Dv) and the widths. */
static ra_status layer_shape(const char *in, int64_t H, int64_t G, int *self,
                             ra_shape *s, ra_mha *L)
{
    int rank, present;
    int64_t xq[4], xkv[4], wq[4], wk[4], wv[4], wo[4];
    ra_status st = h5io_dataset_dims(in, "/x", &rank, xq, &present);
    if (st != RA_OK)
        return st;
    *self = present;
    if (present) {
        if (rank != 3)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset /x: expected rank 3 "
                                "(B, N, E), found rank %d", in, rank);
        memcpy(xkv, xq, sizeof xq);
    } else {
        if ((st = h5io_dataset_dims(in, "/x_q", &rank, xq, &present)) != RA_OK)
            return st;
        if (!present || rank != 3)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset /x_q: the layer "
                                "needs /x (B, N, E), or /x_q (B, N, Eq) and "
                                "/x_kv (B, M, Ekv)", in);
        if ((st = h5io_dataset_dims(in, "/x_kv", &rank, xkv, &present)) != RA_OK)
            return st;
        if (!present || rank != 3 || xkv[0] != xq[0])
            return ra_error_set(RA_ERR_INPUT, "%s: dataset /x_kv: expected "
                                "(B = %lld, M, Ekv)", in, (long long)xq[0]);
    }
    const char *names[4] = {"/w_q", "/w_k", "/w_v", "/w_o"};
    int64_t *w[4] = {wq, wk, wv, wo};
    for (int i = 0; i < 4; i++) {
        if ((st = h5io_dataset_dims(in, names[i], &rank, w[i], &present)) != RA_OK)
            return st;
        if (!present || rank != 2)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: missing or not "
                                "a matrix", in, names[i]);
    }
    if (H < 1 || G < 1 || H % G != 0 || wq[0] % H != 0 || wk[0] % G != 0 ||
        wv[0] % G != 0 || wq[0] / H != wk[0] / G)
        return ra_error_set(RA_ERR_INPUT, "%s: heads H = %lld, kv heads "
                            "G = %lld do not split /w_q (%lld rows) and /w_k "
                            "(%lld rows) into equal heads", in, (long long)H,
                            (long long)G, (long long)wq[0], (long long)wk[0]);
    *s = (ra_shape){.B = xq[0], .N = xq[1], .M = xkv[1], .H = H, .G = G,
                    .D = wq[0] / H, .Dv = wv[0] / G};
    L->Eq = xq[2];
    L->Ekv = xkv[2];
    L->Eout = wo[0];
    if (wq[1] != L->Eq || wk[1] != L->Ekv || wv[1] != L->Ekv ||
        wo[1] != H * s->Dv)
        return ra_error_set(RA_ERR_INPUT, "%s: weights do not fit the inputs: "
                            "/w_q (H*D, Eq=%lld), /w_k (G*D, Ekv=%lld), /w_v "
                            "(G*Dv, Ekv), /w_o (Eout, H*Dv=%lld)", in,
                            (long long)L->Eq, (long long)L->Ekv,
                            (long long)(H * s->Dv));
    return ra_shape_check(s);
}

static ra_status weights_read(const char *in, const ra_shape *s,
                              layer_weights *lw)
{
    ra_mha *L = &lw->layer;
    const int64_t HD = s->H * s->D, GD = s->G * s->D, GDv = s->G * s->Dv;
    const int64_t total = HD * L->Eq + GD * L->Ekv + GDv * L->Ekv +
                          L->Eout * s->H * s->Dv + HD + GD + GDv + L->Eout;
    lw->mem = malloc(sizeof(float) * (size_t)(total + 1));
    if (!lw->mem)
        return ra_error_set(RA_ERR_NOMEM, "run --mha: out of memory for the "
                                          "weights");
    float *cur = lw->mem;
    const int64_t dq[2] = {HD, L->Eq}, dk[2] = {GD, L->Ekv};
    const int64_t dv[2] = {GDv, L->Ekv}, dout[2] = {L->Eout, s->H * s->Dv};
    ra_status st;
    if ((st = weight(in, "/w_q", 2, dq, 1, &cur, &L->w_q)) != RA_OK ||
        (st = weight(in, "/w_k", 2, dk, 1, &cur, &L->w_k)) != RA_OK ||
        (st = weight(in, "/w_v", 2, dv, 1, &cur, &L->w_v)) != RA_OK ||
        (st = weight(in, "/w_o", 2, dout, 1, &cur, &L->w_o)) != RA_OK ||
        (st = weight(in, "/b_q", 1, &HD, 0, &cur, &L->b_q)) != RA_OK ||
        (st = weight(in, "/b_k", 1, &GD, 0, &cur, &L->b_k)) != RA_OK ||
        (st = weight(in, "/b_v", 1, &GDv, 0, &cur, &L->b_v)) != RA_OK)
        return st;
    return weight(in, "/b_o", 1, &L->Eout, 0, &cur, &L->b_o);
}

int cmd_run_mha(const cli_ctx *ctx, int argc, char **argv)
{
    ra_params p;
    cli_params_default(&p);
    const char *in = NULL, *out = NULL, *val;
    int force = 0, pos = 0;
    int64_t H = 0, G = 0;
    for (int i = 1; i < argc; i++) {
        int taken = cli_params_flag(&p, argc, argv, &i);
        if (taken < 0)
            return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
        if (taken)
            continue;
        int ok = 1;
        if (strcmp(argv[i], "--help") == 0) {
            if (ctx->rank == 0)
                fputs(mha_help, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--mha") == 0) {
            continue;
        } else if (strcmp(argv[i], "--in") == 0) {
            ok = (in = cli_value(argc, argv, &i)) != NULL;
        } else if (strcmp(argv[i], "--out") == 0) {
            ok = (out = cli_value(argc, argv, &i)) != NULL;
        } else if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--heads") == 0 ||
                   strcmp(argv[i], "--kv-heads") == 0) {
            int64_t *dst = argv[i][2] == 'h' ? &H : &G;
            const char *opt = argv[i];
            ok = (val = cli_value(argc, argv, &i)) != NULL &&
                 cli_parse_i64(opt, val, 1, 1 << 20, dst) == 0;
        } else if (strcmp(argv[i], "--pos-encoding") == 0) {
            ok = (val = cli_value(argc, argv, &i)) != NULL;
            if (ok && strcmp(val, "sinusoidal") != 0) {
                ra_error_set(RA_ERR_ARG, "--pos-encoding: '%s' is not "
                                         "sinusoidal", val);
                ok = 0;
            }
            pos = ok;
        } else {
            ra_error_set(RA_ERR_ARG, "run --mha: unknown option '%s' (see "
                                     "ringattn run --mha --help)", argv[i]);
            ok = 0;
        }
        if (!ok)
            return cli_fail(ctx, CLI_EXIT_USAGE, ra_error_message());
    }
    if (!in || !out)
        return cli_fail(ctx, CLI_EXIT_USAGE, "run --mha: --in and --out are "
                                             "required");
    int present;
    ra_status st = RA_OK;
    if (!H && (st = h5io_read_int_attr(in, "heads", &H, &present)) == RA_OK &&
        !present)
        st = ra_error_set(RA_ERR_ARG, "%s: no root attribute heads; pass "
                          "--heads H", in);
    if (st == RA_OK && !G &&
        (st = h5io_read_int_attr(in, "kv_heads", &G, &present)) == RA_OK &&
        !present)
        G = H;
    ra_shape s;
    layer_weights lw = {0};
    int self = 0;
    if (st == RA_OK)
        st = layer_shape(in, H, G, &self, &s, &lw.layer);
    if (st == RA_OK)
        st = weights_read(in, &s, &lw);
    lw.layer.pos_encoding = pos;
    if (st != RA_OK) {
        free(lw.mem);
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());
    }
    const char *q_seg_name, *kv_seg_name;
    if ((st = h5io_segment_names(in, &q_seg_name, &kv_seg_name)) != RA_OK) {
        free(lw.mem);
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());
    }
    const int layout_auto = p.layout == RA_LAYOUT_AUTO;
    p.layout = ra_params_layout(&p, q_seg_name != NULL);
    const ra_slice qs = ra_layout_slice(p.layout, s.N, ctx->rank, ctx->nranks);
    const ra_slice ks = ra_layout_slice(p.layout, s.M, ctx->rank, ctx->nranks);
    const ra_mha *L = &lw.layer;
    const size_t nxq = (size_t)(s.B * qs.count * L->Eq);
    const size_t nxk = self ? 0 : (size_t)(s.B * ks.count * L->Ekv);
    const size_t ny = (size_t)(s.B * qs.count * L->Eout);
    float *mem = malloc(sizeof(float) * (nxq + nxk + ny + 1));
    int bad = mem == NULL, any_bad;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, ctx->comm);
    if (any_bad) {
        free(mem);
        free(lw.mem);
        return cli_fail(ctx, CLI_EXIT_RUNTIME, "run --mha: cannot allocate "
                                               "the local slices");
    }
    float *xq = mem, *xkv = self ? xq : xq + nxq, *y = xq + nxq + nxk;
    cli_print_params(ctx, &s, &p, layout_auto, in, out);
    const int64_t dq[3] = {s.B, s.N, L->Eq}, dk[3] = {s.B, s.M, L->Ekv};
    ra_h5_masks masks = {0};
    double t0 = MPI_Wtime();
    st = h5io_read_tokens(ctx->comm, in, self ? "/x" : "/x_q", dq, &qs, xq);
    if (st == RA_OK && !self)
        st = h5io_read_tokens(ctx->comm, in, "/x_kv", dk, &ks, xkv);
    if (st == RA_OK)
        st = ra_h5_read_masks(ctx->comm, in, &s, p.layout, &masks);
    double t1 = MPI_Wtime();
    if (st == RA_OK &&
        (st = ra_mha_forward(ctx->comm, &s, &p, &masks.view, L, xq, xkv, y,
                             NULL)) == RA_ERR_MPI) /* a stalled ring */
        cli_abort(ctx, ra_error_message());
    double t2 = MPI_Wtime();
    const int64_t dy[3] = {s.B, s.N, L->Eout};
    if (st == RA_OK)
        st = h5io_write_layer_output(ctx->comm, out, force, &s, &p, pos, dy,
                                     &qs, y, ctx->command_line);
    double t3 = MPI_Wtime();
    ra_h5_masks_free(&masks);
    free(mem);
    free(lw.mem);
    if (st != RA_OK)
        return cli_fail(ctx, cli_exit_code(st), ra_error_message());
    if (ctx->rank == 0)
        printf("ringattn run --mha: layer %.3f s on %d ranks (H=%lld G=%lld "
               "D=%lld Dv=%lld, Eq=%lld Ekv=%lld Eout=%lld%s); read %.3f s, "
               "write %.3f s; wrote %s\n",
               t2 - t1, ctx->nranks, (long long)s.H, (long long)s.G,
               (long long)s.D, (long long)s.Dv, (long long)L->Eq,
               (long long)L->Ekv, (long long)L->Eout,
               pos ? ", sinusoidal positions" : "", t1 - t0, t3 - t2, out);
    return CLI_EXIT_OK;
}
