/* bench.h: `ringattn bench`: measurement and reporting, split in two files. */
#ifndef RA_BENCH_H
#define RA_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "compare.h"

enum { MAX_SEQS = 64, SGEMM_N = 2048 };


/* The options of `ringattn bench`. */
typedef struct {
    cli_shape cs;
    ra_params p;
    int64_t seqs[MAX_SEQS];
    int nseq;
    int64_t warmup, reps, check_rows, seed;
    int no_yardsticks;       /* --no-yardsticks */
    cli_random_masks rm;     /* --lens, --segments */
    int layout_auto;         /* the layout was chosen, not given */
    int64_t additive_hidden; /* A of the random additive weights */
    float *additive_mem;     /* w_q (A, D) | w_k (A, D) | w_v (A) */
    ra_additive additive;
    int mode;                /* 0 ring, 1 naive, 2 both */
    int ring, naive;
    int all_strategies;      /* --strategy all: every applicable one */
    int auto_strategy;       /* --strategy auto: the plan picks per N */
    const char *profile;     /* the machine profile of that pick */
    int picked[MAX_SEQS];    /* the pick's strategy, per N */
    double predicted[MAX_SEQS]; /* and its predicted seconds */
    cli_tables tab;          /* --json, --csv */
} bench_opts;

/* Fills o from argv[1..argc) (o holds the defaults); *help is set by
 * --help. Returns 0, or -1 with a message set. */
int parse_bench(bench_opts *o, int argc, char **argv, int *help);

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

/* ---- measurement (bench_measure.c); collective where comm is given ---- */

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
/* GFLOP/s of an SGEMM_N^3 sgemm on this rank's threads, all ranks at once. */
double bench_sgemm_rate(MPI_Comm comm, int threads);
/* The two yardsticks of a run, summed over the ranks: OpenBLAS's sgemm and
 * oneDNN's matmul (0: not measured, why in impl; skipped: neither was
 * asked for, --no-yardsticks). */
typedef struct {
    double sgemm, peak;
    int bf16, skipped;
    char impl[128];
} bench_yard;

/* Both yardsticks on this rank's threads, all ranks at once, the peak in
 * fp32 or (bf16) bf16; rank 0's impl; with skip, neither (their columns
 * n/a). Collective. */
void bench_yardsticks(MPI_Comm comm, int threads, int bf16, int skip,
                      bench_yard *y);
/* GFLOP/s of an SGEMM_N^3 oneDNN matmul (engine/peak.h) on this rank's
 * threads, all ranks at once (they compete for cores and memory as in a
 * pass), in fp32 or (bf16) bf16 x bf16 -> fp32: the peak yardstick. 0 when
 * it could not run (no oneDNN in the build, no bf16 matmul on the CPU);
 * impl (cap bytes) gets oneDNN's implementation, or why not. Every rank
 * makes the same barriers. */
double bench_peak_rate(MPI_Comm comm, int threads, int bf16, char *impl,
                       size_t cap);

/* Seeded random weights of the additive score, A hidden units over q and
 * k of dim D: w_q (A, D), w_k (A, D), w_v (A), the first two scaled by
 * 0.5 / sqrt(D) to keep tanh off its rails, in one allocation (*mem, the
 * caller frees); the ranks agree that it was made. */
ra_status bench_additive_make(MPI_Comm comm, uint64_t seed, int64_t A,
                              int64_t D, float **mem, ra_additive *ad);
/* GB/s per rank of a comm-only ring of the key/value blocks of a layout. */
double bench_ring_bandwidth(MPI_Comm comm, const ra_shape *s, ra_layout lay);

/* ---- inputs, masks and the fp64 check (bench_check.c) ---- */

/* Mask data of one configuration, this rank's part. */
typedef struct {
    int64_t *q_lens, *kv_lens;   /* (B) or NULL */
    int64_t *q_seg, *kv_seg;     /* (B, n), (B, m) or NULL */
    ra_masks view;
} bench_masks;

/* Generates the masks the options ask for, as `ringattn gen` would write
 * them (same streams), for this rank's slices; RA_ERR_NOMEM otherwise.
 * bench_masks_free() releases them either way. */
ra_status bench_masks_make(const bench_opts *o, const ra_shape *s,
                           const ra_slice *qs, const ra_slice *ks,
                           bench_masks *bm);
void bench_masks_free(bench_masks *bm);

/* Visible (query, key) pairs of this rank's queries, exactly, under every
 * mask; NaN when memory ran out. */
double bench_local_pairs(const bench_opts *o, const ra_shape *s,
                         const ra_slice *qs, const bench_masks *bm);

/* Checks up to check_rows local query rows of batch 0 and B - 1 (all heads)
 * against the fp64 reference on regenerated inputs and masks, into the
 * tally t (a check that cannot run counts as a bad row). */
void bench_check_output(const bench_opts *o, const ra_shape *s,
                        const ra_slice *qs, const bench_masks *bm,
                        const float *out, const float *lse, ra_tally *t);

/* Rank 0: the yardsticks' lines of a run's echo. */
void bench_print_yard(FILE *out, const bench_yard *y);
/* Output sinks; rank 0 only. The writers return 0, or -1 when a write
 * failed (errno set). */
void bench_print_header(FILE *out);
void bench_print_row(FILE *out, const bench_result *r);
int bench_json_write(FILE *out, const bench_result *rows, int count);
/* The columns of the table, for --help. */
extern const char bench_columns[];
int bench_csv_write(FILE *out, const bench_result *rows, int count);

/* The files of --json and --csv checked before any work (rank 0; an
 * existing file is replaced), against each other and the --profile read
 * (or NULL): RA_OK or the refusal. Not collective. */
ra_status bench_tables_check(const cli_ctx *ctx, const cli_tables *tab,
                             const char *profile);
/* Writes the rows into the files of --json and --csv (rank 0), each
 * atomically: the whole new file or, on a failed write, the earlier one.
 * Not collective. */
ra_status bench_tables_write(const cli_ctx *ctx, const cli_tables *tab,
                             const bench_result *rows, int nrows);

#endif
