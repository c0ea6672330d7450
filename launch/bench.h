/* bench.h: `ringattn bench`: measurement and reporting, split in two files. */
#ifndef RA_BENCH_H
#define RA_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "cli.h"

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
    double cross_bytes;        /* sent to another node, busiest rank, one
                                  pass (ring mode; 0 for naive) */
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

/* Output sinks; rank 0 only. */
void bench_print_header(FILE *out);
void bench_print_row(FILE *out, const bench_result *r);
void bench_json_write(FILE *out, const bench_result *rows, int count);
void bench_csv_write(FILE *out, const bench_result *rows, int count);

#endif
