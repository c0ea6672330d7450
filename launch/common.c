/* common.c: what the drivers share: the one output check with agreement,
 * the one allocator of a rank's tensors, the one check of a run's
 * parameters, the score's weights, failure reporting and the parameter
 * echo. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include <omp.h>

#include "agree.h"
#include "call.h"
#include "cli.h"
#include "gemm_env.h"
#include "h5io.h"
#include "internal.h"
#include "strategy.h"
#include "watchdog.h"

/* in ra_axes order, from RA_AXES_BNHD */
const char *const cli_out_axes[] = {"B,N,H,D", "B,H,N,D", NULL};

void cli_params_finish(ra_params *p)
{
    if (p->exec.threads == 0)
        p->exec.threads = getenv("OMP_NUM_THREADS") ? omp_get_max_threads() : 1;
}

ra_strategy cli_choice_checked_as(const ra_params *p)
{
    return p->exec.ulysses_size ? RA_STRATEGY_HYBRID : RA_STRATEGY_RING;
}

ra_status cli_ulysses_check(const ra_params *p, const ra_shape *s, int P)
{
    const int64_t u = p->exec.ulysses_size;
    if (u == 0 || p->exec.strategy != RA_STRATEGY_HYBRID)
        return RA_OK; /* the plan checks what auto may pick */
    return hybrid_group_check(s, P, (int)u);
}

/* The name of a parameter in a message: the option, or the file's
 * attribute. */
static const char *param_name(char *buf, size_t len, const char *file,
                              const char *option, const char *attr)
{
    if (!file)
        return option;
    snprintf(buf, len, "%s: attribute %s", file, attr);
    return buf;
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

ra_status cli_params_check(const ra_params *p, const ra_shape *s,
                           const char *file)
{
    char name[512];
    const int64_t limit = (int64_t)1 << 40;
    ra_gemm env_gemm; /* --gemm auto (or none): RINGATTN_GEMM must name one */
    if (p->exec.gemm == RA_GEMM_AUTO && ra_gemm_env(&env_gemm) != RA_OK)
        return RA_ERR_ARG;
    ra_status st = strategy_named(p);
    if (st != RA_OK)
        return st;
    /* a file's record: values no option could have given (a NaN scale, a
     * window beyond the parser's range) mean a damaged file */
    if (file && p->num.score == RA_SCORE_DOT && !isfinite(p->num.scale))
        return ra_error_set(RA_ERR_INPUT, "%s: %g is not a finite number",
                            param_name(name, sizeof name, file, "--scale",
                                       "scale"),
                            p->num.scale);
    for (int side = 0; file && p->num.window && side < 2; side++) {
        const int64_t w = side ? p->num.window_right : p->num.window_left;
        if (w < 0 || w > limit)
            return ra_error_set(RA_ERR_INPUT, "%s: %lld is outside "
                                "[0, %lld]",
                                param_name(name, sizeof name, file,
                                           "--window",
                                           side ? "window_right"
                                                : "window_left"),
                                (long long)w, (long long)limit);
    }
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

/* n0 * n1 * n2 * n3 as a size_t count, or 0 (with a message) on overflow. */
static int count_of(size_t *out, int64_t n0, int64_t n1, int64_t n2,
                    int64_t n3)
{
    int64_t c = ra_mul_checked(ra_mul_checked(n0, n1), ra_mul_checked(n2, n3));
    if (c < 0 || n0 < 0 || n1 < 0 || n2 < 0 || n3 < 0)
        return -1;
    *out = (size_t)c;
    return 0;
}

/* The bytes one rank may allocate: limit when > 0 (--mem-limit), else
 * this node's physical memory shared evenly by the *on_node ranks of ctx
 * on it (*on_node 0: the limit was given). */
static int64_t mem_share(const cli_ctx *ctx, int64_t limit, int *on_node)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    *on_node = limit > 0 ? 0 : ctx->nodes.ranks_on_node > 0
                                   ? ctx->nodes.ranks_on_node : 1;
    if (limit > 0)
        return limit;
    return pages > 0 && page > 0
               ? (int64_t)((double)pages * (double)page / *on_node)
               : INT64_MAX;
}

ra_status cli_mem_check(const cli_ctx *ctx, int64_t need, int64_t limit,
                        const char *what)
{
    int on_node;
    const int64_t share = mem_share(ctx, limit, &on_node);
    if (need >= 0 && need <= share)
        return RA_OK;
    char why[160] = "--mem-limit";
    if (on_node)
        snprintf(why, sizeof why, "this node's physical memory shared by "
                 "its %d ranks", on_node);
    if (need < 0)
        return ra_error_set(RA_ERR_ARG, "shape: %s of rank %d need more "
                            "than 2^63 bytes", what, ctx->rank);
    return ra_error_set(RA_ERR_ARG, "shape: %s of rank %d need %lld bytes "
                        "(%.3g GB), more than the %lld bytes (%.3g GB) a rank "
                        "may use (%s)", what, ctx->rank, (long long)need,
                        (double)need * 1e-9, (long long)share,
                        (double)share * 1e-9, why);
}

/* The slices of rank and the element counts of cli_tensors in t (mem
 * NULL) and its bytes in *total; -1 when a count overflows. */
static int tensors_size(cli_tensors *t, const ra_shape *s, const ra_params *p,
                        int rank, int nranks, size_t *total)
{
    memset(t, 0, sizeof *t);
    t->qs = ra_params_slice(p, p->exec.layout, s->N, rank, nranks);
    t->ks = ra_params_slice(p, p->exec.layout, s->M, rank, nranks);
    const int64_t n = t->qs.count, m = t->ks.count;
    *total = 1; /* one spare element: empty slices still allocate */
    if (count_of(&t->nq, s->B, n, s->H, s->D) ||
        count_of(&t->nk, s->B, m, s->G, ra_shape_dk(s)) ||
        count_of(&t->nv, s->B, m, s->G, s->Dv) ||
        count_of(&t->no, s->B, n, s->H, s->Dv) ||
        count_of(&t->nl, s->B, s->H, n, 1) ||
        __builtin_add_overflow(*total, t->nq + t->nk, total) ||
        __builtin_add_overflow(*total, t->nv + t->no + t->nl, total) ||
        __builtin_mul_overflow(*total, sizeof(float), total) ||
        *total > INT64_MAX)
        return -1;
    return 0;
}

ra_numerics cli_numerics(const ra_params *p)
{
    ra_numerics num;
    ra_exec exec;
    ra_params_split(p, &num, &exec);
    return num;
}

ra_status cli_tensors_alloc(cli_tensors *t, const ra_shape *s,
                            const ra_params *p, const cli_ctx *ctx)
{
    size_t total;
    if (tensors_size(t, s, p, ctx->rank, ctx->nranks, &total))
        return ra_error_set(RA_ERR_ARG, "shape: the local tensors of rank %d "
                            "overflow the address space", ctx->rank);
    ra_status st =
        cli_mem_check(ctx, (int64_t)total, p->exec.mem_limit, CLI_TENSORS_WHAT);
    if (st != RA_OK)
        return st;
    if (!(t->mem = malloc(total)))
        return ra_error_set(RA_ERR_NOMEM, "cannot allocate the local tensors "
                            "(%.3g GB on rank %d)", (double)total * 1e-9,
                            ctx->rank);
    t->q = t->mem;
    t->k = t->q + t->nq;
    t->v = t->k + t->nk;
    t->o = t->v + t->nv;
    t->lse = t->o + t->no;
    return RA_OK;
}

void cli_tensors_free(cli_tensors *t)
{
    free(t->mem);
    memset(t, 0, sizeof *t);
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

static void print_score(const ra_shape *s, const ra_params *p)
{
    if (p->num.score == RA_SCORE_DOT)
        printf("# %-10s dot, scale %.9g%s\n", "score", ra_params_scale(p, s),
               isnan(p->num.scale) ? " (1/sqrt(D))" : "");
    else if (p->num.score == RA_SCORE_GAUSSIAN)
        printf("# %-10s gaussian, -||q - k||^2 / (2 sigma^2), sigma %.9g\n",
               "score", p->num.sigma);
    else
        printf("# %-10s additive, w_v . tanh(W_q q + W_k k), A = %lld\n",
               "score", (long long)(p->num.additive ? p->num.additive->A : 0));
}

void cli_print_params(const cli_ctx *ctx, const ra_shape *s,
                      const ra_params *p, int layout_auto, const char *in,
                      const char *out)
{
    if (ctx->rank != 0)
        return;
    int64_t bq, bkv;
    ra_params_tiles(p, s, &bq, &bkv);
    printf("# ringattn %s\n", RA_VERSION_STRING);
    if (in)
        printf("# %-10s %s\n", "input", in);
    if (out)
        printf("# %-10s %s\n", "output", out);
    printf("# %-10s B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld\n",
           "shape", (long long)s->B, (long long)s->N, (long long)s->M,
           (long long)s->H, (long long)s->G, (long long)s->D,
           (long long)s->Dv);
    const int seq = p->num.align == RA_ALIGN_SEQUENCE;
    printf("# %-10s %s\n", "causal",
           !p->num.causal ? "no"
           : seq          ? "yes (j <= i')"
                          : "yes (j <= i + M - N)");
    if (seq)
        printf("# %-10s i' = i + kv_len - q_len per sequence (or segment)\n",
               "align");
    if (p->num.rope != RA_ROPE_NONE)
        printf("# %-10s %s pairs, base %g\n", "rope", ra_rope_name(p->num.rope),
               p->num.rope_base);
    if (p->num.alibi)
        printf("# %-10s %s slopes\n", "alibi",
               p->num.alibi_slopes ? "/alibi_slopes" : "standard");
    if (p->num.window)
        printf("# %-10s i' - %lld <= j <= i' + %lld%s\n", "window",
               (long long)p->num.window_left, (long long)p->num.window_right,
               seq ? "" : " (i' = i + M - N)");
    print_score(s, p);
    printf("# %-10s %s%s\n", "layout", ra_layout_name(p->exec.layout),
           layout_auto ? " (auto)" : "");
    printf("# %-10s %s\n", "strategy", ra_strategy_name(p->exec.strategy));
    printf("# %-10s %s, K/V as %s between ranks\n", "precision",
           ra_precision_name(p->num.precision),
           ra_params_wire_bf16(p) ? "bf16" : "fp32");
    printf("# %-10s %s\n", "gemm", ra_gemm_name(ra_gemm_pick(p->exec.gemm)));
    const char *rule =
        p->num.window && p->num.window_left + p->num.window_right + 1 <=
                             RA_WINDOW_TILE_SPAN
            ? "window rule"
            : "default for D";
    printf("# %-10s %lld x %lld (queries: %s, keys: %s)\n", "tiles",
           (long long)bq, (long long)bkv, p->exec.block_q ? "--block-q" : rule,
           p->exec.block_kv ? "--block-kv" : rule);
    printf("# %-10s %d\n", "ranks", ctx->nranks);
    cli_print_job(ctx, 10);
    printf("# %-10s %d per rank\n", "threads", ra_params_threads(p));
    fflush(stdout);
}

void cli_print_source(const cli_ctx *ctx, const ra_h5_source *src,
                      const ra_axes used[3])
{
    if (ctx->rank != 0)
        return;
    const char *names[3] = {src->q ? src->q : "/q", src->k ? src->k : "/k",
                            src->v ? src->v : "/v"};
    printf("# %-10s %s (%s), %s (%s), %s (%s)\n", "inputs", names[0],
           ra_axes_name(used[0]), names[1], ra_axes_name(used[1]), names[2],
           ra_axes_name(used[2]));
    printf("# %-10s %s (datasets without an axes attribute)\n",
           "qkv-layout", h5io_qkv_layout_name(src->axes));
    fflush(stdout);
}
