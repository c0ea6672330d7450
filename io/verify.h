/* verify.h: the fp64 recomputation behind `ringattn verify` (internal to
 * the library). One rank checks a share of the sampled query rows: it
 * reads the keys and values in large blocks, makes each block's scores for
 * all its rows with one dgemm per head, runs the online softmax in fp64
 * and adds P V with a second dgemm, then tallies /o and /lse (compare.h). */
#ifndef RA_VERIFY_H
#define RA_VERIFY_H

#include "compare.h"
#include "h5io.h"
#include "kernel.h"

/* What the check needs besides the files: the shape, the run's rules as
 * recorded, the reference score, the masks (lens (B) or NULL) and the
 * segment datasets (NULL: none). */
typedef struct {
    const ra_shape *s;
    h5io_run_attrs run;
    ra_params p;            /* the run's options, as recorded */
    ra_ref_score score;
    const int64_t *q_lens, *kv_lens;
    const char *q_seg_name, *kv_seg_name;
    /* the run's rounding (its precision and wire, or --precision): q, and
     * k and v, rounded to bf16 before the reference; round_p: P was
     * rounded for P V, which the tolerance allows for (compare.h) */
    int round_q, round_kv, round_p;
} verify_ctx;

/* The order the run read q, k, v in when they have no axes attribute. */
static inline ra_axes verify_qkv_axes(const verify_ctx *c)
{
    return h5io_qkv_layout_parse(c->run.qkv_layout);
}

/* Checks the sorted flat query rows rows[0..n) (b * N + i) of out against
 * in, all heads, into t. Not collective. */
ra_status verify_rows(const char *in, const char *out, const verify_ctx *c,
                      const int64_t *rows, int64_t n, ra_tally *t);

/* One batch of verify --backward's sampled check (verify_grads.c): the
 * files, batch b's sampled query rows pick_q (N) and keys keys[0..nk)
 * (ascending), this rank's sums over its query rows of the keys' fp64
 * dk (nk, G, Dk) and dv (nk, G, Dv) (added to), and the tally t: squared
 * errors of dq, dk, dv [0..2], squared references [3..5], non-finite
 * entries [6]. With the run's sinks (c->p.sinks) the statistics include
 * the sink's column, and every row of the share adds its term of
 * d sink_h = -sum_i exp(sink_h - lse_i) (do_i . o_i) to x->dsinks. */
typedef struct {
    const char *grads;
    const unsigned char *pick_q;
    const int64_t *keys;
    int64_t nk;
    double *dk, *dv, *t;
    double *dsinks; /* with sinks (H): this rank's rows' d sinks, added to */
} verify_bwd_batch;

/* This rank's query rows mine of batch b: their statistics, their share of
 * the sampled keys' dk and dv (into x), and their sampled rows' dq
 * against the file (into x->t). Not collective. The gradients of the dot
 * and Gaussian scores, fp32 runs (no bf16 rounding). */
ra_status verify_grads_share(const char *in, const verify_ctx *c, int64_t b,
                             ra_range mine, const verify_bwd_batch *x);

/* The sampled keys' dk and dv in x, summed over every rank's share, taken
 * back by RoPE and compared with the file's /dk and /dv (into x->t). */
ra_status verify_grads_keys(const verify_ctx *c, int64_t b,
                            const verify_bwd_batch *x);

#endif /* RA_VERIFY_H */
