/* bench_measure.h: the measurements of `ringattn bench` and `ringattn
 * probe` besides the pass itself (bench_measure.c): medians and spreads
 * over the ranks, peak RSS, the yardsticks; the comm-only rings on the
 * ring loop (bench_ring.c); the additive score's random weights
 * (bench_additive.c); the naive baseline (baseline.c). Collective where a
 * communicator is given. */
#ifndef RA_BENCH_MEASURE_H
#define RA_BENCH_MEASURE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "internal.h"

/* The yardsticks' sgemm and matmul are SGEMM_N x SGEMM_N x SGEMM_N. */
enum { SGEMM_N = 2048 };

/* min / avg / max of one quantity over the ranks */
typedef struct {
    double min, avg, max;
} spread;

/* One measured configuration: everything a row, the JSON and the CSV say. */
typedef struct {
    ra_shape s;
    ra_params p;
    int ranks, threads;
    const char *mode;          /* the strategy's name, or "naive" */
    int64_t block_q, block_kv;
    double flops;              /* useful FLOPs of one pass */
    double pairs_max;          /* visible pairs of the busiest rank's query
                                  slice, one head (the plan's count) */
    double seconds_median;     /* median over reps of the slowest rank */
    spread rank_seconds;       /* each rank's median wall time */
    spread busy_seconds;       /* each rank's median compute time */
    double thread_busy;        /* max over ranks of the median of its most
                                  over its least busy thread (0: unknown) */
    double gflops;             /* flops / seconds_median */
    double sgemm_gflops;       /* sum over ranks of large-sgemm GFLOP/s */
    double peak_gflops;        /* sum over ranks of the oneDNN matmul's
                                  GFLOP/s in the run's precision; 0: not
                                  measured (no oneDNN), shown as n/a */
    double core_gflops;        /* sum over ranks and threads of the core's
                                  physical peak in the run's precision
                                  (bench_yard.core); 0: not measured */
    double products_gflops;    /* sum over ranks and threads of the
                                  products-only rate of this problem's
                                  tile products; 0: not measured */
    double comm_wait_fraction; /* max over ranks of median wait / wall */
    double bytes_sent;         /* per rank, max over ranks, one pass */
    double bytes_sent_avg;     /* per rank, mean over ranks, one pass */
    double cross_bytes;        /* sent to another node, busiest rank, one
                                  pass (every strategy; 0 for naive) */
    double cross_bytes_total;  /* the same summed over the ranks */
    int nodes, ranks_per_node; /* ranks_per_node: the most on any node */
    int node_aware;            /* the ring was ordered node by node */
    double ring_gbps;          /* comm-only ring bandwidth per rank, GB/s */
    int steps;                 /* ring steps run (fewer than P: skipped) */
    int lens;                  /* random padding was on */
    int64_t segment_avg;       /* mean packed-segment length, 0: none */
    spread peak_rss;           /* bytes, VmHWM over the measured passes */
    double model_bytes;        /* max over ranks of slices + ring buffers */
    double max_rel_error;      /* sampled fp64 check of the last pass */
    double max_lse_error;
    int pass;                  /* error check verdict */
} bench_result;

/* The rows as a JSON array and as CSV written to out (bench_rows.c): 0,
 * or -1 when a write failed (errno set). */
int bench_json_write(FILE *out, const bench_result *rows, int count);
int bench_csv_write(FILE *out, const bench_result *rows, int count);
/* The same for a table (a bench_table, as a file's writer takes it). */
typedef struct {
    const bench_result *rows;
    int nrows;
} bench_table;
int bench_table_json(FILE *out, const void *table);
int bench_table_csv(FILE *out, const void *table);
/* One row of bench_json_write, the caller's to release; NULL when out of
 * memory. */
json_t *bench_json_row(const bench_result *r);
/* A yardstick and a rate's fraction of it as the table shows them: "n/a"
 * when the run has none (no oneDNN; --no-yardsticks), never a made-up
 * figure. */
void bench_yard_cells(double gflops, double yard, char cell[16],
                      char frac[16]);

/* The timed passes of one configuration: per rep its wall, busy (compute)
 * and wait (exposed communication over wall) seconds, its threads' most
 * over least busy time (0: unknown), and the job's wall (the slowest
 * rank's, filled by bench_times), in one allocation; the last pass's
 * timing and the peak RSS over the passes. */
typedef struct {
    double *wall, *busy, *wait, *tbusy, *job;
    ra_timing tm;
    double rss;
} bench_reps;

/* Room for reps passes; RA_ERR_NOMEM naming command otherwise. */
ra_status bench_reps_alloc(bench_reps *r, int64_t reps, const char *command);
void bench_reps_free(bench_reps *r);
/* Records r->tm as pass rep. */
void bench_reps_record(bench_reps *r, int64_t rep);
/* Timing statistics over the reps and the ranks into res: seconds_median,
 * rank_seconds, busy_seconds, thread_busy, comm_wait_fraction, the bytes
 * and the peak RSS. Collective. */
void bench_times(MPI_Comm comm, int64_t reps, bench_reps *r,
                 bench_result *res);

/* Median of a[0..n), reordering a. */
double bench_median(double *a, int64_t n);
spread bench_spread(MPI_Comm comm, double x);
/* Resets the peak-RSS mark to the current RSS (Linux >= 4.0); 0 if it could. */
int bench_rss_reset(void);
/* VmHWM in bytes, or 0 when unknown. */
double bench_rss_peak(void);
/* The two yardsticks of a run, summed over the ranks: OpenBLAS's sgemm and
 * oneDNN's matmul (0: not measured, why in impl; skipped: neither was
 * asked for, --no-yardsticks). */
typedef struct {
    double sgemm, peak;
    int bf16, skipped;
    char impl[128];
    double core;        /* the core's physical peak (core_peak.h) summed
                           over ranks and threads; 0: none (why in loop) */
    char loop[96];      /* the loop that measured it, or why none */
} bench_yard;

/* Both yardsticks on this rank's threads, all ranks at once, the peak in
 * fp32 or (bf16) bf16; rank 0's impl; with skip, neither (their columns
 * n/a). Collective. */
void bench_yardsticks(MPI_Comm comm, int threads, int bf16, int skip,
                      bench_yard *y);

/* The core's physical peak into y->core and y->loop: the register-resident
 * loop of the precision's tile instruction (core_peak.h) on every rank at
 * once, summed over the ranks and times threads; with skip nothing.
 * Collective (bench_yard.c). */
void bench_core_peak(MPI_Comm comm, int threads, int bf16, int skip,
                     bench_yard *y);

/* The products-only rate of problem s under p (the forward's tile
 * products, or with backward the backward's) on one thread of every rank
 * at once, summed over the ranks and times threads; 0 with skip or when
 * the products cannot be made on some rank (the additive score's come
 * pair by pair: only its products that are tile products count).
 * Collective (bench_yard.c). */
double bench_products_rate(MPI_Comm comm, const ra_shape *s,
                           const ra_params *p, int backward, int skip);

/* Seeded random weights of the additive score, A hidden units over q and
 * k of dim D: w_q (A, D), w_k (A, D), w_v (A), the first two scaled by
 * 0.5 / sqrt(D) to keep tanh off its rails, in one allocation (*mem, the
 * caller frees); the ranks agree that it was made. */
ra_status bench_additive_make(MPI_Comm comm, uint64_t seed, int64_t A,
                              int64_t D, float **mem, ra_additive *ad);
/* H unit-normal sink logits of the seed, as `ringattn gen --sinks` writes
 * them, in a new *mem (the caller frees it); the ranks agree that it was
 * made. */
ra_status bench_sinks_make(MPI_Comm comm, uint64_t seed, int64_t H,
                           float **mem);
/* GB/s per rank of a comm-only ring of the key/value blocks of a layout
 * (0 when it could not be measured). */
double bench_ring_bandwidth(MPI_Comm comm, const ra_shape *s,
                            const ra_params *p, ra_layout lay);

/* A comm-only ring of steps steps (bench's blocks, probe's ring step): at
 * step t every rank sends count(ctx, its rank, t) floats from half t % 2
 * of buf (two halves of cap floats each) to its right neighbour and
 * receives its left neighbour's count into the other half. */
typedef struct {
    int steps;
    int64_t (*count)(void *ctx, int rank, int t);
    void *ctx;
    float *buf;
    int64_t cap;
} bench_ring;

/* Runs ring over comm (every rank) on the strategies' one ring loop
 * (ring_loop.c), with plain waits and nothing computed between; the
 * floats this rank sent into *sent. RA_OK, or RA_ERR_MPI naming name and
 * the step (local: the caller agrees). */
ra_status bench_ring_run(MPI_Comm comm, const char *name,
                         const bench_ring *ring, int64_t *sent);

/* A rank's operands of a forward pass: its slices of the inputs q, k, v
 * and of the outputs o, lse, shaped as ra_forward_ex() takes them. */
typedef struct {
    const float *q, *k, *v;
    float *o, *lse;
} ra_baseline_operands;

/* The baseline that `ringattn bench --mode naive` measures the ring
 * against (baseline.c): the contract of ra_forward_ex() without masks,
 * computed the naive way: every rank gathers the full K and V
 * (MPI_Allgatherv) and materialises the n x M score matrix of each head
 * (ra_naive_forward). Memory O(M + n * M) per rank. */
ra_status ra_baseline_forward(MPI_Comm comm, const ra_shape *shape,
                              const ra_params *params,
                              const ra_baseline_operands *x,
                              ra_timing *timing);

#endif /* RA_BENCH_MEASURE_H */
