/* mha.c: the multi-head attention layer over the ring (see ringattn.h).
 * Every step but the ring itself is token-wise, so each rank works on its
 * own slice: positional encodings at the slice's global positions, the
 * projections, the output projection. Memory: the slices' q, k, v, o and lse,
 * O((n + m) / P) like the ring. */
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "call.h"
#include "internal.h"
#include "kernel.h"
#include "range.h"

static ra_status check_layer(const ra_shape *s, const ra_mha *L)
{
    if (!L || L->Eq < 1 || L->Ekv < 1 || L->Eout < 1)
        return ra_error_set(RA_ERR_ARG, "layer: widths Eq, Ekv, Eout must be "
                                        ">= 1");
    if (!L->w_q || !L->w_k || !L->w_v || !L->w_o)
        return ra_error_set(RA_ERR_ARG, "layer: w_q, w_k, w_v and w_o are "
                                        "required");
    if (!ra_shape_dk_allowed(s, RA_SCORE_DOT))
        return ra_error_set(RA_ERR_ARG, "layer: keys and queries share the "
                                        "head dim D");
    const struct {
        const char *what;
        int64_t dims[3];
    } t[7] = {{"x_q (B, N, Eq)", {s->B * s->N, L->Eq, 8}},
              {"x_kv (B, M, Ekv)", {s->B * s->M, L->Ekv, 8}},
              {"y (B, N, Eout)", {s->B * s->N, L->Eout, 8}},
              {"w_q (H*D, Eq)", {s->H * s->D, L->Eq, 8}},
              {"w_k (G*D, Ekv)", {s->G * s->D, L->Ekv, 8}},
              {"w_v (G*Dv, Ekv)", {s->G * s->Dv, L->Ekv, 8}},
              {"w_o (Eout, H*Dv)", {s->H * s->Dv, L->Eout, 8}}};
    for (int i = 0; i < 7; i++)
        if (ra_count_checked(3, t[i].dims) < 0)
            return ra_error_set(RA_ERR_ARG, "layer: the byte count of %s "
                                "overflows 64 bits", t[i].what);
    return RA_OK;
}

/* Weights with a NaN or inf would spread it over every output row; unless
 * the caller allows non-finite values, they are refused. */
static ra_status check_layer_finite(const ra_shape *s, const ra_mha *L)
{
    const struct {
        const char *what;
        const float *x;
        int64_t n;
    } w[8] = {
        {"layer: weight w_q", L->w_q, s->H * s->D * L->Eq},
        {"layer: weight w_k", L->w_k, s->G * s->D * L->Ekv},
        {"layer: weight w_v", L->w_v, s->G * s->Dv * L->Ekv},
        {"layer: weight w_o", L->w_o, L->Eout * s->H * s->Dv},
        {"layer: bias b_q", L->b_q, s->H * s->D},
        {"layer: bias b_k", L->b_k, s->G * s->D},
        {"layer: bias b_v", L->b_v, s->G * s->Dv},
        {"layer: bias b_o", L->b_o, L->Eout},
    };
    ra_status st = RA_OK;
    for (int i = 0; i < 8 && st == RA_OK; i++)
        st = ra_check_finite(w[i].what, w[i].x, w[i].n);
    return st;
}

/* Every check of the layer before any work: the call's shared ones
 * (call.h), the layer's widths and weights, and the io this rank passes
 * for the rows it holds (qs, ks). */
static ra_status layer_check(const ra_shape *s, const ra_params *params,
                             const ra_masks *masks, const ra_mha *L,
                             const ra_mha_io *io)
{
    ra_status st = ra_call_check_params(s, params, masks);
    if (st == RA_OK && !io)
        st = ra_error_set(RA_ERR_ARG, "layer: io is required");
    if (st == RA_OK)
        st = check_layer(s, L);
    if (st == RA_OK && !params->num.nonfinite)
        st = check_layer_finite(s, L);
    return st;
}

/* The layer's io: NULL only where this rank holds no rows. */
static ra_status layer_check_io(const ra_mha_io *io, int64_t n, int64_t m)
{
    if ((!io->x_q || !io->y) && n > 0)
        return ra_error_set(RA_ERR_ARG, "layer: io->%s is NULL while this "
                            "rank holds %lld query rows",
                            io->x_q ? "y" : "x_q", (long long)n);
    if (!io->x_kv && m > 0)
        return ra_error_set(RA_ERR_ARG, "layer: io->x_kv is NULL while this "
                            "rank holds %lld key rows", (long long)m);
    return RA_OK;
}

/* The layer's options agreed over the ranks: the call's (call.h) and the
 * layer's widths and which biases it has. */
static ra_status layer_agree(MPI_Comm comm, ra_status st, const ra_shape *s,
                             const ra_params *params, const ra_masks *masks,
                             const ra_mha *L)
{
    ra_fingerprint fp = {0};
    if (st == RA_OK) {
        const ra_call_options o = {.call = RA_CALL_MHA, .shape = s,
                                   .params = params, .masks = masks,
                                   .weights = 1};
        ra_call_fingerprint(&o, &fp);
        ra_fp_int(&fp, "layer.Eq", L->Eq);
        ra_fp_int(&fp, "layer.Ekv", L->Ekv);
        ra_fp_int(&fp, "layer.Eout", L->Eout);
        ra_fp_int(&fp, "layer.pos_encoding", L->pos_encoding != 0);
        ra_fp_int(&fp, "layer.biases", (L->b_q != NULL) | (L->b_k != NULL) << 1 |
                                       (L->b_v != NULL) << 2 |
                                       (L->b_o != NULL) << 3);
    }
    return ra_agree_options(comm, st, &fp, NULL);
}

/* This rank's tensors: one allocation, q | k | v | o | lse | encoded x_q |
 * encoded x_kv, and the positions of its tokens. */
typedef struct {
    ra_slice qs, ks;
    float *mem, *q, *k, *v, *o, *lse, *xq, *xk;
    int64_t *pos;
} layer_local;

static ra_status layer_alloc(layer_local *ll, const ra_shape *s,
                             const ra_mha *L)
{
    const int64_t n = ll->qs.count, m = ll->ks.count;
    const size_t nq = (size_t)(s->B * n * s->H * s->D);
    const size_t nk = (size_t)(s->B * m * s->G * s->D);
    const size_t nv = (size_t)(s->B * m * s->G * s->Dv);
    const size_t no = (size_t)(s->B * n * s->H * s->Dv);
    const size_t nl = (size_t)(s->B * s->H * n);
    const size_t nxq = L->pos_encoding ? (size_t)(s->B * n * L->Eq) : 0;
    const size_t nxk = L->pos_encoding ? (size_t)(s->B * m * L->Ekv) : 0;
    ll->mem = malloc(sizeof(float) * (nq + nk + nv + no + nl + nxq + nxk + 1));
    ll->pos = malloc(sizeof(int64_t) * (size_t)((n > m ? n : m) + 1));
    if (!ll->mem || !ll->pos)
        return ra_error_set(RA_ERR_NOMEM, "layer: cannot allocate the "
                                          "projections of the local slices");
    ll->q = ll->mem;
    ll->k = ll->q + nq;
    ll->v = ll->k + nk;
    ll->o = ll->v + nv;
    ll->lse = ll->o + no;
    ll->xq = ll->lse + nl;
    ll->xk = ll->xq + nxq;
    return RA_OK;
}

/* x (B, slice count, E) plus the encodings of the slice's positions, into
 * out. */
static void layer_encode(layer_local *ll, const ra_slice *sl, int64_t B,
                         int64_t E, const float *x, float *out)
{
    memcpy(out, x, sizeof(float) * (size_t)(B * sl->count * E));
    for (int64_t i = 0; i < sl->count; i++)
        ll->pos[i] = ra_slice_pos(sl, i);
    ra_posenc_add(out, B, sl->count, E, ll->pos);
}

/* The token-wise input projections: rows (B n) of x_q to q (B, n, H, D),
 * rows (B m) of x_kv to k and v. */
static void layer_project(layer_local *ll, const ra_shape *s, const ra_mha *L,
                          const float *x_q, const float *x_kv)
{
    const int64_t n = ll->qs.count, m = ll->ks.count;
    if (L->pos_encoding) {
        layer_encode(ll, &ll->qs, s->B, L->Eq, x_q, ll->xq);
        layer_encode(ll, &ll->ks, s->B, L->Ekv, x_kv, ll->xk);
        x_q = ll->xq;
        x_kv = ll->xk;
    }
    ra_linear(x_q, s->B * n, L->Eq, L->w_q, L->b_q, s->H * s->D, ll->q);
    ra_linear(x_kv, s->B * m, L->Ekv, L->w_k, L->b_k, s->G * s->D, ll->k);
    ra_linear(x_kv, s->B * m, L->Ekv, L->w_v, L->b_v, s->G * s->Dv, ll->v);
}

ra_status ra_call_mha(MPI_Comm comm, const ra_shape *s,
                      const ra_params *params, const ra_masks *masks,
                      const ra_mha *L, const ra_mha_io *io, ra_timing *timing)
{
    ra_error_clear();
    layer_local ll = {0};
    int P = 1, r = 0;
    ra_status st = ra_comm_usable(comm, "ra_mha_forward");
    if (st != RA_OK)
        return st;
    st = layer_check(s, params, masks, L, io);
    if (MPI_Comm_size(comm, &P) != MPI_SUCCESS ||
        MPI_Comm_rank(comm, &r) != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "layer: cannot query the communicator");
    if (st == RA_OK) {
        const ra_layout lay = ra_params_layout(params,
                                               masks && masks->q_segments);
        ll.qs = ra_params_slice(params, lay, s->N, r, P);
        ll.ks = ra_params_slice(params, lay, s->M, r, P);
        st = layer_check_io(io, ll.qs.count, ll.ks.count);
    }
    if (st == RA_OK)
        st = layer_alloc(&ll, s, L);
    /* a refusal on one rank must not leave the others in the ring */
    if ((st = layer_agree(comm, st, s, params, masks, L)) != RA_OK)
        goto cleanup;
    int blas = ra_blas_enter(ra_params_threads(params));
    layer_project(&ll, s, L, io->x_q, io->x_kv);
    ra_blas_leave(blas);

    st = ra_call_forward(comm, s, params, masks,
                         &(ra_qkv){ll.q, ll.k, ll.v},
                         &(ra_out){ll.o, ll.lse, NULL}, timing);
    if (st == RA_OK) { /* (B n, H Dv) to (B n, Eout) */
        blas = ra_blas_enter(ra_params_threads(params));
        ra_linear(ll.o, s->B * ll.qs.count, s->H * s->Dv, L->w_o, L->b_o,
                  L->Eout, io->y);
        ra_blas_leave(blas);
    }
cleanup:
    free(ll.mem);
    free(ll.pos);
    return st;
}

ra_status ra_mha_forward(MPI_Comm comm, const ra_shape *shape,
                         const ra_numerics *num, const ra_exec *exec,
                         const ra_masks *masks, const ra_mha *layer,
                         const ra_mha_io *io, ra_timing *timing)
{
    ra_params p;
    ra_params_join(num, exec, &p);
    return ra_call_mha(comm, shape, &p, masks, layer, io, timing);
}
