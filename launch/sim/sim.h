/* sim.h: ringattn-sim's command line (launch/sim/): the options, the
 * echo and the result row of one run on a simulated cluster, which
 * comm/sim/ sets up and runs (sim_run.h; docs/SIMULATION.md, and
 * docs/DESIGN.md, "The simulated build"). */
#ifndef RA_SIM_H
#define RA_SIM_H

#include "sim_run.h"

/* Everything a run takes, filled by sim_options_parse. */
typedef struct {
    sim_config run;
    const char *platform; /* --platform: the file, echoed only */
    const char *json;     /* --json: bench's row (and the sim's keys) */
} sim_opts;

/* Fills o from argv (defaults first); 0, 1 for --help, or 2 with one line
 * in why ("--option: problem"). */
int sim_options_parse(int argc, char **argv, sim_opts *o, char *why, size_t n);
/* The options and their help, on stdout. */
void sim_options_usage(void);

/* What a row says beyond bench's: how it was simulated. */
typedef struct {
    const char *mode;     /* "exact", "scale" */
    const char *platform; /* the file smpirun ran on */
    const char *verdict;  /* PASS, FAIL, PASS(finite), unchecked */
    double injected;      /* seconds of kernel time injected, slowest rank */
} sim_row;

/* --json's folder is writable (rank 0 checks; one line in why). */
int sim_json_check(const char *path, char *why, size_t n);
/* Writes bench's row of r (comm/perf/bench_rows.c) with the keys of sim
 * ("simulated": true, "sim_mode", "platform", "injected_s") and its
 * verdict into path as a one-row array, as `bench --json` writes; 0, or -1
 * with errno set. Rank 0. */
int sim_json_write(const char *path, const bench_result *r, const sim_row *sim);

#endif /* RA_SIM_H */
