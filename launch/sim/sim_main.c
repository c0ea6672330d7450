/* sim_main.c: ringattn-sim, the engine's forward and backward passes on a
 * simulated cluster (SimGrid SMPI; docs/SIMULATION.md): the command line
 * around comm/sim/'s run (sim_run.h). Rank 0 prints a '#' echo of every
 * parameter, then one result row in simulated seconds, and writes --json.
 * parse -> set up -> echo -> run -> report. */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "agree.h"
#include "sim.h"

/* Rank 0 prints one line and every rank ends with code. */
static int finish(int rank, int code, const char *line)
{
    if (rank == 0 && line)
        fprintf(stderr, "ringattn-sim: %s\n", line);
    MPI_Finalize();
    return code;
}

static int exit_code(ra_status st)
{
    return st == RA_ERR_ARG || st == RA_ERR_INPUT ? 2 : 1;
}

static void echo(const sim_ctx *x, const sim_opts *o)
{
    const sim_config *c = &o->run;
    const ra_shape *s = &c->s;
    const ra_params *p = &c->p;
    printf("# ringattn-sim: the engine under SimGrid SMPI (simulated time)\n");
    printf("# %-14s%s\n", "mode",
           c->mode == SIM_EXACT
               ? "exact (kernels run; fp64 check)"
               : "scale (kernel time injected; buffers folded)");
    printf("# %-14s%s\n", "platform", o->platform);
    printf("# %-14s%d on %d nodes (%d-%d per node), ring order %s\n", "ranks",
           x->P, x->nodes.nodes, x->nodes.ranks_per_node_min,
           x->nodes.ranks_per_node_max, c->node_aware ? "node" : "mpirun");
    printf("# %-14sB=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld\n",
           "shape", (long long)s->B, (long long)s->N, (long long)s->M,
           (long long)s->H, (long long)s->G, (long long)s->D, (long long)s->Dv);
    printf("# %-14scausal=%d window=%s%lld,%lld\n", "mask", p->num.causal,
           p->num.window ? "" : "off ", (long long)p->num.window_left,
           (long long)p->num.window_right);
    printf("# %-14s%s, layout %s, precision %s, wire %s\n", "strategy",
           ra_strategy_name(p->exec.strategy), ra_layout_name(x->layout),
           ra_precision_name(p->num.precision), ra_wire_name(p->exec.wire));
    printf("# %-14s%s, reps %lld, seed %lld, check rows %lld\n", "pass",
           c->backward ? "backward" : "forward", (long long)c->reps,
           (long long)c->seed, (long long)c->check_rows);
    printf("# %-14s%.2f GFLOP/s per core (%s), step %.3g s\n", "kernel rate",
           x->rate * 1e-9,
           c->rate > 0  ? "--rate"
           : c->profile ? c->profile
                        : "built-in profile",
           x->pf.step_seconds);
    fflush(stdout);
}

/* Rank 0: the result row, and --json's file. */
static ra_status report(const sim_ctx *x, const sim_opts *o,
                        const bench_result *res, double injected)
{
    if (x->rank != 0)
        return RA_OK;
    printf("# %5s %6s %-9s %-9s %9s %13s %10s %10s %9s %s\n", "P", "nodes",
           "mode", "strategy", "N", "sim_seconds", "GFLOP/s", "injected_s",
           "max_err", "verdict");
    const double err = res->max_rel_error;
    const int exact = o->run.mode == SIM_EXACT;
    const sim_row row = {exact ? "exact" : "scale", o->platform,
                         !exact       ? "unchecked"
                         : !res->pass ? "FAIL"
                         : isnan(err) ? "PASS(finite)"
                                      : "PASS",
                         injected};
    printf("  %5d %6d %-9s %-9s %9lld %13.6f %10.3f %10.4f %9.2e %s\n", x->P,
           x->nodes.nodes, row.mode, res->mode, (long long)o->run.s.N,
           res->seconds_median, res->gflops, injected, err, row.verdict);
    fflush(stdout);
    if (o->json && sim_json_write(o->json, res, &row) != 0)
        return ra_error_set(RA_ERR_IO, "--json %s: %s", o->json,
                            strerror(errno));
    return RA_OK;
}

/* --json's folder, checked on rank 0 before anything runs. */
static ra_status json_agree(int rank, const sim_opts *o)
{
    char why[512];
    ra_status st = RA_OK;
    if (rank == 0 && o->json && sim_json_check(o->json, why, sizeof why) != 0)
        st = ra_error_set(RA_ERR_ARG, "%s", why);
    return ra_agree(MPI_COMM_WORLD, st);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    static _Thread_local sim_opts o; /* per rank, off the small stack */
    char why[512];
    const int rc = sim_options_parse(argc, argv, &o, why, sizeof why);
    if (rc == 1 && rank == 0)
        sim_options_usage();
    if (rc != 0)
        return finish(rank, rc == 1 ? 0 : rc, rc == 1 ? NULL : why);
    sim_ctx x = {0};
    ra_status st = json_agree(rank, &o);
    if (st == RA_OK)
        st = sim_setup(&x, &o.run);
    if (st != RA_OK)
        return finish(rank, exit_code(st), ra_error_message());
    if (x.rank == 0)
        echo(&x, &o);
    bench_result res;
    double injected = 0;
    if ((st = sim_run(&x, &o.run, &res, &injected)) == RA_ERR_MPI)
        MPI_Abort(MPI_COMM_WORLD, 1); /* a stalled peer: nobody waits */
    if (st == RA_OK)
        st = ra_agree(x.comm, report(&x, &o, &res, injected));
    sim_close(&x);
    if (st != RA_OK)
        return finish(x.rank, exit_code(st), ra_error_message());
    return finish(x.rank, res.pass ? 0 : 1, NULL);
}
