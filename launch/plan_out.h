/* plan_out.h: `ringattn plan`'s options, state and reports (cmd_plan.c,
 * plan_report.c). */
#ifndef RA_PLAN_OUT_H
#define RA_PLAN_OUT_H

#include "bench_check.h"
#include "plan.h"
#include "platform.h"

enum { PLAN_MAX_SWEEP = 32 };

typedef struct {
    cli_shape cs;
    ra_params p;
    const char *in, *profile;
    const char *platform;   /* --platform: a SimGrid platform file */
    ra_axes qkv_layout;     /* --qkv-layout: --in's order without axes */
    cli_tables tab;               /* --json, --csv */
    int64_t ranks, nodes, cores;  /* 0: not given */
    double link_rate;             /* bits/s between nodes; 0: the profile's */
    double link_latency;          /* s per message between nodes; 0: same */
    double kernel_rate;           /* GFLOP/s per core; 0: the profile's */
    cli_random_masks rm;
    int64_t seed, additive_hidden;
    int64_t sweep[PLAN_MAX_SWEEP];
    int nsweep;
    int max_seq;
} plan_opts;

/* What one plan owns. */
typedef struct {
    ra_shape s;
    ra_h5_source src;      /* the default dataset names */
    ra_h5_masks h5m;       /* masks of --in */
    bench_masks bm;        /* or bench's random ones */
    model_masks mk;
    ra_additive additive;  /* A only: the model needs no weights */
    ra_profile pf;
    ra_platform pl;        /* --platform's cluster; pl.nodes 0: none */
    int layout_auto;
    model_table table;
    model_table *sweep;    /* 2 per node count: strong, weak */
    double seconds;        /* the prediction's own time */
} plan_state;

ra_status plan_sweep(const plan_opts *o, plan_state *w);
/* Rank 0 prints; every rank returns the same status. */
ra_status plan_report(const cli_ctx *ctx, const plan_opts *o,
                      const plan_state *w);
ra_status plan_report_max_seq(const cli_ctx *ctx, const plan_opts *o,
                              const plan_state *w, const model_alloc *al);

#endif /* RA_PLAN_OUT_H */
