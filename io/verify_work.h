/* verify_work.h: the scratch and the reads of the fp64 checks (internal to
 * io/): a set of query rows of one batch (q rotated, their positions,
 * masks and state) and blocks of keys (k rotated, v, positions, which row
 * sees which key), shared by verify (verify_fp64.c) and verify --backward
 * (verify_grads.c). */
#ifndef RA_VERIFY_WORK_H
#define RA_VERIFY_WORK_H

#include "ref_block.h"
#include "verify.h"

/* Keys per block, and query rows per pass over the keys (a larger share,
 * e.g. --all, takes several passes): scores of 1024 x 2048 doubles. */
enum { KEY_BLOCK = 2048, ROW_CHUNK = 1024 };

/* Scratch of one share: its rows' tensors and state, one key block. */
typedef struct {
    int64_t nr;           /* rows of the current batch */
    int64_t *pos, *qseg;  /* (nr) query positions, segment ids or NULL */
    int64_t *qat;         /* (nr) their aligned positions (ra_align) */
    /* per-sequence alignment with segments, else NULL: one batch's query
     * ids (N) then key ids (M), the scratch of ra_align_batch (N + M) and
     * the aligned positions of all its queries (N) */
    int64_t *ids, *at;
    ra_key_id *keys;
    double *q, *o, *lse;  /* (nr, H, D) (nr, H, Dv) (H, nr) */
    double *mx, *sum;     /* (H, nr): running max and sum */
    double *acc;          /* (H, nr, Dv) */
    double *acc_abs, *va; /* round_p: P |V| (H, nr, Dv) and |v| (KB, G,
                             Dv), for the tolerance (compare.h) */
    double *qa, *ka;      /* additive: W_q q (nr, H, A), W_k k (KB, G, A) */
    double *lrow;         /* one /lse row (N) */
    double *k, *v, *sc;   /* (KB, G, Dk) (KB, G, Dv) (nr, KB) */
    unsigned char *vis;   /* (nr, KB) */
    int64_t *kpos, *kseg; /* (KB) */
    /* the Gaussian score rounded to bf16: the run rounds q and k moved by
     * the keys' centre (centre.h), so the reference moves them too */
    double *bounds;       /* (2, G, D) */
    float *centre, *kf;   /* (G, D), one key block (KB, G, D) in fp32 */
} vwork;

/* What verify_read_runs reads: rows of an input tensor (through its axes
 * or the run's qkv_layout), of a gradient (its axes or (B, N, H, D)), of
 * an output's /o, or a segment id per token. */
typedef enum {
    VERIFY_TENSOR, VERIFY_GRAD, VERIFY_O, VERIFY_IDS
} verify_run_kind;

/* Tokens idx[0..n) (ascending) of batch b. */
typedef struct {
    int64_t b;
    const int64_t *idx;
    int64_t n;
} verify_tokens;

/* Reads the tokens tok of dataset name in runs of consecutive tokens:
 * width doubles each, or one int64 id. */
ra_status verify_read_runs(const char *path, const char *name,
                           verify_run_kind kind, const verify_ctx *c,
                           verify_tokens tok, int64_t width, void *out);

/* Allocates w for up to n rows and KEY_BLOCK keys. */
ra_status verify_work_alloc(const verify_ctx *c, int64_t n, vwork *w);

void verify_work_free(vwork *w);

/* The w->nr rows rows[] (flat b * N + i, ascending) of batch b: q (rotated),
 * segment ids, aligned positions; /o and /lse of out when out is not NULL;
 * the additive score's projection; the softmax state reset. */
ra_status verify_rows_load(const char *in, const char *out,
                           const verify_ctx *c, int64_t b,
                           const int64_t *rows, vwork *w);

/* kb keys of batch b, keys[0..kb) (ascending) or j0 + 0..kb when keys is
 * NULL: k (rotated), v, ids, positions, the additive key projection, and
 * which (row, key) pairs are visible. */
ra_status verify_keys_load(const char *in, const verify_ctx *c, int64_t b,
                           int64_t j0, const int64_t *keys, int64_t kb,
                           vwork *w);

/* Which (row, key) pairs of batch b the kb keys in w show, for the rows
 * in w now (verify_keys_load does it for the rows then). */
void verify_keys_visible(const verify_ctx *c, int64_t b, int64_t kb,
                         vwork *w);

/* Whether any row of w sees any of the block's kb keys (a block nobody
 * sees changes no state and is skipped). */
int verify_block_seen(const vwork *w, int64_t kb);

/* The block of kb keys in w as the fp64 passes see it (ref_block.h). */
ra_ref_block verify_block_of(const verify_ctx *c, int64_t kb, vwork *w);

#endif /* RA_VERIFY_WORK_H */
