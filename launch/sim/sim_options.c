/* sim_options.c: ringattn-sim's command line, spelled as ringattn's own
 * (`bench`, `run`) where the two share an option. One table: name, value,
 * help, the parser that fills sim_opts. Syntax only: the library checks
 * the shape and the options (ra_call_strategy_check, ra_call_forward). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

enum { SIM_MAX_SIZE = INT64_C(1) << 40 };

typedef int (*sim_parse_fn)(sim_opts *o, const char *val, char *why, size_t n);

typedef struct {
    const char *name, *meta, *help;
    sim_parse_fn parse;
} sim_opt;

/* val as an integer in [lo, hi] into *out; 0, or 2 with why. */
static int int_of(const char *name, const char *val, int64_t lo, int64_t hi,
                  int64_t *out, char *why, size_t n)
{
    char *end = NULL;
    errno = 0;
    const long long x = strtoll(val, &end, 10);
    if (errno || end == val || *end || x < lo || x > hi) {
        snprintf(why, n, "%s: '%s' is not an integer in [%lld, %lld]", name,
                 val, (long long)lo, (long long)hi);
        return 2;
    }
    *out = (int64_t)x;
    return 0;
}

/* A named choice through the library's own parser (its message names the
 * choices). */
static int named(const char *name, ra_status st, char *why, size_t n)
{
    if (st == RA_OK)
        return 0;
    snprintf(why, n, "%s: %s", name, ra_error_message());
    return 2;
}

#define SIZE_PARSER(fn, name, field, lo)                             \
    static int fn(sim_opts *o, const char *v, char *why, size_t n)   \
    {                                                                \
        return int_of(name, v, lo, SIM_MAX_SIZE, &o->field, why, n); \
    }
SIZE_PARSER(p_seq, "--seq", s.N, 1)
SIZE_PARSER(p_kv_seq, "--kv-seq", s.M, 1)
SIZE_PARSER(p_batch, "--batch", s.B, 1)
SIZE_PARSER(p_heads, "--heads", s.H, 1)
SIZE_PARSER(p_kv_heads, "--kv-heads", s.G, 1)
SIZE_PARSER(p_dim, "--dim", s.D, 1)
SIZE_PARSER(p_dim_v, "--dim-v", s.Dv, 1)
SIZE_PARSER(p_reps, "--reps", reps, 1)
SIZE_PARSER(p_seed, "--seed", seed, 0)
SIZE_PARSER(p_check_rows, "--check-rows", check_rows, 0)

static int p_causal(sim_opts *o, const char *v, char *why, size_t n)
{
    o->p.num.causal = 1;
    return 0;
}

static int p_backward(sim_opts *o, const char *v, char *why, size_t n)
{
    o->backward = 1;
    return 0;
}

/* "L" or "L,R", as ringattn's --window. */
static int p_window(sim_opts *o, const char *v, char *why, size_t n)
{
    char left[32];
    const char *comma = strchr(v, ',');
    const size_t len = comma ? (size_t)(comma - v) : strlen(v);
    if (len == 0 || len >= sizeof left) {
        snprintf(why, n, "--window: '%s' is not L or L,R", v);
        return 2;
    }
    memcpy(left, v, len);
    left[len] = '\0';
    o->p.num.window = 1;
    o->p.num.window_right = 0;
    int rc = int_of("--window", left, 0, SIM_MAX_SIZE, &o->p.num.window_left,
                    why, n);
    if (rc == 0 && comma)
        rc = int_of("--window", comma + 1, 0, SIM_MAX_SIZE,
                    &o->p.num.window_right, why, n);
    return rc;
}

static int p_strategy(sim_opts *o, const char *v, char *why, size_t n)
{
    return named("--strategy", ra_strategy_parse(v, &o->p.exec.strategy), why,
                 n);
}

static int p_layout(sim_opts *o, const char *v, char *why, size_t n)
{
    return named("--layout", ra_layout_parse(v, &o->p.exec.layout), why, n);
}

static int p_precision(sim_opts *o, const char *v, char *why, size_t n)
{
    return named("--precision", ra_precision_parse(v, &o->p.num.precision), why,
                 n);
}

static int p_wire(sim_opts *o, const char *v, char *why, size_t n)
{
    return named("--wire", ra_wire_parse(v, &o->p.exec.wire), why, n);
}

static int p_mode(sim_opts *o, const char *v, char *why, size_t n)
{
    if (strcmp(v, "exact") == 0 || strcmp(v, "scale") == 0) {
        o->mode = strcmp(v, "exact") == 0 ? SIM_EXACT : SIM_SCALE;
        return 0;
    }
    snprintf(why, n, "--mode: unknown mode '%s' (expected exact or scale)", v);
    return 2;
}

static int p_ring_order(sim_opts *o, const char *v, char *why, size_t n)
{
    if (strcmp(v, "node") == 0 || strcmp(v, "mpirun") == 0) {
        o->node_aware = strcmp(v, "node") == 0;
        return 0;
    }
    snprintf(why, n,
             "--ring-order: unknown order '%s' (expected node or "
             "mpirun)",
             v);
    return 2;
}

static int p_rate(sim_opts *o, const char *v, char *why, size_t n)
{
    char *end = NULL;
    const double x = strtod(v, &end);
    if (end == v || *end || !(x > 0 && x < 1e6)) {
        snprintf(why, n, "--rate: '%s' is not a rate in GFLOP/s above 0", v);
        return 2;
    }
    o->rate = x * 1e9;
    return 0;
}

static int p_profile(sim_opts *o, const char *v, char *why, size_t n)
{
    o->profile = v;
    return 0;
}

static int p_platform(sim_opts *o, const char *v, char *why, size_t n)
{
    o->platform = v;
    return 0;
}

static int p_json(sim_opts *o, const char *v, char *why, size_t n)
{
    o->json = v;
    return 0;
}

static const sim_opt table[] = {
    {"--seq", "N", "query length (4096)", p_seq},
    {"--kv-seq", "M", "key length (N)", p_kv_seq},
    {"--batch", "B", "batch size (1)", p_batch},
    {"--heads", "H", "query heads (8)", p_heads},
    {"--kv-heads", "G", "kv heads (H)", p_kv_heads},
    {"--dim", "D", "head dim of q and k (64)", p_dim},
    {"--dim-v", "Dv", "head dim of v (D)", p_dim_v},
    {"--causal", NULL, "causal mask", p_causal},
    {"--window", "L[,R]", "sliding window", p_window},
    {"--strategy", "NAME", "ring, ring-q, allgather, tree, ulysses, hybrid",
     p_strategy},
    {"--layout", "NAME", "token layout (auto)", p_layout},
    {"--precision", "P", "fp32 or bf16", p_precision},
    {"--wire", "W", "auto, fp32 or bf16", p_wire},
    {"--backward", NULL, "the backward pass (after one forward)", p_backward},
    {"--reps", "R", "timed passes (1)", p_reps},
    {"--seed", "S", "input seed (1)", p_seed},
    {"--check-rows", "K", "rows per rank checked in fp64, exact mode (3)",
     p_check_rows},
    {"--mode", "M",
     "exact (real kernels, fp64 check) or scale (injected "
     "time, folded buffers)",
     p_mode},
    {"--rate", "GFLOPS", "kernel rate per core at scale (the profile's)",
     p_rate},
    {"--profile", "FILE", "machine profile of `ringattn probe` (built-in)",
     p_profile},
    {"--ring-order", "O", "node (default) or mpirun", p_ring_order},
    {"--platform", "FILE",
     "the platform (echoed; launch/ringattn-sim.sh "
     "passes it to smpirun)",
     p_platform},
    {"--json", "FILE", "the result as bench's JSON row, marked simulated",
     p_json},
};
enum { SIM_NOPTS = sizeof table / sizeof *table };

static void defaults(sim_opts *o)
{
    memset(o, 0, sizeof *o);
    ra_params_default(&o->p);
    o->p.exec.threads = 1; /* one thread per simulated rank */
    /* No stall watchdog: SimGrid reports a deadlock itself, and the
     * watchdog's polling wait (strat_wait) would cost a context switch per
     * MPI_Test; 0 makes the waits MPI_Waitall. */
    o->p.exec.stall_timeout = 0;
    o->s = (ra_shape){.B = 1, .N = 4096, .H = 8, .D = 64};
    o->reps = 1;
    o->seed = 1;
    o->check_rows = 3;
    o->node_aware = 1;
    o->platform = "(smpirun's)";
}

void sim_options_usage(void)
{
    printf("usage: ringattn-sim [options] (under smpirun: "
           "launch/ringattn-sim.sh)\n");
    for (int i = 0; i < SIM_NOPTS; i++)
        printf("  %-12s %-7s %s\n", table[i].name,
               table[i].meta ? table[i].meta : "", table[i].help);
}

int sim_options_parse(int argc, char **argv, sim_opts *o, char *why, size_t n)
{
    defaults(o);
    for (int a = 1; a < argc; a++) {
        /* smpirun keeps --help for itself: ringattn-sim.sh passes --usage */
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "--usage") == 0)
            return 1;
        int i = 0;
        while (i < SIM_NOPTS && strcmp(argv[a], table[i].name) != 0)
            i++;
        if (i == SIM_NOPTS) {
            snprintf(why, n, "%s: unknown option (--help lists them)", argv[a]);
            return 2;
        }
        if (table[i].meta && a + 1 == argc) {
            snprintf(why, n, "%s: needs a value %s", argv[a], table[i].meta);
            return 2;
        }
        const int rc =
            table[i].parse(o, table[i].meta ? argv[++a] : NULL, why, n);
        if (rc != 0)
            return rc;
    }
    o->s.M = o->s.M ? o->s.M : o->s.N;
    o->s.G = o->s.G ? o->s.G : o->s.H;
    o->s.Dv = o->s.Dv ? o->s.Dv : o->s.D;
    return 0;
}
