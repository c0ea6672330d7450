/* bench.h: `ringattn bench`'s options and what bench --backward shares
 * with it; the measurements, the printed text, the check and the rows'
 * JSON and CSV are comm/perf/'s (bench_sweep.h, bench_run.h). */
#ifndef RA_BENCH_H
#define RA_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "bench_sweep.h"
#include "cli.h"

/* The options of `ringattn bench`. */
typedef struct {
    cli_shape cs;
    ra_params p;
    int64_t seqs[BENCH_MAX_SEQS];
    int nseq;
    int64_t warmup, reps, check_rows, seed;
    int no_yardsticks;       /* --no-yardsticks */
    cli_random_masks rm;     /* --lens, --segments */
    int64_t additive_hidden; /* A of the random additive weights */
    int sinks;               /* --sinks: random sinks, as gen --sinks */
    bench_logits logits;     /* the sinks and weights p points into */
    int mode;                /* 0 ring, 1 naive, 2 both */
    const char *profile;     /* the machine profile of --strategy auto */
    cli_tables tab;          /* --json, --csv */
} bench_opts;

/* Fills o from argv[1..argc) (o holds the defaults); *help is set by
 * --help. Returns 0, or -1 with a message set. */
int parse_bench(bench_opts *o, int argc, char **argv, int *help);

/* Where the ranks of ctx run, as a row states it. */
bench_place bench_place_of(const cli_ctx *ctx);

/* Writes the rows into the files of --json and --csv (rank 0), each
 * atomically: the whole new file or, on a failed write, the earlier one.
 * Not collective. */
ra_status bench_tables_write(const cli_ctx *ctx, const cli_tables *tab,
                             const bench_result *rows, int nrows);

#endif
