/* plan_out.h: `ringattn plan`'s options and what they lead to (cmd_plan.c)
 * and its printed report (plan_report.c); the predictions, JSON and CSV
 * are comm/perf/plan_run.h's. */
#ifndef RA_PLAN_OUT_H
#define RA_PLAN_OUT_H

#include "bench_check.h"
#include "cli.h"
#include "plan_run.h"

typedef struct {
    cli_shape cs;
    const char *in;         /* --in: the problem of a file */
    ra_axes qkv_layout;     /* --qkv-layout: --in's order without axes */
    cli_tables tab;         /* --json, --csv */
    double link_rate;       /* bits/s between nodes; 0: the profile's */
    double link_latency;    /* s per message between nodes; 0: same */
    cli_random_masks rm;
    int64_t seed, additive_hidden;
    int max_seq;
    perf_plan w;            /* p, ranks, nodes, cores, kernel_rate, sweep,
                               profile, platform: options; 0 not given */
    ra_h5_source src;       /* the default dataset names */
    ra_h5_masks h5m;        /* masks of --in */
    bench_masks bm;         /* or bench's random ones */
    ra_additive additive;   /* A only: the model needs no weights */
    ra_platform pl;         /* --platform's cluster; pl.nodes 0: none */
} plan_opts;

/* Rank 0 prints the plan and writes --json and --csv; every rank returns
 * the same status. */
ra_status plan_report(const cli_ctx *ctx, const plan_opts *o);
/* Rank 0 prints --max-seq's table at allocation al. */
void plan_report_max_seq(const cli_ctx *ctx, const plan_opts *o,
                         const model_alloc *al);

#endif /* RA_PLAN_OUT_H */
