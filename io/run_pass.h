/* run_pass.h: one pass from files to files (internal to the library):
 * what `ringattn run`, `run --backward` and `run --mha` do between their
 * options and their printed lines. The caller fills a request (the files,
 * the datasets, the output's form) and runs the steps in order:
 *   h5io_pass_open    the shape (the layer's from its file; the --fwd
 *                     run's sinks)
 *   h5io_pass_inputs  the options against the input: the score's weights,
 *                     the ALiBi slopes, the sinks, the forward file, the
 *                     segment datasets
 *   h5io_pass_setup   the strategy's refusals, the layout, this rank's
 *                     buffers, the masks
 *   h5io_pass_read    q, k, v (or the tokens), the non-finite scan, the
 *                     fingerprint
 *   h5io_pass_call    the library's call, the output written
 *   h5io_pass_free
 * Each step returns the same status on every rank, and is collective. The
 * options' checks, --strategy auto, the checkpoints' hooks and signals,
 * the watchdog, what is printed and the exit are the caller's. */
#ifndef RA_IO_RUN_PASS_H
#define RA_IO_RUN_PASS_H

#include "h5io.h"
#include "mha_weights.h"
#include "run_inputs.h"

/* ---- a rank's buffers ---- */

/* What one rank may allocate: limit bytes when > 0 (--mem-limit), else
 * this node's physical memory shared evenly by its ranks_on_node ranks
 * (0: one). */
typedef struct {
    int rank;
    int64_t limit;
    int ranks_on_node;
} h5io_mem;

/* Refuses (RA_ERR_ARG, "shape: WHAT of rank R need X bytes, more than the
 * Y bytes a rank may use (...)") need bytes above what one rank may
 * allocate, or a need that overflowed (negative). Not collective. */
ra_status h5io_mem_check(const h5io_mem *m, int64_t need, const char *what);

/* What h5io_tensors_alloc() allocates, in h5io_mem_check()'s message. */
#define H5IO_TENSORS_WHAT "the tensors (q, k, v, o, lse)"

/* A rank's local tensors under a resolved layout, one allocation:
 * q (B, n, H, D)  k (B, m, G, Dk)  v (B, m, G, Dv)  o (B, n, H, Dv)
 * lse (B, H, n), n = qs.count, m = ks.count. */
typedef struct {
    ra_slice qs, ks;
    size_t nq, nk, nv, no, nl; /* element counts */
    float *mem, *q, *k, *v, *o, *lse;
} h5io_tensors;

/* Allocates the tensors of rank of nranks under p's layout (resolved),
 * after h5io_mem_check() of their bytes; RA_ERR_ARG (the shape does not
 * fit, or a size overflows) or RA_ERR_NOMEM otherwise. Not collective. */
ra_status h5io_tensors_alloc(h5io_tensors *t, const ra_shape *s,
                             const ra_params *p, const h5io_mem *m,
                             int nranks);
void h5io_tensors_free(h5io_tensors *t);

/* A rank's gradient buffers, one allocation:
 * dout (B, n, H, Dv)  dq (B, n, H, D)  dk (B, m, G, Dk)  dv (B, m, G, Dv)
 * dw: w_q (A, D) | w_k (A, Dk) | w_v (A), A = 0 without the additive
 * score; n, m the counts of the tensors' slices. */
typedef struct {
    float *mem, *dout, *dq, *dk, *dv, *dw;
    ra_additive_grads dw_grads; /* the three parts of dw */
} h5io_grads;

/* Allocates g for t's slices of s with A additive hidden units (0: none),
 * after h5io_mem_check() of the tensors and gradients together;
 * RA_ERR_ARG (they cannot fit) or RA_ERR_NOMEM naming command. Not
 * collective. */
ra_status h5io_grads_alloc(h5io_grads *g, const ra_shape *s,
                           const h5io_tensors *t, int64_t A,
                           const h5io_mem *m, const char *command);

/* ---- the pass ---- */

typedef enum { H5IO_PASS_FORWARD, H5IO_PASS_BACKWARD, H5IO_PASS_MHA }
    h5io_pass_kind;

/* What the pass is asked. */
typedef struct {
    MPI_Comm comm;
    int rank, nranks;
    h5io_mem mem;
    const ra_h5_tuning *tuning;   /* every read and write */
    const char *command_line;     /* for the output's attributes */
    h5io_pass_kind kind;
    const char *in, *out;
    int force;
    ra_h5_source src;             /* q, k, v, masks, axes, sinks */
    int allow_nonfinite;          /* forward: NaN and inf let through */
    /* the forward's output: its form, and the attention map's rows and
     * heads (map.nheads 0: none) */
    ra_dtype out_dtype;
    int64_t out_chunk;
    int out_compress;
    ra_axes out_axes;             /* also the gradients' */
    const char *out_group;
    ra_attn_map map;
    /* the backward: o and lse from the forward output fwd, or recomputed */
    const char *fwd;
    int recompute;
    /* the layer: its heads (0: the file's attributes), positions added */
    int64_t heads, kv_heads;
    int pos;
} h5io_pass_req;

/* One pass, from h5io_pass_open to h5io_pass_free. */
typedef struct {
    h5io_pass_req rq;
    ra_shape s;
    ra_axes axes[3];            /* the order q, k, v were read in */
    int layout_auto;            /* the layout was chosen by the library */
    h5io_tensors t;
    h5io_grads g;
    float *dsinks;              /* backward with sinks: (H) */
    h5io_additive score_in;     /* the additive score's weights */
    double *slopes;             /* /alibi_slopes, or NULL */
    float *sinks;               /* the sinks read, or NULL */
    ra_h5_masks masks;
    const char *q_seg, *kv_seg; /* the segment datasets, or NULL */
    ra_h5_source recorded;      /* the datasets used, for the output */
    char mask_names[64];        /* the "masks" attribute of the output */
    char fingerprint[H5IO_FP_LEN]; /* of what was read */
    char fp_fwd[H5IO_FP_LEN];   /* the --fwd file's */
    char fwd_sinks[256];        /* the --fwd run's sinks_dataset */
    h5io_nonfinite bad;         /* h5io_pass_read's refusal, if one */
    h5io_mha_weights lw;        /* the layer's weights and widths */
    int self;                   /* the layer reads /x alone */
    ra_slice xqs, xks;          /* the layer's token slices */
    float *xmem, *xq, *xkv, *y;
    h5io_staged staged;         /* the forward's output, not yet renamed */
    ra_timing tm, tm_fwd;       /* the call's, the recomputed forward's */
    int stalled;                /* the call returned RA_ERR_MPI: a stalled
                                   ring, the other ranks wait for this one */
    double t_call, t_write;     /* the call's and the write's seconds */
} h5io_pass;

/* The shape of rq->in (and, backward, the --fwd run's sinks dataset taken
 * for rq->src.sinks, a different one refused); j owns a copy of rq. */
ra_status h5io_pass_open(const h5io_pass_req *rq, h5io_pass *j);

/* p against the input (h5io_score_dims, ra_call_check_local), then what it
 * reads beside q, k, v: the additive weights, the ALiBi slopes, the sinks
 * (p pointed at them), the layer's weights, the --fwd file's attributes
 * and fingerprint, the segment datasets. */
ra_status h5io_pass_inputs(h5io_pass *j, ra_params *p);

/* The strategy's refusals (ra_call_strategy_check), p->layout resolved,
 * this rank's buffers (the gradients, the map's rows), the masks. */
ra_status h5io_pass_setup(h5io_pass *j, ra_params *p);

/* This rank's slices read, non-finite values refused (j->bad names one;
 * rq.allow_nonfinite lets the forward's through), the fingerprint made
 * and, with --fwd, compared and its lse checked against the masks. */
ra_status h5io_pass_read(h5io_pass *j, const ra_params *p);

/* The library's call (a stall sets j->stalled) and the output: the
 * forward's staged for h5io_publish, the gradients' and the layer's
 * written. */
ra_status h5io_pass_call(h5io_pass *j, const ra_params *p);

void h5io_pass_free(h5io_pass *j);

#endif /* RA_IO_RUN_PASS_H */
