/* bench.h: `ringattn bench`: measurement and reporting, split in two files. */
#ifndef RA_BENCH_H
#define RA_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "cli.h"

/* The options of one `bench` invocation. */
enum { MAX_SEQS = 64 };
typedef struct {
    cli_shape cs;
    ra_params p;
    int64_t seqs[MAX_SEQS];
    int nseq;
    int64_t warmup, reps, check_rows, seed;
    int lens;             /* random padding lengths */
    int layout_auto;      /* the layout was chosen, not given */
    int64_t additive_hidden; /* A of the random additive weights */
    float *additive_mem;  /* w_q (A, D) | w_k (A, D) | w_v (A) */
    ra_additive additive;
    int64_t segment_avg;  /* random packed segments of this mean length */
    int ring, naive;
    const char *json, *csv;
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
    const char *mode;          /* "ring" or "naive" */
    int64_t block_q, block_kv;
    double flops;              /* useful FLOPs of one pass */
    double seconds_median;     /* median over reps of the slowest rank */
    spread rank_seconds;       /* each rank's median wall time */
    spread busy_seconds;       /* each rank's median compute time */
    double gflops;             /* flops / seconds_median */
    double sgemm_gflops;       /* sum over ranks of large-sgemm GFLOP/s */
    double comm_wait_fraction; /* max over ranks of median wait / wall */
    double bytes_sent;         /* per rank, max over ranks, one pass */
    double bytes_sent_avg;     /* per rank, mean over ranks, one pass */
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

/* Output sinks; rank 0 only. */
void bench_print_header(FILE *out);
void bench_print_row(FILE *out, const bench_result *r);
void bench_json_write(FILE *out, const bench_result *rows, int count);
void bench_csv_write(FILE *out, const bench_result *rows, int count);

#endif
