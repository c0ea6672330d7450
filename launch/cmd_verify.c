/* cmd_verify.c: `ringattn verify` and `verify --backward`: their options,
 * the recorded parameters read into the check (the same setup of scores,
 * ALiBi slopes and sinks as run), the predicted cost and the verdict
 * printed, the exit code. The checks themselves are the library's
 * (io/verify.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "cli.h"
#include "verify.h"

static const cli_spec verify_spec = {
    .name = "verify",
    .usage =
    "usage: [mpirun -np P] ringattn verify --in IN.h5 --out OUT.h5 [options]\n"
    "\n"
    "Recomputes attention in fp64 for the query rows of OUT.h5 (all of them\n"
    "when that costs under 2^32 multiply-adds, else a random sample of 256\n"
    "rows) with the causal flag, window, score, scale, RoPE and ALiBi\n"
    "recorded in OUT.h5 and the mask datasets of IN.h5 (lens, segments), and\n"
    "compares /o and /lse. Under mpirun each rank checks a share of the rows\n"
    "(blocked fp64 BLAS over key blocks); the check's predicted cost is\n"
    "printed before it starts. The recorded parameters and the\n"
    "masks are checked as run checks them. Outputs of run --mha (/y) and of\n"
    "modes it does not know are refused by name.\n"
    "Exit 0 when the relative error ||o - ref|| / ||ref|| and the LSE error\n"
    "max |lse - ref| / max(1, |ref|) are both below the tolerance, there is\n"
    "no bad row and no value of /o or /lse is NaN (every row is scanned for\n"
    "NaN, sampled or not), 1 if not. A wrong row outside the sample is found\n"
    "with the chance it is sampled, K / (B N).\n"
    "\n"
    "bad rows: the checked (row, head) pairs whose /lse is -inf, +inf or NaN\n"
    "where the reference is finite, or not -inf where the reference is -inf\n"
    "(the row sees no key), plus the entries of /o that are NaN where the\n"
    "reference is a number. Any bad row fails the check, whatever the errors.\n",
    .groups = {{cli_check_opts, 0}},
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

/* verify --backward's options: the shared ones and --independent. */
typedef struct {
    cli_check c;
    int independent;
} vb_args;

static const cli_opt vb_own[] = {
    CLI_OPT_FLAG(vb_args, "--independent", independent,
                 "rows' LSE, Drow from fp64, not the recorded forward"),
    {0},
};

static const cli_spec vb_spec = {
    .name = "verify --backward",
    .usage =
    "usage: [mpirun -np P] ringattn verify --backward --in IN.h5 --out G.h5\n"
    "                          [--sample K | --all] [--independent]\n"
    "\n"
    "Recomputes dq, dk, dv in fp64 with the rules G.h5 records and the\n"
    "masks, /additive weights and /alibi_slopes of IN.h5, and compares the\n"
    "sampled rows (default 256 query rows and 256 keys; for the additive\n"
    "score /dw_q, /dw_k, /dw_v whole, with sinks /dsinks whole): exit 0 when\n"
    "every relative error ||g - ref|| / ||ref|| is below the tolerance and\n"
    "no checked value is NaN or infinite. The predicted cost is printed\n"
    "before the check starts.\n"
    "By default the rows' LSE and Drow = do . o are those of the forward the\n"
    "gradients were computed from (run --backward --fwd FILE, or the /o and\n"
    "/lse --recompute wrote into G.h5), itself checked in fp64 at the\n"
    "sampled query rows; the check costs the samples' pairs, about K / N of\n"
    "the backward. A wrong gradient entry is found with the chance its row\n"
    "is sampled: K / (B N) for dq, K / (B M) for dk and dv; a wrong forward\n"
    "row with K / (B N) (unsampled, the gradients are judged against it).\n"
    "--independent (and --all) recompute every row's statistics in fp64\n"
    "instead: the cost of one fp64 forward, independent of that forward.\n"
    "The additive score is checked independently, in units of every pair.\n",
    .groups = {{cli_check_opts, 0}, {vb_own, 0}},
    .globals = CLI_GLOBAL_RING | CLI_GLOBAL_FILES,
};

/* What the recorded parameters own: the score's weights, the ALiBi slopes
 * and the sinks read from the input. */
typedef struct {
    h5io_additive weights;
    double *slopes;
    float *sinks;
} held;

static void held_free(held *h)
{
    h5io_additive_free(&h->weights);
    free(h->slopes);
    free(h->sinks);
}

/* RoPE, ALiBi, score features and sinks as the output records them; the
 * slopes and sinks from the input when the run took them from there. */
static ra_status recorded_posenc(verify_job *j, held *h)
{
    const h5io_run_attrs *r = &j->v.run;
    const char *in = j->rq.in, *out = j->rq.out;
    ra_params *p = &j->v.p;
    if (ra_rope_parse(r->rope, &p->num.rope) != RA_OK)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute rope: unknown "
                            "pairing '%s'", out, r->rope);
    const ra_align aligns[] = {RA_ALIGN_TENSOR, RA_ALIGN_SEQUENCE};
    int known = 0;
    for (int i = 0; i < 2; i++)
        if (strcmp(r->align, ra_align_name(aligns[i])) == 0) {
            p->num.align = aligns[i];
            known = 1;
        }
    if (!known)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute align: unknown "
                            "alignment '%s' (expected %s or %s)", out,
                            r->align, ra_align_name(aligns[0]),
                            ra_align_name(aligns[1]));
    p->num.rope_base = r->rope_base;
    p->num.alibi = r->alibi;
    ra_features_copy(&p->num, &r->features);
    ra_status st = h5io_sinks_read(in, r->sinks_dataset[0] ? r->sinks_dataset
                                                          : NULL,
                                   &j->s, p, &h->sinks);
    if (st == RA_OK)
        st = h5io_alibi_read(in, &j->s, p, &h->slopes);
    if (st == RA_OK && p->num.alibi &&
        (strcmp(r->alibi_slopes, "/alibi_slopes") == 0) !=
            !!p->num.alibi_slopes)
        st = ra_error_set(RA_ERR_INPUT, "%s: attribute alibi_slopes: the run "
                          "used %s slopes, but %s %s /alibi_slopes", out,
                          r->alibi_slopes, in,
                          p->num.alibi_slopes ? "has" : "has no");
    return st;
}

/* The run's parameters as the output records them, checked as run checks
 * its options, and the score's inputs. Not collective. */
static ra_status recorded_params(verify_job *j, held *h)
{
    const h5io_run_attrs *r = &j->v.run;
    ra_params *p = &j->v.p;
    ra_params_default(p);
    p->num.causal = r->causal;
    p->num.window = r->window;
    p->num.window_left = r->window_left;
    p->num.window_right = r->window_right;
    p->num.scale = r->scale;
    p->num.sigma = r->sigma;
    if (ra_score_parse(r->score, &p->num.score) != RA_OK)
        return ra_error_set(RA_ERR_INPUT, "%s: attribute score: unknown score "
                            "'%s'", j->rq.out, r->score);
    ra_status st = recorded_posenc(j, h);
    if (st == RA_OK)
        st = h5io_score_dims(j->rq.in, &j->s, p);
    if (st == RA_OK)
        st = cli_params_check(p, &j->s, j->rq.out);
    return st == RA_OK ? h5io_additive_read(j->rq.in, &j->s, p, &h->weights)
                       : st;
}

/* Rank 0 prints the check's predicted cost. */
static void print_cost(const verify_req *rq, const verify_cost *c)
{
    if (((const cli_ctx *)rq->user)->rank != 0)
        return;
    printf("# %s: predicted cost per rank %.3g fp64 multiply-adds and %.3g "
           "exp, about %.2f CPU s at the %.2f G multiply-adds/s and %.2f G "
           "exp/s this core measures now\n", c->what, c->madds, c->exps,
           c->seconds, c->madd_rate * 1e-9, c->exp_rate * 1e-9);
    fflush(stdout);
}

/* Opens the check of o and reads its recorded parameters. Collective. */
static ra_status check_open(const cli_ctx *ctx, const cli_check *o,
                            int backward, int independent, verify_job *j,
                            held *h)
{
    const verify_req rq = {ctx->comm, o->in, o->out, &ctx->tuning,
                           o->sample, o->all, independent,
                           (uint64_t)o->seed, o->tol, o->precision_set,
                           (ra_precision)o->precision, print_cost,
                           (void *)ctx};
    ra_status st = verify_open(&rq, backward, j);
    return st == RA_OK ? ra_agree(ctx->comm, recorded_params(j, h)) : st;
}

static int fwd_report(const cli_ctx *ctx, const verify_job *j,
                      const verify_fwd_result *r)
{
    const h5io_run_attrs *run = &j->v.run;
    const int gauss = j->v.p.num.score == RA_SCORE_GAUSSIAN;
    if (ctx->rank == 0)
        printf("ringattn verify: %s: %lld rows x %lld heads (%s), causal %s, "
               "window %s, masks %s, score %s, %s %.6g, rope %s, alibi %s: "
               "max abs err %.3e, rel err %.3e, lse err %.3e, bad rows %.0f, "
               "NaN values in all rows %.0f, tolerance %.1e%s, on o %.1e "
               "(precision %s, K/V %s): %s\n",
               j->rq.out, (long long)r->rows, (long long)j->s.H,
               r->rows == j->s.B * j->s.N ? "all" : "sampled",
               run->causal ? "yes" : "no", run->window ? "yes" : "no",
               run->masks[0] ? run->masks : "none", run->score,
               gauss ? "sigma" : "scale", gauss ? run->sigma : run->scale,
               run->rope, run->alibi ? run->alibi_slopes : "no",
               r->err.max_abs_o, r->err.rel_o, r->err.max_lse,
               (double)r->err.bad_inf, r->nans, r->tol,
               r->rounding ? " (the rounding of a 16-bit /o)" : "", r->tol_o,
               ra_precision_name(j->v.p.num.precision),
               j->v.round_kv ? "rounded to bf16" : "fp32",
               r->pass ? "PASS" : "FAIL");
    return r->pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}

int cmd_verify(const cli_ctx *ctx, int argc, char **argv)
{
    cli_check o;
    int code = cli_check_parse(ctx, &verify_spec, &o, argc, argv);
    if (code >= 0)
        return code;
    verify_job j;
    held h = {0};
    verify_fwd_result r;
    ra_status st = check_open(ctx, &o, 0, 0, &j, &h);
    if (st == RA_OK)
        st = verify_forward(&j, &r);
    code = st == RA_OK ? fwd_report(ctx, &j, &r) : cli_fail_status(ctx, st);
    verify_close(&j);
    held_free(&h);
    return code;
}

static int bwd_report(const cli_ctx *ctx, const verify_job *j,
                      const verify_bwd_result *r)
{
    const h5io_run_attrs *run = &j->v.run;
    char more[80] = "", fwd[400] = "";
    if (r->has[VERIFY_DW])
        snprintf(more, sizeof more, ", weights %.3e", r->err[VERIFY_DW]);
    if (r->has[VERIFY_DSINKS])
        snprintf(more + strlen(more), sizeof more - strlen(more),
                 ", dsinks %.3e", r->err[VERIFY_DSINKS]);
    if (r->forward[0])
        snprintf(fwd, sizeof fwd, "; recorded forward %s at %lld rows: rel "
                 "err %.3e, lse err %.3e, bad rows %.0f", r->forward,
                 (long long)r->fwd.rows, r->fwd.err.rel_o, r->fwd.err.max_lse,
                 (double)r->fwd.err.bad_inf);
    if (ctx->rank == 0)
        printf("ringattn verify --backward: %s: %s rows, causal %s, window "
               "%s, masks %s, score %s, rope %s, alibi %s: rel err dq %.3e, "
               "dk %.3e, dv %.3e%s, non-finite %.0f, tolerance %.1e%s: %s\n",
               j->rq.out, j->rq.all ? "all" : "sampled",
               run->causal ? "yes" : "no", run->window ? "yes" : "no",
               run->masks[0] ? run->masks : "none", run->score, run->rope,
               run->alibi ? "yes" : "no", r->err[VERIFY_DQ],
               r->err[VERIFY_DK], r->err[VERIFY_DV], more, r->nonfinite,
               j->rq.tol, fwd, r->pass ? "PASS" : "FAIL");
    return r->pass ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
}

int cmd_verify_backward(const cli_ctx *ctx, int argc, char **argv)
{
    vb_args a = {0};
    int code = cli_check_parse(ctx, &vb_spec, &a.c, argc, argv);
    if (code >= 0)
        return code;
    verify_job j;
    held h = {0};
    verify_bwd_result r;
    ra_status st = check_open(ctx, &a.c, 1, a.independent, &j, &h);
    if (st == RA_OK)
        st = verify_backward(&j, &r);
    code = st == RA_OK ? bwd_report(ctx, &j, &r) : cli_fail_status(ctx, st);
    verify_close(&j);
    held_free(&h);
    return code;
}
