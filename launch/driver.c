/* driver.c: the phases around the pass drivers, the parameter table they
 * print, and the one driver of a pass from files (cli_pass_main). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "call.h"
#include "driver.h"
#include "gemm_env.h"
#include "internal.h"
#include "placement.h"
#include "plan.h"
#include "progress.h"
#include "watchdog.h"

void cli_pass_data_free(cli_pass_data *d)
{
    cli_tensors_free(&d->t);
    free(d->g.mem);
    d->g = (cli_grads){0};
    h5io_additive_free(&d->score_in);
}

void cli_pass_layout(cli_pass_data *d, ra_params *p, int segmented)
{
    d->layout_auto = p->exec.layout == RA_LAYOUT_AUTO;
    p->exec.layout = ra_params_layout(p, segmented);
}

ra_status cli_grads_alloc(cli_pass_data *d, int64_t A, const char *command,
                          const cli_ctx *ctx, int64_t limit)
{
    const h5io_mem m = {ctx->rank, limit, ctx->nodes.ranks_on_node};
    return h5io_grads_alloc(&d->g, &d->s, &d->t, A, &m, command);
}

void cli_pass_ctx(const cli_ctx *ctx, h5io_pass_req *rq, h5io_pass_kind kind,
                  const ra_params *p)
{
    rq->comm = ctx->comm;
    rq->rank = ctx->rank;
    rq->nranks = ctx->nranks;
    rq->mem = (h5io_mem){ctx->rank, p->exec.mem_limit,
                         ctx->nodes.ranks_on_node};
    rq->tuning = &ctx->tuning;
    rq->command_line = ctx->command_line;
    rq->kind = kind;
}

/* d->profile, when given, read as a prediction would read it: a file that
 * cannot be read is refused, never silently replaced by the built-in
 * profile. */
static ra_status pass_profile_check(const cli_pass_data *d)
{
    if (!d->profile)
        return RA_OK;
    ra_profile *pf = malloc(sizeof *pf);
    ra_status st = pf ? profile_load(d->profile, pf)
                      : ra_error_set(RA_ERR_NOMEM, "--profile: out of memory");
    free(pf);
    return st;
}

ra_status cli_pass_inputs(const cli_ctx *ctx, cli_pass_data *d, h5io_pass *j,
                          ra_params *p, ra_status mine)
{
    ra_status st = cli_options_check(p);
    if (st == RA_OK)
        st = pass_profile_check(d);
    if (st == RA_OK)
        st = mine;
    st = ra_agree(ctx->comm, st);
    return st == RA_OK ? h5io_pass_inputs(j, p) : st;
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

/* The parameter table of a pass from rank 0, '#'-commented; p->layout is
 * the resolved one, layout_auto says it was chosen. */
static void print_params(const cli_ctx *ctx, const ra_shape *s,
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

/* Seconds a rank may spend moving its share of the tensors at the
 * slowest file system rate the watchdog allows (CLI_IO_FLOOR bytes/s). */
#define CLI_IO_FLOOR 20e6
static double pass_io_seconds(const cli_ctx *ctx, const ra_shape *s)
{
    const double floats = (double)s->B * ((double)s->N * s->H * (s->D + s->Dv) +
                                          (double)s->M * s->G *
                                              (ra_shape_dk(s) + s->Dv));
    return 4.0 * floats / ctx->nranks / CLI_IO_FLOOR;
}

/* The backward kernel's rate against the forward's, on top of its FLOPs
 * (docs/PERFORMANCE.md: five tile products to two, at a lower share of the
 * peak): a bound, not an estimate. */
#define CLI_BWD_RATE_LOSS 1.5

/* The step and tile callbacks of a driver without progress lines: each
 * step of the pass, and each tick between a forward's tiles, is a sign of
 * progress for the phase watchdog. */
static void pass_beat(void *ctx, int done, int total)
{
    (void)ctx;
    (void)done;
    (void)total;
    cli_watchdog_beat();
}

static void pass_tick(void *ctx, double share)
{
    (void)ctx;
    (void)share;
    cli_watchdog_beat();
}

cli_stall_basis cli_pass_basis(const ra_shape *s, const ra_params *p,
                               int nranks, double forward_s, int backward,
                               const char *profile)
{
    const double ff = ra_params_forward_flops(s, p, NULL);
    const double bf = ra_params_backward_flops(s, p, NULL);
    const double ratio = !backward ? 1.0
                         : CLI_BWD_RATE_LOSS * (ff > 0 ? bf / ff : 2.5);
    return (cli_stall_basis){backward ? "backward" : "forward",
                             forward_s * ratio, ra_call_steps(p, nranks),
                             profile};
}

/* The stall timeout of the pass: the one given, or one derived from the
 * predicted time of the pass that runs (the backward's when there is
 * one), from the run's profile; then the phase watchdog on the pass, which
 * beats at every step. Collective (the prediction). */
static void pass_watch(const cli_ctx *ctx, cli_pass_data *d, ra_params *p)
{
    const double fwd_s = progress_predict(ctx, &d->s, p, d->profile);
    const cli_stall_basis basis = cli_pass_basis(&d->s, p, ctx->nranks, fwd_s,
                                                 d->backward, d->profile);
    p->exec.stall_timeout =
        cli_stall_timeout(d->stall_given, &basis, d->stall_how,
                          sizeof d->stall_how);
    if (!p->exec.on_step) {
        p->exec.on_step = pass_beat;
        p->exec.on_tick = pass_tick;
        p->exec.on_step_ctx = NULL;
    }
    cli_watchdog_explain(d->stall_how);
    /* twice the library's timeout: its own watchdog, which names the
     * step and the peer, speaks first when it can */
    cli_watchdog_phase(ctx,
                       d->backward ? "the pass (set-up, read, backward)"
                                   : "the pass (set-up, read, "
                                     "attention)",
                       2.0 * p->exec.stall_timeout,
                       pass_io_seconds(ctx, &d->s));
}

/* Seconds the set-up may take when no timeout is given: reading the
 * shape, agreeing, allocating, on a loaded machine. */
#define CLI_SETUP_SECONDS 60.0

void cli_pass_begin(const cli_ctx *ctx, cli_pass_data *d, ra_params *p)
{
    d->stall_given = p->exec.stall_timeout; /* NaN: not given */
    if (isnan(p->exec.stall_timeout))       /* until cli_pass_echo derives it */
        p->exec.stall_timeout = RA_STALL_TIMEOUT_DEFAULT;
    cli_watchdog_phase(ctx, "the set-up",
                       isnan(d->stall_given) ? CLI_SETUP_SECONDS
                                             : d->stall_given, 0.0);
}

void cli_pass_echo(const cli_ctx *ctx, cli_pass_data *d, ra_params *p)
{
    pass_watch(ctx, d, p);
    cli_placement_warn(ctx, ra_params_threads(p));
    print_params(ctx, &d->s, p, d->layout_auto, d->in, d->out);
    if (ctx->rank == 0)
        printf("# %-10s %.3g s without progress ends the job (%s)\n", "stall",
               p->exec.stall_timeout, d->stall_how);
}

void cli_pass_stalled(const cli_ctx *ctx, const cli_pass_data *d)
{
    char line[1600];
    snprintf(line, sizeof line, "%s; the timeout: %s", ra_error_message(),
             d->stall_how);
    cli_abort(ctx, line);
}

void cli_pass_writing(const cli_ctx *ctx, const cli_pass_data *d,
                      const ra_params *p)
{
    cli_watchdog_phase(ctx, "the write of the output", p->exec.stall_timeout,
                       pass_io_seconds(ctx, &d->s));
}

int cli_pass_end(const cli_ctx *ctx, cli_pass_data *d, ra_status st)
{
    cli_watchdog_phase(ctx, NULL, 0.0, 0.0);
    cli_pass_data_free(d);
    return st == RA_OK ? CLI_EXIT_OK : cli_fail_status(ctx, st);
}

/* The read, the checkpoint armed, the call and the output; a stalled ring
 * ends the job (the others wait for a stopped rank). */
static ra_status pass_compute(const cli_ctx *ctx, cli_pass *r,
                              const ra_params *p)
{
    const double t0 = MPI_Wtime();
    ra_status st = h5io_pass_read(&r->j, p);
    if (st != RA_OK && r->j.bad.dataset &&
        r->j.rq.kind == H5IO_PASS_FORWARD) {
        char why[512];
        snprintf(why, sizeof why, "%s", ra_error_message());
        st = ra_error_set(st, "%s; pass --allow-nonfinite to let it through",
                          why);
    }
    if (st == RA_OK)
        st = h5io_resume_arm(&r->ckpt, r->j.fingerprint);
    r->t_read = MPI_Wtime() - t0;
    progress_start(p);
    if (st == RA_OK && (st = h5io_pass_call(&r->j, p)) != RA_OK &&
        r->j.stalled)
        cli_pass_stalled(ctx, &r->d);
    r->t_total = MPI_Wtime() - t0;
    return st;
}

int cli_pass_main(const cli_ctx *ctx, const cli_pass_driver *drv, void *opts,
                  ra_params *p, cli_pass *r, int argc, char **argv)
{
    const int code = cli_parse_pass(ctx, drv->spec, opts, p, argc, argv);
    if (code >= 0)
        return code;
    cli_pass_begin(ctx, &r->d, p);
    ra_status st = drv->validate(ctx, opts, r);
    r->d.in = r->j.rq.in;
    r->d.out = r->j.rq.out;
    if (st == RA_OK)
        st = h5io_pass_setup(&r->j, p);
    r->d.s = r->j.s;
    r->d.layout_auto = r->j.layout_auto;
    if (st == RA_OK)
        st = h5io_resume_key(&r->ckpt, &r->j.s, p, &r->j.masks.view, 0);
    if (st == RA_OK) {
        cli_pass_echo(ctx, &r->d, p);
        st = drv->print ? drv->print(ctx, opts, r) : RA_OK;
    }
    if (st == RA_OK)
        st = pass_compute(ctx, r, p);
    cli_pass_writing(ctx, &r->d, p);
    if (st == RA_OK)
        st = drv->report(ctx, opts, r);
    st = cli_ckpt_end(&r->ckpt, st);
    h5io_pass_free(&r->j);
    return cli_pass_end(ctx, &r->d, st);
}
