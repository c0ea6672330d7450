/* plan_run.h: the plans of `ringattn plan` and `--strategy auto` beside
 * the model (plan_run.c, plan_rows.c, plan_text.c): the allocation a plan
 * predicts for, the links it is given, the job's table and its scaling
 * sweep, the longest sequence per strategy, their rows as JSON and CSV
 * and as the printed tables; and the pick for a running job. */
#ifndef RA_PLAN_RUN_H
#define RA_PLAN_RUN_H

#include <stdio.h>

#include "bench_check.h"
#include "model.h"
#include "platform.h"

enum { PLAN_MAX_SWEEP = 32 };

/* A plan: the problem, where it would run and the rates (filled by the
 * caller), then what the model predicts (plan_evaluate). */
typedef struct {
    ra_shape s;
    ra_params p;             /* threads, score, options; every strategy
                                is tried */
    int layout_auto;         /* each layout tried, the best shown */
    int with_io;             /* reading and writing the files timed */
    model_masks mk;          /* the problem's masks (none: NULL) */
    ra_profile pf;           /* the rates, links as plan_links leaves them */
    int64_t ranks, nodes;    /* the job */
    int64_t cores;           /* cores the ranks share; 0: nodes x each's */
    int node_cores;          /* a node's cores (a platform's); 0: this
                                machine's */
    double kernel_rate;      /* GFLOP/s per core; 0: the profile's */
    int64_t sweep[PLAN_MAX_SWEEP]; /* node counts of the scaling */
    int nsweep;
    const char *profile;     /* the profile's file, NULL: built in */
    const char *platform;    /* the platform's file, or NULL */
    ra_platform pl;          /* its cluster; pl.nodes 0: no platform */
    int links_given;         /* the links between nodes are not the
                                profile's (plan_links) */
    const char *in;          /* the problem's file; NULL: shape flags */
    model_table table;       /* the job's predictions */
    model_table *sweeps;     /* 2 per node count: strong, weak (free) */
    double seconds;          /* what predicting the job's table took */
} perf_plan;

/* The allocation of P ranks on K nodes (fake nodes share w->cores). */
model_alloc plan_alloc(const perf_plan *w, int64_t P, int64_t K);

/* The job and the rates of plan w, whose options are set (0: not
 * given): by default the ranks P of the running job and, when they are
 * P, its K nodes (else 1); on platform w->platform, its cluster read into
 * w->pl, its nodes' cores, and by default one rank per node up to its
 * nodes, as ringattn-sim places ranks; the profile w->profile loaded, the
 * links between nodes the platform's or rate (bits/s) and latency (s) in
 * place of the profile's (0: kept), and the collectives between nodes
 * then sharing that link (their measured rates are another machine's).
 * With timed, whether the profile can time every allocation the plan
 * predicts, the job's and each of the sweep. RA_ERR_ARG naming the
 * option (more nodes than ranks, or than the platform has; more ranks
 * than its cores), RA_ERR_INPUT naming the file. Not collective. */
ra_status plan_fit(perf_plan *w, int64_t P, int64_t K, double rate,
                   double latency, int timed);

/* The random masks of plan w's problem in natural order, as bench makes
 * them from seed (padding lengths with lens, packed sequences of mean
 * length segment_avg, 0: none), into *bm (the caller frees it with
 * bench_masks_free) and w->mk. RA_ERR_NOMEM when out of memory. */
ra_status plan_masks_random(perf_plan *w, uint64_t seed, int lens,
                            int64_t segment_avg, bench_masks *bm);

/* Point i of a plan: -1 the job, else the sweep's (i / 2: its node count;
 * odd: weak scaling, N and M grown with the nodes from the first count). */
typedef struct {
    ra_shape s;
    int64_t ranks, nodes;
    const char *scaling;       /* "none", "strong", "weak" */
    const model_table *table;  /* its predictions */
} plan_point;
plan_point plan_point_of(const perf_plan *w, int i);

/* The job's table and the sweep's (w->sweeps, the caller frees it).
 * RA_ERR_NOMEM when out of memory. */
ra_status plan_evaluate(perf_plan *w);

/* Per strategy k at allocation al: the longest N (= M) that fits the
 * memory of a rank into n[k] (0: not even 1) and a rank's model bytes at
 * it into bytes[k]. */
void plan_max_seq(const perf_plan *w, const model_alloc *al,
                  int64_t n[RA_STRATEGY_COUNT],
                  double bytes[RA_STRATEGY_COUNT]);

/* The predictions of plan w (a perf_plan, as a file's writer takes it)
 * as JSON and as CSV (plan_rows.c): 0, or -1 when a write failed (errno
 * set). */
int plan_json_write(FILE *f, const void *w);
int plan_csv_write(FILE *f, const void *w);

/* The text of plan_evaluate's plan (plan_text.c): the echo, a row per
 * strategy (its best layout), the fastest or the tie, the sweep. */
void plan_print(FILE *out, const perf_plan *w);
/* The echo and --max-seq's table: per strategy the longest N (= M) that
 * fits a rank's memory at the job's allocation (plan_max_seq). */
void plan_print_max_seq(FILE *out, const perf_plan *w);
/* The parameter table's lines of `--strategy auto`'s pick. */
void plan_pick_write(FILE *out, const model_result *pick,
                     const char *profile);
/* One warning line when the profile read from path (NULL: the built-in
 * one, no warning) was probed oversubscribed. */
void plan_profile_warning(FILE *err, const char *path, const ra_profile *pf);
/* The warning line of plan_job_pick's unusable profile (its message):
 * `--strategy auto` runs the ring. */
void plan_auto_warning(FILE *err);

/* A running job as `--strategy auto` sees it: its communicator, this
 * rank's node, how many nodes, and a number naming this rank's machine
 * (equal on the ranks of one machine). */
typedef struct {
    MPI_Comm comm;
    int node, nodes;
    uint64_t machine;
} plan_job;

/* The fastest applicable strategy for job j under the resolved layout of
 * p (masks: the padding lengths, or NULL), into p->strategy, and its
 * prediction into *pick. profile: a file, or NULL. A profile that cannot
 * predict this job (model_profile_check): *unusable set, the message kept
 * (ra_error_message), the ring chosen and *pick zero (pick->applies 0).
 * Collective; well under a second. */
ra_status plan_job_pick(const plan_job *j, const ra_shape *s, ra_params *p,
                        const model_masks *masks, const char *profile,
                        model_result *pick, int *unusable);

/* The prediction of p->strategy itself for this job, as plan_job_pick
 * makes it; RA_ERR_ARG (no message) when the model says the strategy does
 * not apply. Collective. */
ra_status plan_job_predict(const plan_job *j, const ra_shape *s,
                           const ra_params *p, const model_masks *masks,
                           const char *profile, model_result *out);

#endif /* RA_PLAN_RUN_H */
