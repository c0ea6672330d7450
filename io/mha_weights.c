/* mha_weights.c: the multi-head attention layer's shape and weights read
 * from its HDF5 file (mha_weights.h), whole on every rank. */
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "internal.h"
#include "mha_weights.h"

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
    const int64_t n = rank == 2 ? dims[0] * dims[1] : dims[0];
    *out = *cursor;
    *cursor += n;
    return RA_OK;
}

/* Heads not given (0) from in's root attributes heads and kv_heads (G: H
 * without it). */
static ra_status heads_of(const char *in, int64_t *H, int64_t *G)
{
    int present;
    ra_status st = RA_OK;
    if (!*H && (st = h5io_read_int_attr(in, "heads", H, &present)) ==
                   RA_OK && !present)
        st = ra_error_set(RA_ERR_ARG, "%s: no root attribute heads; pass "
                          "--heads H", in);
    if (st == RA_OK && !*G &&
        (st = h5io_read_int_attr(in, "kv_heads", G, &present)) == RA_OK &&
        !present)
        *G = *H;
    return st;
}

ra_status h5io_mha_shape(const char *in, int64_t H, int64_t G, int *self,
                             ra_shape *s, ra_mha *L)
{
    int rank, present;
    int64_t xq[4], xkv[4], wq[4], wk[4], wv[4], wo[4];
    ra_status st = heads_of(in, &H, &G);
    if (st == RA_OK)
        st = h5io_dataset_dims(in, "/x", &rank, xq, &present);
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

ra_status h5io_mha_weights_read(const char *in, const ra_shape *s,
                                h5io_mha_weights *lw)
{
    ra_mha *L = &lw->layer;
    const int64_t HD = s->H * s->D, GD = s->G * s->D, GDv = s->G * s->Dv;
    /* sizes from the file: every product and sum checked */
    const int64_t part[5] = {ra_mul_checked(HD, L->Eq),
                             ra_mul_checked(GD + GDv, L->Ekv),
                             ra_mul_checked(L->Eout, s->H * s->Dv),
                             HD + GD + GDv, ra_add_checked(L->Eout, 1)};
    int64_t total = 0;
    for (int i = 0; i < 5; i++)
        total = ra_add_checked(total, part[i]);
    if ((total = ra_mul_checked(total, (int64_t)sizeof(float))) < 0)
        return ra_error_set(RA_ERR_INPUT, "%s: the weights' byte count "
                            "overflows 64 bits", in);
    lw->mem = malloc((size_t)total);
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
