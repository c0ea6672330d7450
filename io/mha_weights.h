/* mha_weights.h: what `ringattn run --mha` reads of the layer's file
 * besides its inputs: the shape from the datasets and the weights
 * (launch/cmd_mha.c gives the layout of the file). */
#ifndef RA_MHA_WEIGHTS_H
#define RA_MHA_WEIGHTS_H

#include <stdint.h>

#include "ringattn.h"

/* The layer's weights, read whole on every rank: one allocation (mem,
 * the caller frees it, also after a failure), the layer pointing into it. */
typedef struct {
    float *mem;
    ra_mha layer;
} h5io_mha_weights;

/* The shape from in's datasets (/x, or /x_q and /x_kv; /w_q, /w_k, /w_v,
 * /w_o) with H heads and G kv heads (0: in's root attributes heads and
 * kv_heads; G is H without it): fills s (B, N, M, H, G, D, Dv), *self
 * (in has /x) and L's widths (Eq, Ekv, Eout). RA_ERR_INPUT naming the file
 * and the dataset that does not fit. */
ra_status h5io_mha_shape(const char *in, int64_t H, int64_t G, int *self,
                         ra_shape *s, ra_mha *L);

/* Reads the weights and the optional biases of shape s (h5io_mha_shape's)
 * into lw, every size checked against overflow. RA_ERR_INPUT or
 * RA_ERR_NOMEM naming what. */
ra_status h5io_mha_weights_read(const char *in, const ra_shape *s,
                                h5io_mha_weights *lw);

#endif /* RA_MHA_WEIGHTS_H */
