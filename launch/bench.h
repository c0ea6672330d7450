/* bench.h: `ringattn bench`: its options, masks and check, and reporting;
 * the measurements are comm/bench_measure.h's. */
#ifndef RA_BENCH_H
#define RA_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "bench_measure.h"
#include "cli.h"
#include "compare.h"

enum { MAX_SEQS = 64 };


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
