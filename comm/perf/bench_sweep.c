/* bench_sweep.c: the configurations of `ringattn bench` measured in
 * order (bench_sweep.h). */
#include <stdlib.h>

#include "agree.h"
#include "bench_sweep.h"
#include "call.h"
#include "model.h"
#include "score_features.h"

void bench_run_yardsticks(MPI_Comm comm, const ra_params *p, int skip,
                          bench_yard *y)
{
    bench_yardsticks(comm, ra_params_threads(p),
                     p->num.precision == RA_PRECISION_BF16, skip, y);
}

ra_shape bench_sweep_shape(const bench_sweep *w, int i)
{
    ra_shape s = w->shape;
    s.N = w->seqs[i];
    if (!w->seq_kv_fixed)
        s.M = s.N;
    return s;
}

ra_status bench_logits_make(MPI_Comm comm, const bench_sweep *w, int64_t A,
                            ra_params *p, bench_logits *m)
{
    ra_status st = w->sinks ? bench_sinks_make(comm, w->gen.seed,
                                               w->shape.H, &m->sinks)
                            : RA_OK;
    p->num.sinks = m->sinks;
    if (st != RA_OK || p->num.score != RA_SCORE_ADDITIVE)
        return st;
    st = bench_additive_make(comm, w->gen.seed, A, w->shape.D,
                             &m->additive_mem, &m->additive);
    p->num.additive = &m->additive;
    return st;
}

void bench_logits_free(bench_logits *m)
{
    free(m->sinks);
    free(m->additive_mem);
}

ra_status bench_sweep_plan(const plan_job *j, bench_sweep *w, FILE *err)
{
    ra_status st = RA_OK;
    for (int i = 0; i < w->nseq && st == RA_OK && w->which != BENCH_ALL;
         i++) {
        const ra_shape s = bench_sweep_shape(w, i);
        ra_params p = *w->gen.p;
        model_result pick;
        int unusable = 0;
        if (w->which == BENCH_AUTO &&
            (st = plan_job_pick(j, &s, &p, NULL, w->profile, &pick,
                                &unusable)) == RA_OK) {
            w->picked[i] = (int)pick.strategy;
            w->predicted[i] = pick.t_total;
        }
        if (unusable && err)
            plan_auto_warning(err);
        if (st == RA_OK)
            st = ra_call_strategy_check(j->comm, &s, &p,
                                        w->gen.segment_avg > 0);
    }
    return st;
}

ra_status bench_naive_check(const bench_sweep *w)
{
    const ra_params *p = w->gen.p;
    const ra_score_feature *f = ra_features_first(&p->num);
    const char *opt = p->exec.layout != RA_LAYOUT_CONTIGUOUS  ? "--layout"
                      : p->num.window                         ? "--window"
                      : w->gen.lens                           ? "--lens"
                      : w->gen.segment_avg                    ? "--segments"
                      : p->num.score != RA_SCORE_DOT          ? "--score"
                      : p->num.precision != RA_PRECISION_FP32 ? "--precision"
                      : p->exec.wire == RA_WIRE_BF16          ? "--wire"
                      : p->num.rope != RA_ROPE_NONE           ? "--rope"
                      : p->num.alibi                          ? "--alibi"
                      : f                                     ? f->option
                      : w->sinks                              ? "--sinks"
                                                              : NULL;
    if (!opt)
        return RA_OK;
    return ra_error_set(RA_ERR_ARG, "%s: --mode naive/both runs the "
                        "materialising baseline, which takes the contiguous "
                        "layout, the dot score in fp32 and causal masks "
                        "only (use --mode ring)", opt);
}

/* Rows k of a length: each strategy k < RA_STRATEGY_COUNT, then the
 * baseline k == RA_STRATEGY_COUNT. */
int bench_sweep_rows(const bench_sweep *w)
{
    return (1 + RA_STRATEGY_COUNT) * w->nseq;
}

/* Whether row k of length i (problem s on P ranks) runs, under the
 * parameters *one. */
static int config_runs(const bench_sweep *w, int i, int k, const ra_shape *s,
                       int P, ra_params *one)
{
    const int naive = k == RA_STRATEGY_COUNT;
    *one = *w->gen.p;
    if (naive)
        return w->naive;
    if (w->which == BENCH_ALL)
        model_use_strategy(one, (ra_strategy)k);
    if (w->which == BENCH_AUTO)
        model_use_strategy(one, (ra_strategy)w->picked[i]);
    if (!w->ring)
        return 0;
    return w->which == BENCH_ALL ? bench_strategy_applies(one, s, P) : k == 0;
}

/* One configuration on operands of w->ops (comm/perf/bench_run.c), and
 * the plain one beside into *plain; plain NULL: the baseline's row. */
static ra_status config_run(MPI_Comm comm, const bench_sweep *w,
                            const ra_shape *s, const ra_params *one,
                            const bench_yard *yard, bench_result *row,
                            bench_result *plain)
{
    bench_operands x = {0};
    bench_gen gen = w->gen;
    gen.p = one;
    const bench_config c = {s, gen, w->warmup, w->reps, !plain, 0,
                            w->no_yardsticks, yard, w->place, plain};
    ra_status st = ra_agree(comm, w->ops.alloc(w->ops.arg, s, one, &x));
    if (st == RA_OK)
        st = bench_config_run(comm, &c, &x, row);
    w->ops.release(w->ops.arg);
    return st;
}

/* A row as it comes: with score features or sinks, the rate of the same
 * configuration without them beside; under BENCH_AUTO, the prediction of
 * length i beside the time. */
static void row_print(FILE *out, const bench_sweep *w, int i,
                      const ra_params *one, const bench_result *r,
                      const bench_result *plain)
{
    const ra_score_feature *f = ra_features_first(&one->num);
    bench_print_row(out, r);
    if (plain && (f || one->num.sinks))
        fprintf(out, "# plain: %s N=%lld %.1f GFLOP/s; with %s%s %.1f "
                "GFLOP/s (%.2f of plain)%s\n", r->mode, (long long)r->s.N,
                plain->gflops, f ? f->name : "",
                one->num.sinks ? " sinks" : "", r->gflops,
                r->gflops / plain->gflops, plain->pass ? "" : ", plain FAIL");
    if (plain && w->which == BENCH_AUTO && w->predicted[i] > 0)
        fprintf(out, "# plan: %s predicted %.4f s, measured %.4f s "
                "(measured/predicted %.2f)\n", r->mode, w->predicted[i],
                r->seconds_median, r->seconds_median / w->predicted[i]);
}

ra_status bench_sweep_run(MPI_Comm comm, const bench_sweep *w,
                          const bench_yard *yard, FILE *out,
                          bench_result *rows, int *nrows)
{
    int P;
    MPI_Comm_size(comm, &P);
    ra_status st = RA_OK;
    for (int i = 0; i < w->nseq && st == RA_OK; i++) {
        const ra_shape s = bench_sweep_shape(w, i);
        for (int k = 0; k <= RA_STRATEGY_COUNT && st == RA_OK; k++) {
            ra_params one;
            bench_result plain;
            const int naive = k == RA_STRATEGY_COUNT;
            if (!config_runs(w, i, k, &s, P, &one))
                continue;
            st = config_run(comm, w, &s, &one, yard, &rows[*nrows],
                            naive ? NULL : &plain);
            if (st == RA_OK && out)
                row_print(out, w, i, &one, &rows[*nrows],
                          naive ? NULL : &plain);
            *nrows += st == RA_OK;
        }
    }
    return st;
}
