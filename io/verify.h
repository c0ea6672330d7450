/* verify.h: the checks behind `ringattn verify` and `verify --backward`
 * (internal to the library): an output file against fp64 recomputed from
 * its input and the rules it records. The command line opens a check
 * (verify_open), sets the recorded parameters from the files (its
 * syntax), runs it (verify_forward, verify_backward) and prints the result;
 * everything between - samples, shares of the ranks, reads, the fp64
 * passes, comparisons and sums over the ranks - is here.
 * The fp64 passes: one rank checks a share of the sampled query rows: it
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
    const char *fwd; /* the forward the gradients were computed from: the
                        rows' LSE and Drow = do . o from its /lse and /o
                        (their non-finite values counted in t[6]); NULL:
                        from an fp64 fold over every key block */
    ra_tally *fwd_t; /* with fwd: that forward's /o and /lse at the sampled
                        rows against fp64 (ref_grads.h), added to */
} verify_bwd_batch;

/* This rank's query rows mine of batch b: their statistics (x->fwd),
 * their share of the sampled keys' dk and dv (into x), and their sampled
 * rows' dq against the file (into x->t). Not collective. The gradients of the dot
 * and Gaussian scores, fp32 runs (no bf16 rounding). */
ra_status verify_grads_share(const char *in, const verify_ctx *c, int64_t b,
                             ra_range mine, const verify_bwd_batch *x);

/* The sampled keys' dk and dv in x, summed over every rank's share, taken
 * back by RoPE and compared with the file's /dk and /dv (into x->t). */
ra_status verify_grads_keys(const verify_ctx *c, int64_t b,
                            const verify_bwd_batch *x);

/* ---- the checks (verify_check.c, verify_bwd.c, verify_units.c) ---- */

/* Rows (and keys) a check samples by default: forward outputs whose full
 * check costs over 2^32 multiply-adds, and gradients. */
enum { VERIFY_SAMPLE = 256 };

/* A check's predicted cost on its most loaded rank, and the rates this
 * core measures now (a short dgemm and exp run): seconds of CPU time,
 * start-up aside. */
typedef struct {
    const char *what;
    double madds, exps, seconds, madd_rate, exp_rate;
} verify_cost;

/* What a check is asked: the files, the sample, the tolerance. */
typedef struct verify_req {
    MPI_Comm comm;
    const char *in, *out;
    const ra_h5_tuning *tuning;
    int64_t sample;      /* rows (and keys) checked; 0: the default */
    int all;             /* every row (backward: independently) */
    int independent;     /* backward: every row's LSE and Drow from an fp64
                            forward, not from the recorded forward */
    uint64_t seed;
    double tol;
    int precision_set;   /* forward: judge as precision, not the record */
    ra_precision precision;
    /* called on every rank with the predicted cost before the check
     * starts, or NULL */
    void (*cost)(const struct verify_req *rq, const verify_cost *c);
    void *user;
} verify_req;

/* An open check: the request and the problem as the output records it.
 * The caller fills v.p (the recorded parameters, with the input's score
 * weights, ALiBi slopes and sinks) between verify_open and the check. */
typedef struct {
    verify_req rq;
    int backward, rank, nranks;
    ra_shape s;
    verify_ctx v;        /* v.s points at s */
    ra_h5_source src;    /* the datasets the run read, as recorded */
    ra_h5_masks masks;
} verify_job;

/* Opens the check of rq->out (a forward output, or with backward a
 * gradient file): its kind, recorded rules and shape against rq->in.
 * Collective; verify_close releases it whatever it returned. */
ra_status verify_open(const verify_req *rq, int backward, verify_job *j);
void verify_close(verify_job *j);

/* The sampled query rows of /o and /lse against the fp64 reference. */
typedef struct {
    ra_tally err;        /* summed over the ranks */
    double nans;         /* NaN values of /o and /lse in every row */
    int64_t rows;        /* rows checked (j->s.B * N: all) */
    double tol;          /* the tolerance used (a 16-bit /o's rounding
                            raises it), and on o (ra_tally_tol_o) */
    double tol_o;
    int rounding;        /* tol is the rounding of a 16-bit /o */
    int pass;
} verify_fwd_result;

/* The forward check: the rows checked are split over the ranks, every row
 * is scanned for NaN. Collective. */
ra_status verify_forward(verify_job *j, verify_fwd_result *r);

/* The gradients' relative errors ||g - ref|| / ||ref||. */
enum { VERIFY_DQ, VERIFY_DK, VERIFY_DV, VERIFY_DW, VERIFY_DSINKS,
       VERIFY_GRADS };
typedef struct {
    double err[VERIFY_GRADS];
    int has[VERIFY_GRADS];  /* which gradients the file has and the check
                               compared */
    double nonfinite;       /* non-finite entries checked */
    char forward[256];      /* the recorded forward the LSE and Drow came
                               from ("": computed in fp64, independent) */
    verify_fwd_result fwd;  /* with forward[0]: its check at the sampled
                               query rows */
    int pass;
} verify_bwd_result;

/* The gradients' check (see verify_bwd.c). Collective. */
ra_status verify_backward(verify_job *j, verify_bwd_result *r);

/* ---- shared by the checks (internal to io/) ---- */

/* /o and /lse of the forward output out have the dims of the input in's
 * shape s. Not collective. */
ra_status verify_out_dims(const char *out, const ra_shape *s, const char *in);

/* After the caller set the parameters: the reference score, the segment
 * datasets and the masks. Collective. */
ra_status verify_job_masks(verify_job *j);

/* Marks want seeded random entries of total (every one when want <= 0
 * or want >= total): a (total + 1) array, or NULL out of memory. */
unsigned char *verify_pick(int64_t total, int64_t want, uint64_t seed,
                           uint64_t stream);

/* The fraction of (query, key) pairs a check computes under the recorded
 * mask: half plus a key block's share under causal, the window's width,
 * else all (masks of lens and segments aside: an upper bound). */
double verify_pair_fraction(const h5io_run_attrs *run, int64_t M);

/* Hands the caller the predicted cost (largest over the ranks) of madds
 * fp64 multiply-adds and exps exp on this rank. Collective. */
void verify_cost_tell(const verify_job *j, const char *what, double madds,
                      double exps);

/* The ranks' sums of t and r->nans into r, and the verdict under the
 * tolerance (a 16-bit /o of dtype stored may hold o rounded to its type:
 * half an ulp relative, never less than the requested tolerance).
 * Collective. */
ra_status verify_fwd_verdict(const verify_job *j, const ra_tally *t,
                             const char *stored, verify_fwd_result *r);

/* x[0..n) summed over the ranks, in pieces an int counts. */
ra_status verify_sum(MPI_Comm comm, double *x, int64_t n);

/* The naive check of the additive score: units of one (batch, kv head),
 * every pair, /dw_q, /dw_k, /dw_v whole (verify_units.c); t as in
 * verify_bwd_batch, and t[7], t[8] the weights' error and norm.
 * Collective. */
ra_status verify_units(const verify_job *j, const unsigned char *pick_q,
                       const unsigned char *pick_k, double *t);

#endif /* RA_VERIFY_H */
