/* common.c: what the drivers share: the one output check with agreement,
 * the command line's checks of a run's parameters, a rank's tensors and
 * memory by the context's ranks, failure reporting. */
#include <stdio.h>
#include <stdlib.h>

#include <omp.h>

#include "agree.h"
#include "call.h"
#include "cli.h"
#include "gemm_env.h"
#include "h5io.h"
#include "internal.h"
#include "watchdog.h"

/* in ra_axes order, from RA_AXES_BNHD */
const char *const cli_out_axes[] = {"B,N,H,D", "B,H,N,D", NULL};

void cli_params_finish(ra_params *p)
{
    if (p->exec.threads == 0)
        p->exec.threads = getenv("OMP_NUM_THREADS") ? omp_get_max_threads() : 1;
}

/* The library's strategy names, in enum order, joined by ", ". */
static const char *strategy_names(char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < RA_STRATEGY_COUNT && at < len; k++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", k ? ", " : "",
                               ra_strategy_name((ra_strategy)k));
    return buf;
}

/* RA_ERR_ARG when --strategy is a choice only bench or the plan makes
 * (all, auto) where one strategy must be named. */
static ra_status strategy_named(const ra_params *p)
{
    char names[128];
    if ((int)p->exec.strategy == CLI_STRATEGY_ALL)
        return ra_error_set(RA_ERR_ARG, "--strategy all: only bench runs "
                            "every strategy; name one (%s)",
                            strategy_names(names, sizeof names));
    if ((int)p->exec.strategy == CLI_STRATEGY_AUTO)
        return ra_error_set(RA_ERR_ARG, "--strategy auto: the plan chooses for "
                            "the forward pass of run and bench only; name one "
                            "(%s)", strategy_names(names, sizeof names));
    return RA_OK;
}

ra_status cli_options_check(const ra_params *p)
{
    ra_gemm env_gemm; /* --gemm auto (or none): RINGATTN_GEMM must name one */
    if (p->exec.gemm == RA_GEMM_AUTO && ra_gemm_env(&env_gemm) != RA_OK)
        return RA_ERR_ARG;
    return strategy_named(p);
}

ra_status cli_params_check(const ra_params *p, const ra_shape *s,
                           const char *file)
{
    ra_status st = cli_options_check(p);
    if (st != RA_OK)
        return st;
    /* every other rule is the library's, checked here before anything is
     * read; a file's record is named */
    st = ra_call_check_local(s, p);
    if (st != RA_OK && file) {
        char why[1024];
        snprintf(why, sizeof why, "%s", ra_error_message());
        st = ra_error_set(RA_ERR_INPUT, "%s: the recorded options: %s", file,
                          why);
    }
    return st;
}

ra_status cli_output_agree(const cli_ctx *ctx, const char *out, int force,
                           const char *const *inputs)
{
    ra_status st = RA_OK;
    if (ctx->rank == 0)
        st = h5io_output_check(out, force, inputs);
    return ra_agree(ctx->comm, st);
}

ra_status cli_paths_agree(const cli_ctx *ctx, const h5io_named_path *list)
{
    ra_status st = RA_OK;
    if (ctx->rank == 0)
        st = h5io_paths_check(list);
    return ra_agree(ctx->comm, st);
}

ra_status cli_mem_check(const cli_ctx *ctx, int64_t need, int64_t limit,
                        const char *what)
{
    const h5io_mem m = {ctx->rank, limit, ctx->nodes.ranks_on_node};
    return h5io_mem_check(&m, need, what);
}

ra_status cli_tensors_alloc(cli_tensors *t, const ra_shape *s,
                            const ra_params *p, const cli_ctx *ctx)
{
    const h5io_mem m = {ctx->rank, p->exec.mem_limit,
                        ctx->nodes.ranks_on_node};
    return h5io_tensors_alloc(t, s, p, &m, ctx->nranks);
}

int cli_parse_pass(const cli_ctx *ctx, const cli_spec *spec, void *opts,
                   ra_params *p, int argc, char **argv)
{
    ra_params_default(p);
    p->exec.stall_timeout = NAN; /* "not given" until cli_pass_begin */
    const int code = cli_parse_or_exit(ctx, spec, opts, argc, argv);
    if (code >= 0)
        return code;
    cli_params_finish(p);
    return -1;
}

int cli_fail(const cli_ctx *ctx, int code, const char *what)
{
    if (ctx->rank == 0)
        fprintf(stderr, "ringattn: %s\n", what);
    return code;
}

int cli_exit_code(ra_status st)
{
    switch (st) {
    case RA_OK: return CLI_EXIT_OK;
    case RA_ERR_ARG:
    case RA_ERR_INPUT:
    case RA_ERR_EXISTS: return CLI_EXIT_USAGE;
    case RA_STOPPED: return CLI_EXIT_CHECKPOINTED;
    default: return CLI_EXIT_RUNTIME;
    }
}

void cli_abort(const cli_ctx *ctx, const char *what)
{
    cli_watchdog_phase(ctx, NULL, 0.0, 0.0); /* this line is the one */
    fprintf(stderr, "ringattn: %s\n", what);
    fflush(stderr);
    MPI_Abort(ctx->comm, CLI_EXIT_RUNTIME);
    exit(CLI_EXIT_RUNTIME); /* MPI_Abort does not return */
}

int cli_fail_status(const cli_ctx *ctx, ra_status st)
{
    char line[1200];
    /* the library says what is true; the command line names its flag */
    snprintf(line, sizeof line, "%s%s", ra_error_message(),
             st == RA_ERR_EXISTS ? "; pass --force to replace it" : "");
    return cli_fail(ctx, cli_exit_code(st), line);
}
