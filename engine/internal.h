/* internal.h: helpers shared by the library's modules, not installed. */
#ifndef RA_INTERNAL_H
#define RA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ringattn.h"

/* Window spans (left + right + 1) up to this many keys get the window's
 * own default tiles (ra_params_tiles); wider ones the defaults per D. */
#define RA_WINDOW_TILE_SPAN 1920

/* The options of one call as the library reads them: the caller's two
 * structs side by side (each field documented in ringattn.h), and the
 * knobs no public struct carries. The public entry points copy the
 * caller's structs in once (ra_params_join); engine/, the strategies,
 * io/ and the command line read params->num.X and params->exec.X. */
typedef struct {
    ra_numerics num; /* what is computed */
    ra_exec exec;    /* how it runs */
    /* internal only */
    int no_poll; /* 1: never progress transfers between tiles (bench
                    --no-poll: how much overlap polling buys); 0 when
                    joined */
} ra_params;

/* ra_numerics_default and ra_exec_default joined, no_poll 0. */
void ra_params_default(ra_params *params);

/* Window bounds beyond RA_UNBOUNDED (band.h) set to it: a window that
 * wide reaches every key of any shape ra_shape_check accepts, so the
 * results are those of no limit, and sums of bounds cannot overflow.
 * ra_params_join and every call do it. */
void ra_params_saturate(ra_params *params);

/* params from the caller's two structs (NULL: that struct's defaults),
 * and back. */
void ra_params_join(const ra_numerics *num, const ra_exec *exec,
                    ra_params *params);
void ra_params_split(const ra_params *params, ra_numerics *num,
                     ra_exec *exec);

/* ra_numerics_scale, ra_exec_tiles and ra_exec_layout on joined options,
 * and the threads per rank actually used (0 means 1). */
double ra_params_scale(const ra_params *params, const ra_shape *shape);
void ra_params_tiles(const ra_params *params, const ra_shape *shape,
                     int64_t *block_q, int64_t *block_kv);
ra_layout ra_params_layout(const ra_params *params, int segments);

/* ra_layout_slice on joined options (the balanced cut weighs by their
 * causal and window rules; band.h, ra_band_slice). */
ra_slice ra_params_slice(const ra_params *params, ra_layout layout,
                         int64_t len, int rank, int nranks);
int ra_params_threads(const ra_params *params);

/* ra_forward_flops and ra_backward_flops on joined options. */
double ra_params_forward_flops(const ra_shape *shape, const ra_params *params,
                               const ra_masks *masks);
double ra_params_backward_flops(const ra_shape *shape,
                                const ra_params *params,
                                const ra_masks *masks);

/* 1 when K/V travel the ring as bf16 (ra_wire): wire bf16, or auto with
 * bf16 precision on strategy ring and a score other than additive. */
int ra_params_wire_bf16(const ra_params *params);

/* Records a one-line message for ra_error_message() and returns st, so that
 * a failing step reads: return ra_error_set(RA_ERR_INPUT, "%s: ...", path); */
ra_status ra_error_set(ra_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears the message of this thread. */
void ra_error_clear(void);

/* Names of an enum's values: names[value], or "unknown" outside [0, n). */
const char *ra_name_of(const char *const *names, int n, int value);

/* The alignment's name as output files record it: "tensor", "sequence". */
const char *ra_align_name(ra_align align);

/* Finds name among names[0..n) into *value; else RA_ERR_ARG "unknown KIND
 * 'name' (expected a, b or c)". The one parser of every named choice. */
ra_status ra_name_parse(const char *kind, const char *const *names, int n,
                        const char *name, int *value);

/* Defines the pair every named enum of ringattn.h declares:
 * ra_NOUN_name(TYPE), names[value] or "unknown", and
 * ra_NOUN_parse(name, TYPE *out), which sets *out only on RA_OK and names
 * KIND in its error (a NULL name or out: RA_ERR_ARG). names is the enum's
 * static table, in value order. */
#define RA_NAMED_ENUM(noun, type, kind, names)                                \
    const char *ra_##noun##_name(type value)                                  \
    {                                                                         \
        return ra_name_of(names, (int)(sizeof names / sizeof *names),         \
                          (int)value);                                        \
    }                                                                         \
    ra_status ra_##noun##_parse(const char *name, type *out)                  \
    {                                                                         \
        int v = 0;                                                            \
        ra_error_clear();                                                     \
        if (!out)                                                             \
            return ra_error_set(RA_ERR_ARG, "%s: out is NULL", kind);         \
        const ra_status st = ra_name_parse(                                   \
            kind, names, (int)(sizeof names / sizeof *names), name, &v);      \
        *out = st == RA_OK ? (type)v : *out;                                  \
        return st;                                                            \
    }

/* Whether keys may have another head dim than the queries: only the
 * additive score (whose projections W_k k give keys their own width)
 * allows Dk != D. */
int ra_shape_dk_allowed(const ra_shape *shape, ra_score score);

/* Runs OpenBLAS with `threads` threads (0 means 1) for the library's own
 * calls and returns the caller's count, which ra_blas_leave() restores: the
 * library leaves the process-wide setting as it found it. */
int ra_blas_enter(int threads);
void ra_blas_leave(int saved);

/* Calls params->on_step(params->on_step_ctx, done, total) when it is set
 * (progress.c); outside any OpenMP region. */
void ra_step_report(const ra_params *params, int done, int total);

/* memcpy of `bytes` split into chunks over up to `threads` threads (the
 * rank's), each chunk written by the thread that copies it: the per-call
 * copies of a rank with T threads go about as fast as those of T ranks. */
void ra_copy_threads(void *dst, const void *src, size_t bytes, int threads);

/* The random streams of generated problems: element values depend only on
 * (seed, stream, index), so that `gen`, `bench`, the tests and the checks
 * regenerate the same tensors from a seed. Q, K, V and each query/key pair
 * are consecutive: gen indexes them as RA_STREAM_Q + t. */
enum {
    RA_STREAM_Q = 0,
    RA_STREAM_K = 1,
    RA_STREAM_V = 2,
    RA_STREAM_Q_LENS = 3,
    RA_STREAM_KV_LENS = 4,
    RA_STREAM_Q_SEGMENTS = 5,  /* also the keys' ids when N == M */
    RA_STREAM_KV_SEGMENTS = 6,
    RA_STREAM_W_Q = 10,        /* additive weights w_q, w_k, w_v */
    RA_STREAM_W_K = 11,
    RA_STREAM_W_V = 12,
    RA_STREAM_ADDITIVE = 30,   /* random additive weights w_q | w_k | w_v */
    RA_STREAM_DO = 40,         /* the output gradient dO of a backward pass */
    RA_STREAM_SINKS = 41,      /* gen --sinks: the attention sinks (H,) */
    RA_STREAM_PROBE = 50,      /* probe's scratch tensors (kernel, I/O) */
    RA_STREAM_SAMPLE = 99,     /* verify's sample of rows */
};

/* a * b, or -1 when the product overflows int64 or an operand is negative. */
int64_t ra_mul_checked(int64_t a, int64_t b);

/* The product of the n sizes f[0..n), or -1 when one is negative or the
 * product overflows int64 (also when a -1 from an earlier check is among
 * them). Every element or byte count that comes from a file or an option
 * goes through it (or ra_mul_checked) before it sizes an allocation. */
int64_t ra_count_checked(int n, const int64_t *f);

/* a + b, or -1 when an operand is negative or the sum overflows int64. */
int64_t ra_add_checked(int64_t a, int64_t b);

/* One allocation carved into arrays, one free for all of them. Sizing and
 * carving are the same calls run twice: first with base NULL, where
 * ra_carve() only counts bytes and returns NULL, then over a block of at
 * least `used` bytes, where it hands out consecutive arrays, each aligned
 * to RA_CARVE_ALIGN bytes and never NULL (an empty one too). */
enum { RA_CARVE_ALIGN = 64 };
typedef struct {
    char *base;   /* NULL while sizing */
    int64_t used; /* bytes so far; -1 once a size overflowed */
} ra_carver;

void *ra_carve(ra_carver *c, int64_t count, size_t elem);

/* Sizes with fill(ctx, c), allocates the block (or takes one that an
 * earlier call gave back) and carves it with a second fill: returns the
 * block (the caller's to give back with ra_carve_free, or to free) or
 * NULL when a size overflowed or memory ran out. */
void *ra_carve_alloc(void (*fill)(void *ctx, ra_carver *c), void *ctx);

/* Gives a block of ra_carve_alloc back: one of 4 MiB or more is kept,
 * mapped, for later calls (up to four blocks; ra_buffers_release frees
 * them), a smaller one is freed. NULL is ignored. */
void ra_carve_free(void *block);

/* Fills out[0..count) with unit-normal floats that depend only on
 * (seed, stream, first + i): the same values whatever the slicing. */
void ra_random_normal(uint64_t seed, uint64_t stream, uint64_t first,
                      int64_t count, float *out);

/* The rows [rows.start, +count) of every batch of a (B, len, row) tensor
 * filled by ra_random_normal: out is (B, rows.count, row). */
void ra_random_slab(uint64_t seed, uint64_t stream, int64_t B, int64_t len,
                    int64_t row, ra_range rows, float *out);

/* The same for the tokens of a layout slice: out is (B, slice->count, row). */
void ra_random_slice(uint64_t seed, uint64_t stream, int64_t B, int64_t len,
                     int64_t row, const ra_slice *slice, float *out);

/* 64 uniform random bits that depend only on (seed, stream, index). */
uint64_t ra_random_u64(uint64_t seed, uint64_t stream, uint64_t index);

/* Random padding lengths in [0, len] for each of B batches. */
void ra_random_lens(uint64_t seed, uint64_t stream, int64_t B, int64_t len,
                    int64_t *out);

/* Packed-sequence ids of the tokens of a slice, for B batches of a
 * length-len axis: segments start at random positions (mean length avg >= 1)
 * and are numbered 0, 1, 2... in token order; the id of a token depends only
 * on (seed, stream, b, position). out is (B, slice->count). O(len) time. */
void ra_random_segments(uint64_t seed, uint64_t stream, int64_t B,
                        int64_t len, int64_t avg, const ra_slice *slice,
                        int64_t *out);

#endif /* RA_INTERNAL_H */
