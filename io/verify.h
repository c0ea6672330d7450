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

#endif /* RA_VERIFY_H */
