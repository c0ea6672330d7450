/* sim_options.c: ringattn-sim's command line on the options registry
 * (launch/registry.c), spelled as ringattn's own (`bench`, `run`) where
 * the two share an option. Syntax only: the library checks the shape and
 * the options (ra_call_strategy_check, ra_call_forward). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sim.h"

/* A size of the shape; SHOWN: the default when another size applies. */
#define SIM_SIZE(NAME, META, F, DEF, SHOWN, HELP)                             \
    {.name = NAME, .kind = CLI_INT, .meta = META,                             \
     .offset = CLI_FIELD(sim_opts, run.s.F, int64_t), .lo = 1,                \
     .hi = CLI_MAX_SIZE, .def = DEF, .shown = SHOWN, .help = HELP}
#define SIM_COUNT(NAME, META, F, LO, DEF, HELP)                               \
    CLI_OPT_INT(sim_opts, NAME, META, run.F, LO, CLI_MAX_SIZE, DEF, HELP)

static const char *const modes[] = {"exact", "scale", NULL}; /* sim_mode */
static const char *const orders[] = {"mpirun", "node", NULL}; /* node_aware */

static const cli_opt sim_own[] = {
    SIM_SIZE("--seq", "N", N, "4096", NULL, "query length"),
    SIM_SIZE("--kv-seq", "M", M, NULL, "N", "key length"),
    SIM_SIZE("--batch", "B", B, "1", NULL, "batch size"),
    SIM_SIZE("--heads", "H", H, "8", NULL, "query heads"),
    SIM_SIZE("--kv-heads", "G", G, NULL, "H", "kv heads"),
    SIM_SIZE("--dim", "D", D, "64", NULL, "head dim of q and k"),
    SIM_SIZE("--dim-v", "Dv", Dv, NULL, "D", "head dim of v"),
    CLI_OPT_FLAG(sim_opts, "--backward", run.backward,
                 "the backward pass (after one forward)"),
    SIM_COUNT("--reps", "R", reps, 1, "1", "timed passes"),
    SIM_COUNT("--seed", "S", seed, 0, "1", "input seed"),
    SIM_COUNT("--check-rows", "K", check_rows, 0, "3",
              "rows per rank checked in fp64, exact mode"),
    CLI_OPT_CHOICE(sim_opts, "--mode", "M", run.mode, modes, "mode", "exact",
                   "exact (kernels run, fp64 check) or scale (time injected)"),
    CLI_OPT_POSITIVE(sim_opts, "--rate", "GFLOPS", run.rate, 1e6, NULL,
                     "kernel rate per core at scale (the profile's)"),
    {.name = "--profile", .kind = CLI_TEXT, .meta = "FILE",
     .offset = CLI_FIELD(sim_opts, run.profile, const char *),
     .shown = "built-in", .help = "machine profile of `ringattn probe`"},
    CLI_OPT_CHOICE(sim_opts, "--ring-order", "O", run.node_aware, orders,
                   "order", "node", "node by node, or mpirun (as launched)"),
    CLI_OPT_TEXT(sim_opts, "--platform", "FILE", platform, "(smpirun's)",
                 "the platform (echoed; ringattn-sim.sh gives smpirun it)"),
    CLI_OPT_TEXT(sim_opts, "--json", "FILE", json, NULL,
                 "the result as bench's JSON row, marked simulated"),
    {0},
};

/* A named choice of ra_params: the library's names and default. */
#define SIM_NAMED(NAME, META, F, FN, SHOWN, HELP)                             \
    {.name = NAME, .kind = CLI_CUSTOM, .meta = META,                          \
     .offset = offsetof(ra_params, F), .fn = FN, .shown = SHOWN, .help = HELP}

static const cli_opt sim_params[] = {
    CLI_OPT_FLAG(ra_params, "--causal", num.causal, "causal mask"),
    {.name = "--window", .kind = CLI_CUSTOM, .meta = "L[,R]",
     .fn = cli_parse_window, .help = "sliding window"},
    SIM_NAMED("--strategy", "NAME", exec.strategy, cli_parse_strategy, "ring",
              "how ranks split the work (as run's)"),
    SIM_NAMED("--layout", "NAME", exec.layout, cli_parse_layout, "auto",
              "token layout"),
    SIM_NAMED("--precision", "P", num.precision, cli_parse_precision, "fp32",
              "fp32 or bf16"),
    SIM_NAMED("--wire", "W", exec.wire, cli_parse_wire, "auto",
              "auto, fp32 or bf16"),
    {0},
};

static const cli_spec sim_spec = {
    .name = "ringattn-sim",
    .usage = "usage: ringattn-sim [options] (under smpirun: "
             "launch/ringattn-sim.sh)\n",
    .groups = {{sim_own, 0}, {sim_params, offsetof(sim_opts, run.p)}},
};

void sim_options_usage(void)
{
    cli_help_options(&sim_spec, stdout);
}

int sim_options_parse(int argc, char **argv, sim_opts *o, char *why, size_t n)
{
    memset(o, 0, sizeof *o);
    sim_config *c = &o->run;
    ra_params_default(&c->p);
    c->p.exec.threads = 1; /* one thread per simulated rank */
    /* No stall watchdog: SimGrid reports a deadlock itself, and the
     * watchdog's polling wait (strat_wait) would cost a context switch per
     * MPI_Test; 0 makes the waits MPI_Waitall. */
    c->p.exec.stall_timeout = 0;
    /* smpirun keeps --help for itself: ringattn-sim.sh passes --usage */
    for (int a = 1; a < argc; a++)
        if (strcmp(argv[a], "--usage") == 0)
            return 1;
    const int r = cli_parse(&sim_spec, o, argc, argv);
    if (r == CLI_HELP)
        return 1;
    if (r != CLI_PARSED) { /* the caller's line names the program */
        const char *m = ra_error_message();
        const size_t own = strlen(sim_spec.name); /* "ringattn-sim: " */
        if (strncmp(m, sim_spec.name, own) == 0)
            m += own + 2;
        snprintf(why, n, "%s", m);
        return 2;
    }
    c->rate *= 1e9; /* GFLOP/s given */
    c->s.M = c->s.M ? c->s.M : c->s.N;
    c->s.G = c->s.G ? c->s.G : c->s.H;
    c->s.Dv = c->s.Dv ? c->s.Dv : c->s.D;
    return 0;
}
