/* ringattn.h: the one public header of the ringattn library.
 *
 * Exact softmax attention, softmax(s * Q K^T) V, computed by MPI ranks that
 * each hold one slice of the sequence (blockwise ring attention). An MPI
 * program calls ra_forward() on its own in-memory slices
 * (docs/examples/api_forward.c).
 *
 * Shape letters, used the same way everywhere in the code:
 *   B batch, N query length, M key/value length, H query heads,
 *   G key/value heads (G divides H; query head h reads kv head h / (H/G)),
 *   D head dim of q and k (Dk for k when it differs, additive score only),
 *   Dv head dim of v, A hidden size of the additive score, P ranks.
 * Tensors are row-major with the sequence axis second:
 *   q (B, N, H, D)  k (B, M, G, Dk)  v (B, M, G, Dv)  o (B, N, H, Dv)
 *   lse (B, H, N): natural log of the sum of exp(score) over the keys a query
 *   sees, -inf for a row that sees none (its o row is then 0).
 *
 * Causal convention (bottom-right aligned, as in flash-attention): query i
 * sees key j when j <= i + (M - N). With N == M this is j <= i. Every rule
 * that places a query (causal, window, ALiBi, RoPE) places it at its
 * aligned position i', i + (M - N) by default; ra_numerics.align can align
 * each sequence on its own lengths instead (ra_align).
 *
 * The contract of every function below: its arguments are checked before
 * any work. A function that returns ra_status refuses an argument the
 * header does not allow (a NULL pointer, an enum value outside its enum,
 * a size out of range or whose byte count overflows int64) with RA_ERR_ARG
 * and one line naming it (ra_error_message); one that returns a struct or
 * a number returns an empty or zero result, and one that returns nothing
 * does nothing, as each says. A function that takes a communicator
 * returns RA_ERR_MPI before MPI_Init and after MPI_Finalize, and
 * RA_ERR_ARG for MPI_COMM_NULL, without communicating. The collective
 * ones also agree over the ranks: every rank returns the same status and
 * message, and the options every rank must pass alike are compared
 * (ra_forward).
 *
 * The environment: everything a call does comes from its arguments, with
 * two exceptions, each read where said. RINGATTN_GEMM, the engine
 * RA_GEMM_AUTO stands for, read once per process (ra_gemm). HDF5's search
 * paths HDF5_EXT_PREFIX, HDF5_EXTFILE_PREFIX and HDF5_VDS_PREFIX, read by
 * the ra_h5_* functions each time they check a file's links, external
 * storage and virtual datasets, as HDF5 reads them, so that the checks
 * follow the files HDF5 would. No other variable (threads come from
 * ra_exec.threads, never from OMP_NUM_THREADS).
 */
#ifndef RINGATTN_H
#define RINGATTN_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* RA_API marks the exported functions: the shared library is built with
 * hidden visibility, so these are its only symbols. */
#if defined(RA_BUILDING_LIBRARY) && defined(__GNUC__)
#define RA_API __attribute__((visibility("default")))
#else
#define RA_API
#endif

#define RA_VERSION_STRING "0.1.0"
#define RA_SCHEMA_VERSION 1

typedef enum {
    RA_OK = 0,
    RA_ERR_ARG,       /* an invalid argument or option value */
    RA_ERR_INPUT,     /* an input file or dataset is unusable */
    RA_ERR_NOMEM,     /* an allocation failed */
    RA_ERR_IO,        /* reading or writing a file failed */
    RA_ERR_MPI,       /* an MPI call failed */
    RA_ERR_EXISTS,    /* the output exists and replacing it was not asked */
    RA_STOPPED,       /* a checkpoint asked the call to stop (ra_checkpoint):
                         its state is saved, its outputs are not done */
} ra_status;

/* A static, human-readable name for a status. */
RA_API const char *ra_status_str(ra_status st);

/* How the sequence is cut over the ranks (queries and keys alike). Files
 * keep the natural token order; the layout only decides which tokens a
 * rank holds, always in increasing order. See ra_layout_slice(). */
typedef enum {
    RA_LAYOUT_CONTIGUOUS = 0, /* rank r: one run of consecutive tokens */
    RA_LAYOUT_ZIGZAG = 1,     /* 2P chunks; rank r: chunks r and 2P-1-r */
    RA_LAYOUT_STRIPED = 2,    /* token i on rank i mod P */
    RA_LAYOUT_AUTO = 3,       /* the default: see ra_exec_layout() */
    RA_LAYOUT_BALANCED = 4,   /* rank r: one run of consecutive tokens,
                                 the cuts placed so that every rank's
                                 queries see as many keys under causal and
                                 the window (ra_layout_slice) */
} ra_layout;

/* How the ranks split one attention call (docs/DESIGN.md, "Strategies").
 * Every strategy takes and returns the same layout slices (ra_forward),
 * so the choice changes neither the files nor the results beyond rounding. */
typedef enum {
    RA_STRATEGY_RING = 0,      /* the default: K/V blocks travel a ring */
    RA_STRATEGY_ALLGATHER = 1, /* every rank gathers all K/V (chunks, in
                                  flight while the first ones compute);
                                  memory O(M) per rank, see mem_limit */
    RA_STRATEGY_TREE = 2,      /* decoding: every rank attends its K/V with
                                  all queries, partials merged by an MPI
                                  reduction in log P steps */
    RA_STRATEGY_RING_Q = 3,    /* pass-Q: query blocks travel with their
                                  running (o, lse), K/V stay; cheaper than
                                  ring when N H << M G */
    RA_STRATEGY_ULYSSES = 4,   /* head-parallel: all-to-all to head groups
                                  (all tokens of about H/P heads), local
                                  attention, all-to-all back; P <= H */
    RA_STRATEGY_HYBRID = 5,    /* ulysses inside groups of ulysses_size
                                  ranks (default: one node's), a K/V ring
                                  between the groups */
} ra_strategy;

#define RA_STRATEGY_COUNT 6

/* Global problem shape. */
typedef struct {
    int64_t B, N, M, H, G, D, Dv;
    int64_t Dk; /* key head dim; 0 means D (only the additive score may
                   differ) */
} ra_shape;

/* The key head dim of a shape: Dk, or D when Dk is 0. */
static inline int64_t ra_shape_dk(const ra_shape *s)
{
    return !s ? 0 : s->Dk > 0 ? s->Dk : s->D;
}

/* Checks that every size is >= 1 (Dk >= 0), G divides H, and that byte
 * counts of every tensor fit in int64; a NULL shape is refused. */
RA_API ra_status ra_shape_check(const ra_shape *shape);

/* The score a(q, k) whose softmax weighs the values (the textbook's three):
 *   dot:       s * q.k                         (scaled dot product)
 *   gaussian:  -||q - k||^2 / (2 sigma^2)      (Nadaraya-Watson kernel)
 *   additive:  w_v . tanh(W_q q + W_k k)       (Bahdanau); q and k may have
 *              different dims (D and Dk). */
typedef enum {
    RA_SCORE_DOT = 0,
    RA_SCORE_GAUSSIAN = 1,
    RA_SCORE_ADDITIVE = 2,
} ra_score;

/* Weights of the additive score, shared by all heads: w_q (A, D),
 * w_k (A, Dk), w_v (A). Owned by the caller. */
typedef struct {
    int64_t A;
    const float *w_q, *w_k, *w_v;
} ra_additive;

/* Rotary position embedding (RoPE) of q and k, by the pairing of the head
 * dims that a model was trained with; frequency theta_i = base^(-2i/D),
 * i = 0 .. D/2 - 1, angle pos * theta_i:
 *   interleaved: pairs (2i, 2i+1) (GPT-J, Meta's original Llama code)
 *   half:        pairs (i, i + D/2) (GPT-NeoX, Llama in Hugging Face
 *                transformers: rotate_half)
 * Each pair (a, b) becomes (a cos - b sin, b cos + a sin). */
typedef enum {
    RA_ROPE_NONE = 0,
    RA_ROPE_INTERLEAVED = 1,
    RA_ROPE_HALF = 2,
} ra_rope;

/* The default RoPE base and gaussian bandwidth. */
#define RA_ROPE_BASE_DEFAULT 10000.0
#define RA_SIGMA_DEFAULT 1.0

/* What ra_rope_apply rotates: x (B, n, heads, D), token t at position
 * pos[t] + offset, by the pairing rope and base. */
typedef struct {
    ra_rope rope;
    double base;
    int64_t B, n, heads, D;
    const int64_t *pos;
    int64_t offset;
} ra_rope_rows;

/* Rotates x (rows->B, n, heads, D) in place (angles and their sines in
 * fp64, the result rounded to fp32). D must be even; RA_ROPE_NONE leaves
 * x alone. Pure: no MPI, no allocation. Does nothing when rows is NULL,
 * x or pos is NULL with rows to turn, rope is not an ra_rope, base is not
 * a finite number > 0, D is odd or a size is negative or overflows. */
RA_API void ra_rope_apply(const ra_rope_rows *rows, float *x);

/* The standard ALiBi slopes of H heads (Press et al.): for H a power of
 * two, slopes[h-1] = 2^(-8h/H), h = 1..H; otherwise the slopes of the
 * largest power of two p below H, then every other slope of 2p
 * (2^(-8(2i+1)/(2p)), i = 0 .. H-p-1), as the reference code does.
 * H <= 0 or a NULL slopes: nothing is written. */
RA_API void ra_alibi_slopes(int64_t H, double *slopes);

/* Where a query sits for the rules that compare it with keys (causal,
 * window, ALiBi's distance, RoPE's query angle): its aligned position i'.
 *   RA_ALIGN_TENSOR (default): i' = i + (M - N), the tensor's bottom-right.
 *   RA_ALIGN_SEQUENCE: each sequence bottom-right on its own lengths, as
 *     flash-attention's varlen functions do. In batch b without segments,
 *     i' = i + (kv_len_b - q_len_b) (a missing q_lens means N, a missing
 *     kv_lens M); with packed segments, a query of id s sits at
 *     i' = i + (kend_s - qend_s), where qend_s and kend_s are one past the
 *     last query and the last key of id s in that batch (segments decide
 *     when lens are given too; a query whose id no key has sees nothing
 *     anyway). Strategy ring only (forward, attention map and
 *     ra_backward); the other strategies refuse it (RA_ERR_ARG). */
typedef enum {
    RA_ALIGN_TENSOR = 0,
    RA_ALIGN_SEQUENCE = 1,
} ra_align;

/* The engine of the kernels' tile products (Q K^T and P V forward, the
 * five products backward); the online softmax, masks, position encodings
 * and scores are the library's own on either.
 *
 * The environment variable RINGATTN_GEMM (auto, openblas, onednn) decides
 * what RA_GEMM_AUTO stands for, so that one build runs either engine
 * without a rebuild; an explicit RA_GEMM_OPENBLAS or RA_GEMM_ONEDNN wins
 * over it. The library reads it once per process, when a call first
 * needs it (a call or a prediction with RA_GEMM_AUTO); a later change of
 * the variable in that process changes nothing. Unset, empty or auto: the
 * build's default below. Any other
 * value, or onednn in a build without oneDNN, makes every call that
 * leaves gemm at RA_GEMM_AUTO return RA_ERR_ARG (ra_error_message names
 * RINGATTN_GEMM and the value) before any work; so does a call whose
 * ranks' variables name different engines (each node has its own
 * environment: mpirun -x RINGATTN_GEMM sets it on all), on every rank. */
typedef enum {
    RA_GEMM_AUTO = 0,     /* the default: the engine RINGATTN_GEMM names,
                             else oneDNN when the library was built with
                             it, else OpenBLAS */
    RA_GEMM_OPENBLAS = 1, /* OpenBLAS, always built: the portable engine */
    RA_GEMM_ONEDNN = 2,   /* oneDNN (libdnnl), JIT-compiled for the core's
                             instruction set (AVX-512, AMX) */
} ra_gemm;

/* The arithmetic of the tile products (docs/DESIGN.md, "Precision"). */
typedef enum {
    RA_PRECISION_FP32 = 0, /* the default: fp32 operands and sums */
    RA_PRECISION_BF16 = 1, /* q, k, v rounded to bfloat16 once (after RoPE;
                              bf16 values stay as they are), Q K^T in bf16
                              to fp32 scores, the softmax statistics in
                              fp32, P rounded to bf16 for P V with fp32
                              sums; the backward's five products likewise
                              (dO, P, dS rounded), dq, dk, dv in fp32 */
} ra_precision;

/* How K/V blocks travel between the ranks of the ring. */
typedef enum {
    RA_WIRE_AUTO = 0, /* the default: bf16 when the precision is bf16 on
                         strategy ring with a score other than additive,
                         else fp32 */
    RA_WIRE_FP32 = 1, /* float32 */
    RA_WIRE_BF16 = 2, /* bfloat16, half the bytes: k and v are rounded to
                         bf16 first, also in an fp32 run (strategy ring,
                         dot and gaussian scores; others refuse it) */
} ra_wire;

/* 1 when this build of the library can run engine gemm (RA_GEMM_AUTO and
 * RA_GEMM_OPENBLAS always; RA_GEMM_ONEDNN when built with oneDNN). */
RA_API int ra_gemm_available(ra_gemm gemm);

/* What a call computes: the same numbers whatever ra_exec says (beyond
 * rounding). Fill with ra_numerics_default(), then set what differs. */
typedef struct {
    int causal;        /* 1: query i sees keys j <= i', its aligned
                          position (align: i + (M - N) by default) */
    int window;        /* 1: query i sees only keys j with
                          i' - window_left <= j <= i' + window_right,
                          i' aligned as causal (align) */
    int64_t window_left, window_right; /* >= 0 when window is set */
    double scale;      /* dot score scale s; NAN means 1/sqrt(D). An
                          option a call does not apply is refused, never
                          ignored: a scale with another score, a sigma
                          other than RA_SIGMA_DEFAULT with another score,
                          a rope_base other than its default without
                          rope, per-sequence align with no rule to move,
                          ra_exec.ulysses_size with another strategy */
    ra_score score;    /* dot (default), gaussian or additive */
    double sigma;      /* gaussian bandwidth, > 0 (RA_SIGMA_DEFAULT).
                          A call moves its
                          copies of q and k (after RoPE, before any bf16
                          rounding) by a centre of the keys per batch, kv
                          head and dim, which changes no score: inputs far
                          from 0 keep their accuracy (0 for keys about 0) */
    const ra_additive *additive; /* weights of the additive score */
    ra_rope rope;      /* rotary embedding of q and k (RA_ROPE_NONE: off)
                          at global positions: key j at j, query i at i'
                          (aligned as causal, align). The dot and gaussian
                          scores only; D even. In ra_mha_forward it acts on
                          the projected per-head q and k. */
    double rope_base;  /* > 0; RA_ROPE_BASE_DEFAULT */
    int alibi;         /* 1: ALiBi: the score of query head h gets
                          -slope_h * |j - i'| added, i' as causal, at
                          global positions, for every score, layout and
                          mask (the bias changes no visibility); with a
                          causal mask that is slope_h * (j - i') */
    const double *alibi_slopes; /* (H) finite slopes, owned by the caller,
                          or NULL: ra_alibi_slopes(H) */
    ra_align align;    /* where queries sit (ra_align); RA_ALIGN_TENSOR */
    int nonfinite;     /* 1: inputs may hold NaN or inf; a NaN score then
                          makes its query row NaN instead of being dropped
                          (costs a scan of every score and value tile),
                          a NaN or inf value reaches exactly the rows
                          that see its key (as exact arithmetic: inf of
                          its sign, NaN with both signs), and the inputs'
                          range is the caller's to judge. Forward only:
                          ra_backward refuses it (RA_ERR_ARG) */
    ra_precision precision; /* of the tile products (RA_PRECISION_FP32;
                          ra_precision) */
    double softcap;    /* > 0: logit softcapping, the scaled dot score s
                          becomes softcap * tanh(s / softcap) before the
                          masks, and ALiBi's bias is added after it; 0:
                          off. The dot score only (the gaussian score's
                          row term and the additive score's bound make it
                          no cap of theirs: refused, RA_ERR_ARG) */
    const float *sinks; /* (H) attention sinks, natural-log units of the
                          scaled score, owned by the caller, or NULL: each
                          row's softmax denominator of head h gains
                          exp(sinks[h]); o is the sum over keys normalised
                          by it, lse includes it, and a row that sees no
                          key gets o = 0 and lse = sinks[h]. Not with an
                          attention map (RA_ERR_ARG) */
} ra_numerics;

/* ---- Checkpoints of a call with steps --------------------------------- *
 * Between two ring steps a rank's whole state is a few arrays (the
 * forward's running o and lse, the backward's dq, dk, dv and travelling
 * accumulator); the K/V it holds the call fetches again from their owners.
 * A caller that wants to stop a long call and continue it later (the
 * command line's run --checkpoint, docs/CHECKPOINT.md) gives exec->
 * checkpoint: the library calls ask on every rank at each step boundary,
 * acts on the largest answer over the ranks (one small reduction, under
 * the stall watchdog), and hands the state to save on every rank; with
 * load, the call starts from a saved state instead of step 0 and gives
 * bitwise the same results as a call never stopped (same P, shape,
 * options). The library touches no file and no signal: saving and loading
 * are the caller's. Strategies ring, ring-q and hybrid (the backward
 * runs on the ring for each); allgather, tree and ulysses (no steps), the
 * attention map and the additive score's backward are refused
 * (RA_ERR_ARG) by name. */

/* What ask answers for this rank at a step boundary. */
typedef enum {
    RA_CKPT_GO_ON = 0, /* no checkpoint here */
    RA_CKPT_SAVE = 1,  /* save the state, then go on */
    RA_CKPT_STOP = 2,  /* save the state, then return RA_STOPPED */
} ra_ckpt_action;

#define RA_STATE_PARTS_MAX 8

/* One array of a rank's state: count floats at data, the library's own
 * buffer (save reads it, load fills it), named for the file. */
typedef struct {
    const char *name;
    float *data;
    int64_t count;
} ra_state_part;

/* A rank's state at the boundary before step `step` (1 .. steps - 1) of
 * the call's pass ("forward" or "backward"). Its parts and their counts
 * depend on the shape, the options, P and this rank, never on the step. */
typedef struct {
    const char *pass;
    int step, steps;
    int nparts;
    ra_state_part part[RA_STATE_PARTS_MAX];
} ra_state;

/* The caller's side of checkpoints, called on the calling thread of every
 * rank (save and load at the same point on every rank, with no transfer
 * of the call in flight, so they may do collective work on the caller's
 * communicator, such as writing a file):
 *   ask(ctx, done, total): this rank's ra_ckpt_action after step done of
 *     total; cheap (a flag, a clock);
 *   save(ctx, state): RA_OK, or a status with ra_error_set's message; a
 *     failure on any rank fails the call on every rank with that status;
 *   load(ctx, state) (NULL: start at step 0): fills each part's data and
 *     state->step (1 .. steps - 1) once the call is set up, before any
 *     step; the ranks must load the same step. A failure fails the call.
 */
typedef struct {
    int (*ask)(void *ctx, int done, int total);
    ra_status (*save)(void *ctx, const ra_state *state);
    ra_status (*load)(void *ctx, ra_state *state);
    void *ctx;
} ra_checkpoint;

/* How a call runs: the ranks' split, tiles, threads, limits and progress.
 * It changes speed and memory, not the numbers (beyond rounding). Fill
 * with ra_exec_default(), then set what differs. */
typedef struct {
    ra_strategy strategy; /* how the ranks split the call (default ring) */
    ra_layout layout;
    int64_t block_q;   /* query tile rows, 0 .. RA_BLOCK_MAX; 0 picks a
                          default per D */
    int64_t block_kv;  /* key tile rows, 0 .. RA_BLOCK_MAX; 0 picks a
                          default per D */
    ra_gemm gemm;      /* engine of the tile products (RA_GEMM_AUTO); one
                          that ra_gemm_available() denies is refused */
    int threads;       /* OpenMP and BLAS threads per rank, 0 ..
                          RA_THREADS_MAX; 0 means 1 (MPI usually runs a
                          rank per core). The library reads no thread
                          variable (OMP_NUM_THREADS and the like) and
                          leaves OpenBLAS's process-wide thread count as
                          it found it. Each rank's own:
                          ranks may pass different counts */
    double stall_timeout; /* seconds a rank may wait for a transfer with
                          no progress before the call fails (RA_ERR_MPI,
                          naming the step or phase and the rank waited
                          for); 0: wait forever. RA_STALL_TIMEOUT_DEFAULT
                          is far above any wait of a healthy run; raise it
                          when a single step computes for longer. After a
                          stall the caller must end the job (MPI_Abort):
                          transfers are still in flight. */
    int64_t mem_limit; /* bytes one rank may allocate for the K/V that
                          allgather gathers, >= 0; 0: the node's physical
                          memory divided by the ranks on the node. Each
                          rank's own, like threads */
    int64_t ulysses_size; /* hybrid: ranks per head-parallel group (they
                          must divide P); 0: the ranks of one node */
    void (*on_step)(void *ctx, int done, int total); /* progress, or NULL:
                          called on the calling thread after each step of a
                          successful pass, done = 1 .. total (ring steps;
                          a strategy without steps calls it once, 1 of 1).
                          It must not call MPI on comm. */
    void (*on_tick)(void *ctx, double done); /* finer progress, or NULL:
                          called often by the calling thread, between the
                          kernel's tiles of a forward pass, with the share
                          0 .. 1 of the current kernel call's work done.
                          It must be cheap and must not call MPI on comm
                          nor start OpenMP work. */
    void *on_step_ctx; /* passed to on_step and on_tick as ctx */
    ra_wire wire;      /* how K/V travel the ring (RA_WIRE_AUTO): bf16
                          halves the bytes of each K/V hop (ra_wire) */
    const ra_checkpoint *checkpoint; /* checkpoints at step boundaries
                          (ra_checkpoint), or NULL: none. Each rank's own
                          callbacks; whether one is given is compared */
} ra_exec;

/* The value fields of ra_numerics and ra_exec, one row each, for bindings
 * that set them by name (the Python package's keywords iterate it):
 * X(part, field, kind), part num (ra_numerics) or exec (ra_exec), kind
 * FLAG (an int 0 or 1), INT (int), I64 (int64_t), REAL (double) or the
 * field's enum (LAYOUT, STRATEGY, SCORE, ROPE, GEMM, PRECISION, WIRE,
 * ALIGN). The pointer fields (arrays, callbacks) are not rows, nor the
 * score features (RA_SCORE_FEATURES: REAL each). A value field added to
 * either struct gets its row here or there, and a pointer field its
 * keyword or its reason not to have one: tests/python/test_options.py
 * fails otherwise. */
#define RA_OPTION_FIELDS(X)                                                   \
    X(num, causal, FLAG)           X(num, window, FLAG)                       \
    X(num, window_left, I64)       X(num, window_right, I64)                  \
    X(num, scale, REAL)            X(num, score, SCORE)                       \
    X(num, sigma, REAL)            X(num, rope, ROPE)                         \
    X(num, rope_base, REAL)        X(num, alibi, FLAG)                        \
    X(num, align, ALIGN)           X(num, nonfinite, FLAG)                    \
    X(num, precision, PRECISION)                                              \
    X(exec, strategy, STRATEGY)                                               \
    X(exec, layout, LAYOUT)        X(exec, block_q, I64)                      \
    X(exec, block_kv, I64)         X(exec, gemm, GEMM)                        \
    X(exec, threads, INT)          X(exec, stall_timeout, REAL)               \
    X(exec, mem_limit, I64)        X(exec, ulysses_size, I64)                 \
    X(exec, wire, WIRE)

/* The score features: double fields of ra_numerics, 0 when off, each a
 * map of every scaled score after the score products and before ALiBi's
 * bias and the masks, one row each: X(field, option, meta, help), the
 * field and its command-line option (a real number; its help one line).
 * The library's table (engine/score_features.c) gives each its rule and
 * maps, and every part of ringattn (kernels, references, checks, output
 * attributes, the command line, the Python keywords) loops over it. */
#define RA_SCORE_FEATURES(X)                                                  \
    X(softcap, "--softcap", "CAP", "cap dot scores: CAP tanh(s/CAP) (0: off)")

/* The default stall_timeout in seconds. */
#define RA_STALL_TIMEOUT_DEFAULT 600.0

/* The largest block_q and block_kv, and the most threads per rank, a call
 * takes; larger values are refused (RA_ERR_ARG, naming the field). */
#define RA_BLOCK_MAX 65536
#define RA_THREADS_MAX 1024

/* Fill the defaults: non-causal, no window, scale 1/sqrt(D), the dot
 * score, no RoPE (base RA_ROPE_BASE_DEFAULT), no ALiBi, tensor alignment,
 * finite inputs, no softcap, no sinks; strategy ring, automatic tiles and
 * layout, the best gemm, one thread, the default stall timeout, no memory
 * limit, no progress.
 * Every function below that takes a const ra_numerics or ra_exec pointer
 * reads NULL as these defaults; given NULL, these two do nothing. */
RA_API void ra_numerics_default(ra_numerics *num);
RA_API void ra_exec_default(ra_exec *exec);

/* The scale actually used for a shape: num->scale, or 1/sqrt(D); NAN for
 * a NULL shape or D < 1. */
RA_API double ra_numerics_scale(const ra_numerics *num,
                                const ra_shape *shape);

/* The tile sizes actually used for a shape (defaults resolved; a window
 * has tiles of its own) into each output that is not NULL; 0 for a NULL
 * shape. */
RA_API void ra_exec_tiles(const ra_numerics *num, const ra_exec *exec,
                          const ra_shape *shape, int64_t *block_q,
                          int64_t *block_kv);

/* The layout actually used: exec->layout, or for RA_LAYOUT_AUTO the best
 * measured choice (docs/PERFORMANCE.md): balanced with a window, else
 * striped with packed segments, else zigzag when causal, else contiguous.
 * segments: whether segment masks are given. */
RA_API ra_layout ra_exec_layout(const ra_numerics *num, const ra_exec *exec,
                                int segments);

/* One rank's part of the sequence axis: [start, start + count). */
typedef struct {
    int64_t start, count;
} ra_range;

/* The contiguous slice of a length-`len` axis owned by `rank` of `nranks`:
 * the first len % nranks ranks hold one extra token; ranks may be empty.
 * Empty ({0, 0}) for len < 0, nranks < 1 or rank outside [0, nranks);
 * ra_layout_slice and ra_attn_map_rows likewise. */
RA_API ra_range ra_shard_range(int64_t len, int rank, int nranks);

/* The tokens a rank holds under a layout: up to two runs of global
 * positions start + i * stride (i < count), in increasing order; a rank's
 * local arrays hold exactly these tokens in this order. Any len >= 0 and
 * any P work; ranks may be empty. Contiguous, zigzag and striped chunks
 * differ by at most one token and ignore num. Balanced weighs token i by
 * the keys a query at position i of a self-attention of length len would
 * see under num's causal and window rules (NULL or neither: every token
 * alike, the contiguous cut): the first rank ends where the running
 * weight reaches 1/P of the whole, the last starts where it reaches
 * (P-1)/P, and the ranks between share the rest evenly. While a window's
 * ramps (its first and last rows, which see fewer keys) lie within the
 * first and the last rank, every rank's work is then within one row's of
 * the mean. An unresolved layout (RA_LAYOUT_AUTO: see ra_exec_layout)
 * or one outside the enum gives an empty slice. */
typedef struct {
    int64_t start, count, stride;
} ra_run;

typedef struct {
    int nruns;
    ra_run run[2];
    int64_t count; /* tokens in all runs */
} ra_slice;

RA_API ra_slice ra_layout_slice(ra_layout layout, const ra_numerics *num,
                                int64_t len, int rank, int nranks);

/* The tokens of a slice whose positions lie in [i0, i1), with positions
 * counted from i0: the rows an attention map of those queries holds.
 * Empty for a NULL slice, one that no layout makes (more than two runs, a
 * stride < 1, a negative start or count, positions beyond int64), i0 < 0
 * or i1 <= i0. */
RA_API ra_slice ra_slice_clip(const ra_slice *slice, int64_t i0, int64_t i1);

/* The global position of local token idx (0 <= idx < slice->count). */
static inline int64_t ra_slice_pos(const ra_slice *slice, int64_t idx)
{
    if (idx >= slice->run[0].count && slice->nruns > 1)
        return slice->run[1].start +
               (idx - slice->run[0].count) * slice->run[1].stride;
    return slice->run[0].start + idx * slice->run[0].stride;
}

/* ---- Shards cut another way ------------------------------------------ *
 * ra_forward and ra_backward take each rank's tokens of the call's layout
 * (ra_exec_layout, then ra_layout_slice), whatever the caller's data
 * loader cut: the C API moves no rows itself. Its callers mostly hold
 * the layout's cut already (the command line reads files by layout; a
 * framework keeps its activations in the cut of its first call), and
 * would pay a copy and an all-to-all per array for nothing; and a rank's
 * pointers say nothing of how many rows it holds or how they were cut,
 * so no default could refuse shards cut otherwise: a library that
 * assumed contiguous shards would compute zigzag ones wrong as silently
 * as one that assumes the layout's cut computes contiguous ones. The
 * contract is therefore one cut, named by exec->layout (RA_LAYOUT_AUTO:
 * ra_exec_layout's choice; ra_layout_slice gives each rank's tokens). A
 * caller holding contiguous shards (a data loader's) moves them with
 * ra_shard_move, which checks every rank's row counts against both cuts,
 * into the layout before the call and the outputs back after it, as the
 * Python package does for its default layout "auto" (docs/PYTHON.md;
 * tests/test_shard_move_mpi.c does it for every layout and mask). */

/* One move of a sequence's rows between two cuts: this rank's rows of
 * `from` (ra_layout_slice(from, num, len, rank, P): src_rows of them) go
 * to the ranks that hold them under `to` (dst_rows here). Arrays are
 * (outer, rows, row_bytes) bytes in C order: q (B, n, H, D) float32 is
 * outer B and row_bytes H * D * 4; lse (B, H, n) is outer B * H and
 * row_bytes 4; segment ids (B, n) int64 outer B and row_bytes 8. */
typedef struct {
    ra_layout from, to;  /* resolved: contiguous, zigzag, striped or
                            balanced (not RA_LAYOUT_AUTO) */
    const ra_numerics *num; /* weighs the balanced cut (its causal and
                            window), as the call's; NULL: none */
    int64_t len;         /* the sequence's tokens, N or M, >= 0 */
    int64_t src_rows, dst_rows; /* this rank's rows under from and to */
    int64_t outer, row_bytes;   /* >= 0 */
    double stall_timeout; /* as ra_exec's; 0: wait forever */
} ra_shard_move_spec;

/* Moves rows as spec says, collective over comm: src (outer, src_rows,
 * row_bytes) into dst (outer, dst_rows, row_bytes), caller-owned, not
 * overlapping (NULL when the rank's array is empty); each row keeps its
 * bytes. Every rank must pass the same from, to, len, outer, row_bytes
 * and num's causal and window (compared: RA_ERR_ARG naming the first that
 * differs); a src_rows or dst_rows that is not the rank's count under its
 * cut is refused on every rank (RA_ERR_ARG "ra_shard_move: rank 1 holds 7
 * rows where layout contiguous gives it 8 of 15"). One all-to-all of whole
 * rows, watched by stall_timeout as a call's transfers (after a stall
 * the caller must end the job: transfers are still in flight). */
RA_API ra_status ra_shard_move(MPI_Comm comm,
                               const ra_shard_move_spec *spec,
                               const void *src, void *dst);

/* Optional masks of one forward pass (any pointer may be NULL):
 *   q_lens (B), kv_lens (B): padding; key j of batch b is visible only when
 *     j < kv_lens[b], query rows i >= q_lens[b] get o = 0 and lse = -inf.
 *   q_segments (B, n), kv_segments (B, m): this rank's slices (in layout
 *     order) of packed-sequence ids; a query sees a key only when their ids
 *     are equal. Both or neither. */
typedef struct {
    const int64_t *q_lens, *kv_lens;
    const int64_t *q_segments, *kv_segments;
} ra_masks;

/* Useful forward FLOPs: 2 * (D + Dv) * H times the number of visible
 * (query, key) pairs over all batches under causal, window and lens (not
 * segments, whose ids are spread over the ranks); 4*B*H*N*M*D when
 * Dv == D and nothing is masked. The additive score counts 4 A + 2 Dv per
 * pair (a tanh as one operation). masks may be NULL; a NULL shape or one
 * ra_shape_check refuses gives 0. */
RA_API double ra_forward_flops(const ra_shape *shape, const ra_numerics *num,
                               const ra_masks *masks);

/* Useful backward FLOPs: 2.5 times ra_forward_flops() (five products per
 * visible tile against the forward's two). */
RA_API double ra_backward_flops(const ra_shape *shape, const ra_numerics *num,
                                const ra_masks *masks);

/* This rank's input slices (read only), each rank passing the tokens that
 * ra_layout_slice(ra_exec_layout(num, exec, masks has segments), num,
 * N or M, rank, P) gives it, in that order; n and m are this rank's query and key
 * counts (either may be 0, and a rank then may pass NULL for the tensors
 * of those rows: q, o, lse, dout, dq when n is 0; k, v, dk, dv when m is
 * 0; any other NULL is refused):
 *   q (B, n, H, D), k (B, m, G, D), v (B, m, G, Dv) */
typedef struct {
    const float *q, *k, *v;
} ra_qkv;

/* Attention maps without the full matrix: the exact softmax weights of the
 * query rows [i0, i1) over all M keys, for the chosen query heads, from the
 * final LSE. Each rank fills the rows it holds: ra_attn_map_rows() gives
 * their local index range [start, start + count), and out is
 * (B, nheads, count, M) floats in natural key order. Rows sum to 1, or to 0
 * when they see no key. ra_attn_map_rows gives {0, 0} for a NULL map and
 * as ra_layout_slice for the rest. */
typedef struct {
    int64_t i0, i1;
    const int64_t *heads;
    int64_t nheads;
    float *out;
} ra_attn_map;

RA_API ra_range ra_attn_map_rows(ra_layout layout, const ra_numerics *num,
                                 int64_t N, int rank, int nranks,
                                 const ra_attn_map *map);

/* What a forward writes for this rank's query slice (caller-owned):
 *   o (B, n, H, Dv), lse (B, H, n)
 * and, when map is not NULL, the attention map of its rows (a second ring
 * pass after the forward; the ring strategy runs whatever exec->strategy
 * says). */
typedef struct {
    float *o, *lse;
    ra_attn_map *map;
} ra_out;

/* Per-call measurements, all in seconds on this rank. */
typedef struct {
    double total;        /* wall time of the whole call */
    double compute;      /* time inside the kernel */
    double comm_wait;    /* time blocked waiting for ring transfers */
    int64_t bytes_sent;  /* bytes this rank handed to MPI for other ranks:
                            the payload it addresses to them (its ring hops;
                            for a collective, its blocks times the ranks
                            they go to) */
    int64_t bytes_cross_node; /* the part of bytes_sent addressed to ranks
                            on another node (MPI_COMM_TYPE_SHARED), counted
                            per destination in every strategy */
    int steps;           /* ring steps run (P, or fewer with a window) */
    /* Wall time this rank's least and most busy threads spent inside the
     * kernel's work items: max / min shows how evenly the threads shared
     * the work; equal with one thread. Measured by the ring strategy; 0
     * for the others. */
    double thread_busy_min, thread_busy_max;
} ra_timing;

/* Exact attention forward on in-memory slices, collective over comm: the
 * slices in (ra_qkv) give the outputs out (ra_out) under the masks (NULL:
 * none); timing (NULL: not wanted) receives this rank's measurements.
 * Every rank must pass the same shape, num, exec and mask lengths: the
 * call compares them (a fingerprint of every field, one small reduction
 * at its start, under the stall watchdog) and refuses any that differs
 * with RA_ERR_ARG on every rank, naming the first: "options differ across
 * ranks: num.scale (rank 0: 0.125, rank 3: 0.25)". Compared: every field
 * of shape and num (where it has a meaning: the scale with the dot score,
 * the window's bounds with the window on, ...; the additive weights' and
 * ALiBi slopes' values), of exec but threads, mem_limit and the progress
 * callbacks (each rank's own), the values of q_lens and kv_lens, whether
 * segments and an attention map are given and the map's rows and heads.
 * exec->strategy picks how the ranks split the work (docs/DESIGN.md,
 * "Strategies"); the slices are the same for every strategy. Strategies
 * other than ring take the dot and gaussian scores and tensor alignment.
 * Memory inside, for the ring: two K/V ring buffers and per-thread tiles;
 * no rank ever holds a full sequence. With more than one thread, MPI must
 * be initialised with at least MPI_THREAD_FUNNELED (otherwise transfers
 * are not polled between tiles).
 *
 * Errors are agreed over the ranks before any collective work: every rank
 * returns the same status and the message of the lowest failing rank.
 * Finite inputs whose scores or sums would leave float32 (rows of q and k
 * whose norms times the scale, or 1/sigma^2, reach about FLT_MAX / 16; |v|
 * times a rank's key count likewise) are refused with RA_ERR_INPUT
 * (RA_ERR_ARG when the scale or sigma alone does it) instead of giving rows
 * of o = 0 and lse = -inf; with num->nonfinite they are not checked. */
RA_API ra_status ra_forward(MPI_Comm comm, const ra_shape *shape,
                            const ra_numerics *num, const ra_exec *exec,
                            const ra_masks *masks, const ra_qkv *in,
                            const ra_out *out, ra_timing *timing);

/* The work blocks of 4 MiB and more that ra_forward and ra_backward free
 * (the ring's K/V buffers, the call's positions and rounded inputs) stay
 * mapped for the next calls, up to four blocks per process, so that a
 * repeated call does not fault its pages in again. This frees them;
 * thread-safe, and safe between any two calls. */
RA_API void ra_buffers_release(void);

/* The additive score's weight gradients, shapes as in ra_additive:
 * dw_q (A, D), dw_k (A, Dk), dw_v (A); caller-owned, written on every rank
 * with the same values (sums over all ranks' pairs, added up in fp64). */
typedef struct {
    float *dw_q, *dw_k, *dw_v;
} ra_additive_grads;

/* The backward's tensors besides q, k, v, for this rank's slices: the
 * forward's results and the gradient of the loss with respect to o (read),
 * the gradients it gives (written):
 *   o (B, n, H, Dv), lse (B, H, n), dout (B, n, H, Dv)
 *   dq (B, n, H, D), dk (B, m, G, D), dv (B, m, G, Dv)
 * dw: the additive score's weight gradients, or NULL (not wanted; ignored
 * for the other scores). */
typedef struct {
    const float *o, *lse, *dout;
    float *dq, *dk, *dv;
    const ra_additive_grads *dw;
    float *dsinks; /* (H) the gradient of num->sinks, written on every
                      rank with the same values (one reduction), or NULL:
                      not wanted */
} ra_grads;

/* Gradients of ra_forward() through the ring, collective over comm. Each
 * rank passes the same slices, shape, num, exec and masks as to the
 * forward, whose o and lse grads holds. A row with lse = -inf (it sees no
 * key) contributes exact zeros. Every score, RoPE and ALiBi as in the
 * forward: dq and dk come back through the rotation and through the
 * additive score's projections (k and dk then have Dk columns). Memory
 * inside: two K/V ring buffers, two travelling dk/dv accumulators and one
 * step's scratch, each of the largest block's size, and per-thread tiles
 * (docs/DESIGN.md, "Backward"). Errors and options are agreed as for
 * ra_forward (and whether dw is given); an lse holding NaN or +inf is
 * refused (RA_ERR_ARG: only -inf marks a row that sees no key), unless
 * num->nonfinite. timing may be NULL. */
RA_API ra_status ra_backward(MPI_Comm comm, const ra_shape *shape,
                             const ra_numerics *num, const ra_exec *exec,
                             const ra_masks *masks, const ra_qkv *in,
                             const ra_grads *grads, ra_timing *timing);

/* Whether exec->strategy can run this shape on comm's ranks, before any
 * work: ulysses needs P <= H, allgather's gathered K/V (and key ids with
 * segments) must fit exec->mem_limit, strategies other than ring take
 * the dot and gaussian scores. Collective; every rank returns the same
 * status and message. ra_forward() makes the same checks, and the same
 * comparison of the options over the ranks (the additive weights, which
 * the caller may not have yet, are left to the call). */
RA_API ra_status ra_strategy_check(MPI_Comm comm, const ra_shape *shape,
                                   const ra_numerics *num,
                                   const ra_exec *exec, int segments);

/* ---- The multi-head attention layer ---------------------------------- *
 * y = concat_h(attention_h(x_q W_q^T + b_q, x_kv W_k^T + b_k,
 *                          x_kv W_v^T + b_v)) W_o^T + b_o
 * with weights in the PyTorch Linear convention (y = x W^T + b). Heads are
 * split from the projections: query head h is columns [h D, (h+1) D) of
 * x_q W_q^T; kv head g likewise. The scale is 1/sqrt(D), the per-head dim.
 * With pos_encoding, sinusoidal encodings of the global token positions are
 * added to x_q and x_kv first: P(i, 2j) = sin(i / 10000^(2j/E)),
 * P(i, 2j+1) = cos(i / 10000^(2j/E)), E the input's width. */
typedef struct {
    int64_t Eq, Ekv, Eout;      /* widths of x_q, x_kv and y */
    const float *w_q, *w_k, *w_v, *w_o; /* (H*D, Eq) (G*D, Ekv) (G*Dv, Ekv)
                                           (Eout, H*Dv) */
    const float *b_q, *b_k, *b_v, *b_o; /* (H*D) (G*D) (G*Dv) (Eout), or NULL */
    int pos_encoding;
} ra_mha;

/* The layer's input and output on this rank's slices (layout as for
 * ra_forward): x_q (B, n, Eq), x_kv (B, m, Ekv) (the same as x_q for
 * self-attention), y (B, n, Eout), caller-owned. */
typedef struct {
    const float *x_q, *x_kv;
    float *y;
} ra_mha_io;

/* The layer on this rank's slices, collective over comm. Projections are
 * token-wise (no communication); then ra_forward runs for all heads; then
 * the output projection. shape gives B, N, M, H, G, D, Dv. timing may be
 * NULL. The options and the layer's widths and biases are compared over
 * the ranks as for ra_forward; x_q and y may be NULL on a rank holding no
 * query rows, x_kv on one holding no keys. */
RA_API ra_status ra_mha_forward(MPI_Comm comm, const ra_shape *shape,
                                const ra_numerics *num, const ra_exec *exec,
                                const ra_masks *masks, const ra_mha *layer,
                                const ra_mha_io *io, ra_timing *timing);

/* ---- Nodes and the ring order ----------------------------------------- *
 * The ring sends from rank r to rank r + 1 of the communicator it is given.
 * Ranks that share a node (MPI_COMM_TYPE_SHARED) exchange through memory;
 * the others through the network. */
typedef struct {
    int nodes;              /* nodes the ranks of comm run on */
    int node;               /* this rank's node: 0 .. nodes - 1, numbered in
                               the order of each node's lowest rank */
    int ranks_on_node;      /* ranks of comm on this rank's node */
    int ranks_per_node_min, ranks_per_node_max;
    int next_on_other_node; /* 1: rank + 1 (mod P), where this rank's ring
                               blocks go, runs on another node */
} ra_nodes;

/* Where the ranks of comm run, as seen from the calling rank. Collective;
 * a NULL nodes is refused (RA_ERR_ARG) on every rank. */
RA_API ra_status ra_comm_nodes(MPI_Comm comm, ra_nodes *nodes);

/* A new communicator over the ranks of comm for ra_forward() and the file
 * functions, freed by the caller (MPI_Comm_free). node_aware: ranks ordered
 * node by node (nodes by their lowest rank, mpirun's order inside a node),
 * so that each ring step crosses each node boundary once, whatever order
 * the launcher dealt the ranks in; 0: a duplicate of comm in its own order.
 * Slices follow the rank in the new communicator, and outputs written
 * through it land at their global positions all the same. It is the
 * caller's, with comm's error handler (MPI's rule for a new communicator).
 * Collective; a NULL ring_comm is refused (RA_ERR_ARG) on every rank. */
RA_API ra_status ra_comm_ring_order(MPI_Comm comm, int node_aware,
                                    MPI_Comm *ring_comm);

/* ---- Errors ---------------------------------------------------------- */

/* The message of the last error set on this thread by any ra_ function: one
 * line naming the file, the dataset and what is wrong where they apply.
 * Every function that returns ra_status clears it on entry, so after a
 * success it holds no stale message.
 *
 * MPI errors. ra_forward() and ra_backward() run on a duplicate of the
 * caller's communicator that carries MPI_ERRORS_RETURN: an MPI call
 * failing there is returned as RA_ERR_MPI with a message naming the call,
 * not fatal, whatever the caller's handler. The caller's communicator
 * keeps its handler, which is the caller's to choose: what works on it directly
 * (ra_strategy_check, ra_mha_forward's own checks and projections,
 * ra_comm_nodes, ra_comm_ring_order, the HDF5 functions below) returns
 * RA_ERR_MPI only under a handler that returns, such as
 * MPI_ERRORS_RETURN; under MPI's default, MPI_ERRORS_ARE_FATAL, such a
 * failure ends the job. */
RA_API const char *ra_error_message(void);

/* ---- HDF5 files (parallel, MPI-IO driver) ------------------------------ *
 * Input file: /q (B, N, H, D), /k (B, M, G, D), /v (B, M, G, Dv) (or
 * heads before tokens, see ra_axes), each of any floating type HDF5
 * converts (float16, bfloat16, float32, float64, either byte order),
 * converted to float32 on read.
 * Output file: /o (B, N, H, Dv) (float32, or ra_run_meta.out_dtype), /lse
 * (B, H, N) float32, and root attributes: engine_version, schema_version,
 * kind, causal, window (0/1), window_left, window_right, score, scale (dot
 * score only), sigma (gaussian only), layout, ranks, block_q, block_kv,
 * command_line, seq_q, seq_kv, masks (the mask datasets used, e.g.
 * "q_lens,kv_lens" or ""), rope ("none", "interleaved", "half"),
 * rope_base, alibi (0/1), alibi_slopes ("standard", "/alibi_slopes" or
 * ""), align ("tensor" or "sequence", ra_align), qkv_layout, q_dataset,
 * k_dataset, v_dataset, the *_dataset of each mask applied, out_dtype,
 * out_chunk, out_compress, out_group (when the tensors lie in a group).
 * String attributes are variable-length UTF-8.
 * The command line also reads an optional /alibi_slopes (H,) of the input
 * for --alibi; the API takes slopes in ra_numerics.alibi_slopes.
 * Every function here is collective over comm. */

/* The axis order of an input tensor in its file: (B, N, H, D), tokens
 * before heads, or (B, H, N, D), heads before tokens, as PyTorch's
 * attention functions take them (likewise M and G for /k and /v). A 4-D
 * dataset alone cannot say which it is: RA_AXES_NONE assumes neither. */
typedef enum {
    RA_AXES_NONE = 0, /* no order assumed: a dataset must declare its own */
    RA_AXES_BNHD = 1,
    RA_AXES_BHND = 2
} ra_axes;

/* How a file function uses MPI-IO on a parallel file system (a NULL
 * tuning: HDF5's defaults). Every file is opened with collective metadata
 * operations; on top of that: */
typedef struct {
    int64_t align;            /* objects of 64 KiB or more start at a
                                 multiple of align bytes (the file system's
                                 stripe size); 0: HDF5's default packing */
    int nhints;
    const char *const *hints; /* "key=value" MPI-IO hints passed to every
                                 open, e.g. "striping_factor=16" */
} ra_h5_tuning;

/* Where the inputs lie in a file, for the read functions below (a NULL
 * source: every default). A dataset's own "axes" attribute ("B,N,H,D" or
 * "B,H,N,D") wins over axes; any other value (the empty one too) is
 * refused, and so is a dataset without one while axes is RA_AXES_NONE (a
 * zeroed or NULL source). */
typedef struct {
    const char *q, *k, *v; /* dataset paths; NULL: "/q", "/k", "/v" */
    ra_axes axes;          /* order of a dataset without an axes attribute */
    /* mask datasets (ra_h5_read_masks); NULL: the default name, used
     * when present; a name given here must exist */
    const char *q_lens, *kv_lens, *segments, *q_segments, *kv_segments;
    const char *sinks;     /* attention sinks (H,) (ra_numerics.sinks), or
                              NULL: none; the command line reads them, the
                              output records the name */
    const ra_h5_tuning *tuning; /* the reads' MPI-IO tuning, or NULL; a
                                   negative align or a hint that is not
                                   key=value is refused (RA_ERR_ARG) */
} ra_h5_source;

/* Reads the shape of an input file from the datasets src names, checking
 * ranks and consistency. used (or NULL) receives the order each of q, k, v
 * was read in. */
RA_API ra_status ra_h5_read_shape(MPI_Comm comm, const char *path,
                                  const ra_h5_source *src, ra_shape *shape,
                                  ra_axes used[3]);

/* Reads this rank's slices, rows[0] of the N queries for q and rows[1]
 * of the M keys for k and v (ra_layout_slice under the call's resolved
 * layout gives them), from the datasets src names into caller-owned
 * buffers; each rank reads only its own hyperslabs, with collective
 * transfers. */
RA_API ra_status ra_h5_read_inputs(MPI_Comm comm, const char *path,
                                   const ra_h5_source *src,
                                   const ra_shape *shape,
                                   const ra_slice rows[2], float *q,
                                   float *k, float *v);

/* Mask data read from a file, owned by the struct (ra_h5_masks_free). */
typedef struct {
    int64_t *q_lens, *kv_lens;         /* (B) each, or NULL when absent */
    int64_t *q_segments, *kv_segments; /* this rank's (B, n), (B, m) */
    ra_masks view;                     /* the same pointers, for ra_forward */
    void *block;                       /* the one allocation behind them */
} ra_h5_masks;

/* Reads the optional mask datasets src names (NULL: the defaults
 * /q_lens, /kv_lens (B,) and /q_segments (B, N), /kv_segments (B, M), or
 * /segments (B, N) for both when N == M), integer typed; lens must lie in
 * [0, N] and [0, M]. Absent datasets leave NULL pointers. Segments are
 * read as this rank's layout slices (layout and num as for
 * ra_h5_read_inputs). *masks is overwritten (free earlier
 * contents first); on failure it is all NULL. */
RA_API ra_status ra_h5_read_masks(MPI_Comm comm, const char *path,
                                  const ra_h5_source *src,
                                  const ra_shape *shape, ra_layout layout,
                                  const ra_numerics *num,
                                  ra_h5_masks *masks);
RA_API void ra_h5_masks_free(ra_h5_masks *masks);

/* A floating type in a file: of /o in an output file, of /q, /k, /v in a
 * generated one; computation is float32 either way. */
typedef enum {
    RA_DTYPE_F32 = 0, /* IEEE binary32 (default) */
    RA_DTYPE_F16,     /* IEEE binary16: 11-bit significand, |x| < 65520 */
    RA_DTYPE_BF16,    /* bfloat16: float32's exponent, 8-bit significand,
                         stored as a custom 16-bit HDF5 float */
    RA_DTYPE_F64      /* IEEE binary64: the float32 values widened */
} ra_dtype;

/* The names of the enums, as the command line, the files' attributes and
 * the messages spell them. A name is a static string ("unknown" for a value
 * outside the enum); a parse accepts exactly those names and returns
 * RA_ERR_ARG, naming the expected ones, for any other.
 *   layout:   "contiguous", "zigzag", "striped", "auto", "balanced"
 *   strategy: "ring", "allgather", "tree", "ring-q", "ulysses", "hybrid"
 *   score:    "dot", "gaussian", "additive"
 *   rope:     "none", "interleaved", "half"
 *   gemm:     "auto", "openblas", "onednn"
 *   precision: "fp32", "bf16"
 *   wire:     "auto", "fp32", "bf16"
 *   axes:     "B,N,H,D", "B,H,N,D" (a dataset's "axes" attribute), "none"
 *   dtype:    "fp32", "fp16", "bf16", "fp64" (as precision and wire name
 *             them); ra_dtype_parse also reads the earlier "f32", "f16"
 *             and "f64", which outputs written before record
 * A NULL name or out is refused (RA_ERR_ARG), *out left alone. */
RA_API const char *ra_layout_name(ra_layout layout);
RA_API ra_status ra_layout_parse(const char *name, ra_layout *out);
RA_API const char *ra_strategy_name(ra_strategy strategy);
RA_API ra_status ra_strategy_parse(const char *name, ra_strategy *out);
RA_API const char *ra_score_name(ra_score score);
RA_API ra_status ra_score_parse(const char *name, ra_score *out);
RA_API const char *ra_rope_name(ra_rope rope);
RA_API ra_status ra_rope_parse(const char *name, ra_rope *out);
RA_API const char *ra_gemm_name(ra_gemm gemm);
RA_API ra_status ra_gemm_parse(const char *name, ra_gemm *out);
RA_API const char *ra_precision_name(ra_precision precision);
RA_API ra_status ra_precision_parse(const char *name, ra_precision *out);
RA_API const char *ra_wire_name(ra_wire wire);
RA_API ra_status ra_wire_parse(const char *name, ra_wire *out);
RA_API const char *ra_axes_name(ra_axes axes);
RA_API const char *ra_dtype_name(ra_dtype dtype);
RA_API ra_status ra_dtype_parse(const char *name, ra_dtype *out);

/* What an output file records besides the tensors. */
typedef struct {
    const ra_numerics *num;    /* what the run computed */
    const ra_exec *exec;       /* how it ran (its layout, resolved) */
    double scale;              /* the scale actually used */
    int64_t block_q, block_kv; /* the tiles actually used */
    const char *command_line;  /* as the user typed it */
    const char *masks;         /* mask datasets used, comma separated */
    const ra_attn_map *map;    /* also write /attn_map (B, nheads, i1 - i0,
                                  M) from map->out, or NULL */
    const ra_h5_source *source; /* the input datasets and order read, or
                                   NULL (the defaults) */
    ra_dtype out_dtype;        /* /o's type in the file (/lse: float32) */
    int64_t out_chunk;         /* > 0: /o and /lse stored in chunks of this
                                  many query rows; 0: contiguous */
    int out_compress;          /* 1..9: gzip level of the chunks (needs
                                  out_chunk); 0: none */
    ra_axes out_axes;          /* RA_AXES_BHND: /o stored heads-first
                                  (B, H, N, Dv); otherwise (B, N, H, Dv).
                                  Its attribute axes says which ("B,H,N,D"
                                  or "B,N,H,D"); /lse is (B, H, N), axes
                                  "B,H,N" */
    const char *out_group;     /* /o, /lse, /attn_map under this group
                                  (created, with its parents), or NULL:
                                  the root */
    const char *fingerprint;   /* recorded as the attribute fingerprint:
                                  what the run read (the command line's
                                  text, see README), or NULL: none */
    const ra_h5_tuning *tuning; /* the write's MPI-IO tuning (as in
                                   ra_h5_source), or NULL */
} ra_run_meta;

/* Writes this rank's slices (under meta->exec->layout) of /o (B, n, H, Dv)
 * and /lse (B, H, n) into a temporary file in the destination directory,
 * then, once every rank has closed it, renames it to path (fsync of file
 * and directory). Refuses an existing path unless force; on any failure no
 * file is left behind. */
RA_API ra_status ra_h5_write_outputs(MPI_Comm comm, const char *path, int force,
                              const ra_shape *shape, const ra_run_meta *meta,
                              const float *o, const float *lse);

/* Writes an input file of unit-normal random tensors of the given shape,
 * of type dtype (RA_DTYPE_F32, F64 or F16; bf16 is refused, RA_ERR_ARG),
 * atomically as above, with the MPI-IO tuning given (or NULL). Element
 * values depend only on (seed, tensor, index), never on the number of
 * ranks; they are drawn in fp32, so a float64 file holds the same values
 * widened and a float16 file the same rounded to nearest (ties to even). */
RA_API ra_status ra_h5_gen(MPI_Comm comm, const char *path, int force,
                           const ra_shape *shape, ra_dtype dtype,
                           uint64_t seed, const ra_h5_tuning *tuning);

#ifdef __cplusplus
}
#endif

#endif /* RINGATTN_H */
