/* layer.c: the multi-head attention layer over the ring (see ringattn.h).
 * Every step but the ring itself is token-wise, so each rank works on its
 * own slice: positional encodings at the slice's global positions, the
 * projections, the output projection. Memory: the slices' q, k, v, o and lse,
 * O((n + m) / P) like the ring. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernel.h"

int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);

static ra_status check_layer(const ra_shape *s, const ra_mha *L)
{
    if (!L || L->Eq < 1 || L->Ekv < 1 || L->Eout < 1)
        return ra_error_set(RA_ERR_ARG, "layer: widths Eq, Ekv, Eout must be "
                                        ">= 1");
    if (!L->w_q || !L->w_k || !L->w_v || !L->w_o)
        return ra_error_set(RA_ERR_ARG, "layer: w_q, w_k, w_v and w_o are "
                                        "required");
    if (ra_shape_dk(s) != s->D)
        return ra_error_set(RA_ERR_ARG, "layer: keys and queries share the "
                                        "head dim D");
    return RA_OK;
}

ra_status ra_mha_forward(MPI_Comm comm, const ra_shape *s,
                         const ra_params *params, const ra_masks *masks,
                         const ra_mha *L, const float *x_q, const float *x_kv,
                         float *y, ra_timing *timing)
{
    ra_status st = check_layer(s, L);
    if (st != RA_OK)
        return st;
    int P, r;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &r);
    const ra_layout lay = ra_params_layout(params, masks && masks->q_segments);
    const ra_slice qs = ra_layout_slice(lay, s->N, r, P);
    const ra_slice ks = ra_layout_slice(lay, s->M, r, P);
    const int64_t n = qs.count, m = ks.count;
    const size_t nq = (size_t)(s->B * n * s->H * s->D);
    const size_t nk = (size_t)(s->B * m * s->G * s->D);
    const size_t nv = (size_t)(s->B * m * s->G * s->Dv);
    const size_t no = (size_t)(s->B * n * s->H * s->Dv);
    const size_t nl = (size_t)(s->B * s->H * n);
    const size_t nxq = L->pos_encoding ? (size_t)(s->B * n * L->Eq) : 0;
    const size_t nxk = L->pos_encoding ? (size_t)(s->B * m * L->Ekv) : 0;
    /* one allocation: q | k | v | o | lse | encoded x_q | encoded x_kv */
    float *mem = malloc(sizeof(float) * (nq + nk + nv + no + nl + nxq + nxk + 1));
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)((n > m ? n : m) + 1));
    int bad = !mem || !pos, any_bad;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    if (any_bad) {
        free(mem);
        free(pos);
        return ra_error_set(RA_ERR_NOMEM, "layer: cannot allocate the "
                                          "projections of the local slices");
    }
    float *q = mem, *k = q + nq, *v = k + nk, *o = v + nv, *lse = o + no;
    float *xq = lse + nl, *xk = xq + nxq;
    const int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(ra_params_threads(params));

    const float *in_q = x_q, *in_kv = x_kv;
    if (L->pos_encoding) {
        memcpy(xq, x_q, sizeof(float) * nxq);
        for (int64_t i = 0; i < n; i++)
            pos[i] = ra_slice_pos(&qs, i);
        ra_posenc_add(xq, s->B, n, L->Eq, pos);
        memcpy(xk, x_kv, sizeof(float) * nxk);
        for (int64_t j = 0; j < m; j++)
            pos[j] = ra_slice_pos(&ks, j);
        ra_posenc_add(xk, s->B, m, L->Ekv, pos);
        in_q = xq;
        in_kv = xk;
    }
    /* rows (B n) of x_q to (B, n, H, D); rows (B m) of x_kv to k and v */
    ra_linear(in_q, s->B * n, L->Eq, L->w_q, L->b_q, s->H * s->D, q);
    ra_linear(in_kv, s->B * m, L->Ekv, L->w_k, L->b_k, s->G * s->D, k);
    ra_linear(in_kv, s->B * m, L->Ekv, L->w_v, L->b_v, s->G * s->Dv, v);
    openblas_set_num_threads(blas_threads);

    st = ra_forward_ex(comm, s, params, masks, q, k, v, o, lse, timing);
    if (st == RA_OK) {
        openblas_set_num_threads(ra_params_threads(params));
        /* (B n, H Dv) to (B n, Eout) */
        ra_linear(o, s->B * n, s->H * s->Dv, L->w_o, L->b_o, L->Eout, y);
        openblas_set_num_threads(blas_threads);
    }
    free(mem);
    free(pos);
    return st;
}
