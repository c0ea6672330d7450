/* bench_sweep.h: the configurations of `ringattn bench`, measured in
 * order (bench_sweep.c): each query length under the strategies asked
 * (the one given, each that applies, or the plan's pick per length), then
 * the materialising baseline; and bench's printed text (bench_text.c):
 * the echo, the yardsticks, the table's rows as they come. */
#ifndef RA_BENCH_SWEEP_H
#define RA_BENCH_SWEEP_H

#include <stdio.h>

#include "bench_run.h"
#include "plan_run.h"

enum { BENCH_MAX_SEQS = 64 };

/* The strategies a length runs under. */
typedef enum { BENCH_GIVEN, BENCH_ALL, BENCH_AUTO } bench_which;

/* The operands of a configuration, the caller's: alloc fills x for
 * problem s under p's resolved layout (RA_ERR_ARG or RA_ERR_NOMEM with a
 * message; not collective), release frees what it allocated (also after
 * a failed alloc). */
typedef struct {
    ra_status (*alloc)(void *arg, const ra_shape *s, const ra_params *p,
                       bench_operands *x);
    void (*release)(void *arg);
    void *arg;
} bench_alloc;

/* A bench run: the problem per length, inputs and masks from gen (gen.p:
 * the run's parameters, layout resolved), the passes, which rows. */
typedef struct {
    ra_shape shape;          /* N, and M unless seq_kv_fixed, per length */
    int seq_kv_fixed;
    const int64_t *seqs;     /* the query lengths */
    int nseq;                /* 1..BENCH_MAX_SEQS */
    bench_gen gen;
    int sinks;               /* gen.p's sinks are random ones */
    int64_t warmup, reps;
    int ring, naive;         /* the call's rows, the baseline's */
    int no_yardsticks, layout_auto;
    bench_which which;
    const char *profile;     /* BENCH_AUTO's profile (NULL: built in) */
    int picked[BENCH_MAX_SEQS];       /* BENCH_AUTO: the pick per length */
    double predicted[BENCH_MAX_SEQS]; /* its seconds; 0: none (the ring) */
    bench_place place;
    bench_alloc ops;
} bench_sweep;

/* The random logits inputs of a run: H sinks (as gen --sinks), the
 * additive score's weights (bench_additive_make). */
typedef struct {
    float *sinks, *additive_mem;
    ra_additive additive;
} bench_logits;

/* w's random inputs besides q, k, v, from w->gen.seed: its sinks when
 * w->sinks, the additive score's weights of A hidden units when p's score
 * is additive; into *m, with p->num.sinks and p->num.additive pointing
 * into it (bench_logits_free releases it). Collective. */
ra_status bench_logits_make(MPI_Comm comm, const bench_sweep *w, int64_t A,
                            ra_params *p, bench_logits *m);
void bench_logits_free(bench_logits *m);

/* BENCH_AUTO: the plan's pick per length for job j (plan_job_pick) into
 * w->picked and w->predicted; a profile that cannot predict the job: the
 * ring, and one warning line on err (NULL: none, on ranks but 0). Unless
 * BENCH_ALL, the ranks then agree that each length's strategy takes its
 * problem (ra_call_strategy_check). Collective. */
ra_status bench_sweep_plan(const plan_job *j, bench_sweep *w, FILE *err);

/* The yardsticks of a run under p (bench_yardsticks): p's threads on
 * every rank, the peak in the kernels' precision; none when skip.
 * Collective. */
void bench_run_yardsticks(MPI_Comm comm, const ra_params *p, int skip,
                          bench_yard *y);

/* The problem of length i. */
ra_shape bench_sweep_shape(const bench_sweep *w, int i);

/* What the baseline of w->naive cannot run (comm/perf/baseline.c
 * computes the dot score in fp32 on the contiguous layout, causal at
 * most): RA_ERR_ARG naming the first such option, never run in fp32 and
 * reported as applied. */
ra_status bench_naive_check(const bench_sweep *w);

/* The most rows w measures. */
int bench_sweep_rows(const bench_sweep *w);

/* Measures every configuration of w into rows[*nrows...], counting them;
 * out (NULL: none, on ranks but 0) gets each row as it comes, with the
 * plain rate beside (score features or sinks) and the plan's prediction
 * (BENCH_AUTO). RA_ERR_MPI: a stalled ring, which the other ranks may not
 * learn of (the caller ends the job); otherwise every rank returns the
 * same status. Collective. */
ra_status bench_sweep_run(MPI_Comm comm, const bench_sweep *w,
                          const bench_yard *yard, FILE *out,
                          bench_result *rows, int *nrows);

/* The echo of w after the job's lines: threads, shape, lengths, masks,
 * logits, layout, strategies, passes, engines, precision and the
 * yardsticks. */
void bench_sweep_echo(FILE *out, const bench_sweep *w, const bench_yard *y);

/* The yardsticks' lines of an echo. */
void bench_print_yard(FILE *out, const bench_yard *y);
/* The table's header and a row (bench and bench --backward). */
void bench_print_header(FILE *out);
void bench_print_row(FILE *out, const bench_result *r);
/* What the table's columns mean, for --help. */
extern const char bench_columns[];

#endif /* RA_BENCH_SWEEP_H */
