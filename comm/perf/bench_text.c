/* bench_text.c: the text `ringattn bench` and `ringattn bench --backward`
 * print (bench_sweep.h): the echo of a run, its yardsticks, the table's
 * header and rows, and what the columns mean; their JSON and CSV are
 * bench_rows.c's. */
#include "bench_sweep.h"
#include "gemm_env.h"
#include "score_features.h"
#include "simd.h"

const char bench_columns[] =
    "Columns: time_s, the median over reps of the slowest rank (rank_min/max:\n"
    "each rank's median); busy, tbusy: slowest over fastest compute time of\n"
    "the ranks, of a rank's threads; GFLOP/s of the useful FLOPs (2(D+Dv) per\n"
    "visible pair); sgemm: all ranks' 2048^3 OpenBLAS sgemm, ratio = GFLOP/s\n"
    "/ sgemm; peak: all ranks' 2048^3 oneDNN matmul in the run's precision\n"
    "(n/a without oneDNN), f_peak = GFLOP/s / peak; core: all ranks' and\n"
    "threads' physical peak from a register-resident loop of the instruction\n"
    "the tile products use, f_core = GFLOP/s / core; prod: the same tile\n"
    "products the call issues, timed without the softmax, f_prod = GFLOP/s /\n"
    "prod;\n"
    "wait%: exposed transfer time; MB_sent (busiest rank), MB_xnode (to other\n"
    "nodes), MB_xn_all (summed); ring_GB/s: a comm-only ring; rss_MB, model_MB:\n"
    "peak and modelled memory; rel_err of the fp64-checked rows, PASS within\n"
    "verify's --tol. Scores, strategies and layouts: ringattn run --help.\n";

void bench_print_yard(FILE *out, const bench_yard *y)
{
    if (y->skipped) {
        fprintf(out, "# %-12s %s\n", "yardsticks", y->impl);
        return;
    }
    fprintf(out, "# %-12s %d^3 OpenBLAS sgemm on every rank at once: %.1f "
            "GFLOP/s in all\n", "sgemm", SGEMM_N, y->sgemm);
    if (y->peak > 0)
        fprintf(out, "# %-12s %d^3 oneDNN matmul %s (%s) on every rank at "
                "once: %.1f GFLOP/s in all\n", "peak", SGEMM_N,
                y->bf16 ? "bf16 x bf16 -> fp32" : "fp32", y->impl, y->peak);
    else
        fprintf(out, "# %-12s n/a: %s\n", "peak", y->impl);
    if (y->core > 0)
        fprintf(out, "# %-12s %s loop on every rank at once: %.1f GFLOP/s in "
                "all\n", "core", y->loop, y->core);
    else
        fprintf(out, "# %-12s %s\n", "core", y->loop);
    fprintf(out, "# %-12s the call's own tile products without the softmax, "
            "one thread per rank at once (column prod)\n", "products");
}

void bench_print_header(FILE *out)
{
    fprintf(out, "#%7s %7s %2s %2s %9s %9s %9s %9s %5s %5s %8s %8s %6s %8s "
                 "%6s %6s %9s %9s %9s %8s %8s %8s %9s %7s %8s %6s %8s %6s\n",
            "N", "M", "P", "T", "mode", "time_s", "rank_min", "rank_max",
            "busy", "tbusy", "GFLOP/s", "sgemm", "ratio", "peak", "f_peak",
            "wait%", "MB_sent", "MB_xnode", "MB_xn_all", "ring_GB/s",
            "rss_MB", "model_MB", "rel_err", "verdict", "core", "f_core",
            "prod", "f_prod");
}

void bench_print_row(FILE *out, const bench_result *r)
{
    char sgemm[16], ratio[16], peak[16], frac[16];
    char core[16], f_core[16], prod[16], f_prod[16];
    bench_yard_cells(r->gflops, r->sgemm_gflops, sgemm, ratio);
    bench_yard_cells(r->gflops, r->peak_gflops, peak, frac);
    bench_yard_cells(r->gflops, r->core_gflops, core, f_core);
    bench_yard_cells(r->gflops, r->products_gflops, prod, f_prod);
    fprintf(out, " %7lld %7lld %2d %2d %9s %9.4f %9.4f %9.4f %5.2f %5.2f %8.1f "
                 "%8s %6s %8s %6s %6.2f %9.2f %9.2f %9.2f %9.2f %8.1f "
                 "%8.1f %9.2e %7s %8s %6s %8s %6s\n",
            (long long)r->s.N, (long long)r->s.M, r->ranks, r->threads,
            r->mode, r->seconds_median, r->rank_seconds.min,
            r->rank_seconds.max,
            r->busy_seconds.min > 0 ? r->busy_seconds.max / r->busy_seconds.min
                                    : 0.0,
            r->thread_busy, r->gflops, sgemm, ratio, peak, frac,
            100.0 * r->comm_wait_fraction, r->bytes_sent / 1e6,
            r->cross_bytes / 1e6, r->cross_bytes_total / 1e6, r->ring_gbps,
            r->peak_rss.max / 1048576.0, r->model_bytes / 1048576.0,
            r->max_rel_error, r->pass ? "PASS" : "FAIL", core, f_core, prod,
            f_prod);
    fflush(out);
}

/* The echo's lines of the problem: shape, lengths, masks, logits. */
static void echo_problem(FILE *out, const bench_sweep *w)
{
    const ra_shape *s = &w->shape;
    const ra_numerics *num = &w->gen.p->num;
    fprintf(out, "# %-12s B=%lld H=%lld G=%lld D=%lld Dv=%lld M=%s\n",
            "shape", (long long)s->B, (long long)s->H, (long long)s->G,
            (long long)s->D, (long long)s->Dv, w->seq_kv_fixed ? "fixed"
                                                                : "N");
    fprintf(out, "# %-12s", "seq");
    for (int i = 0; i < w->nseq; i++)
        fprintf(out, " %lld", (long long)w->seqs[i]);
    fprintf(out, "\n# %-12s %s\n", "causal", num->causal
            ? "yes (GFLOP/s count the visible half only)" : "no");
    if (num->window)
        fprintf(out, "# %-12s left %lld, right %lld\n", "window",
                (long long)num->window_left, (long long)num->window_right);
    if (w->gen.lens || w->gen.segment_avg)
        fprintf(out, "# %-12s%s%s\n", "masks",
                w->gen.lens ? " random lens" : "",
                w->gen.segment_avg ? " random segments" : "");
    if (w->gen.segment_avg)
        fprintf(out, "# %-12s mean length %lld\n", "segments",
                (long long)w->gen.segment_avg);
    if (!ra_features_on(num) && !w->sinks)
        return;
    fprintf(out, "# %-12s", "logits");
    for (int i = 0; i < ra_score_feature_count; i++)
        fprintf(out, " %s %g,", ra_score_features[i].name,
                ra_feature_get(num, i));
    fprintf(out, " sinks %s; a plain pass beside each\n",
            w->sinks ? "unit-normal" : "none");
}

/* The echo's lines of the strategies, the picks of BENCH_AUTO. */
static void echo_strategies(FILE *out, const bench_sweep *w)
{
    fprintf(out, "# %-12s %s\n", "strategy",
            w->which == BENCH_ALL    ? "all (a row for each that applies)"
            : w->which == BENCH_AUTO ? "auto (the plan's pick per length)"
                                     : ra_strategy_name(
                                           w->gen.p->exec.strategy));
    for (int i = 0; w->which == BENCH_AUTO && i < w->nseq; i++) {
        fprintf(out, "# %-12s %s, chosen by the plan for N=%lld\n", "auto",
                ra_strategy_name((ra_strategy)w->picked[i]),
                (long long)w->seqs[i]);
        if (w->predicted[i] > 0) /* 0: no prediction, the ring ran */
            fprintf(out, "# %-12s %.4f s, %s\n", "predicted",
                    w->predicted[i], w->profile ? w->profile
                    : "built-in profile, not probed");
    }
}

void bench_sweep_echo(FILE *out, const bench_sweep *w, const bench_yard *y)
{
    const ra_params *p = w->gen.p;
    fprintf(out, "# %-12s %d per rank\n", "threads", ra_params_threads(p));
    echo_problem(out, w);
    fprintf(out, "# %-12s %s%s\n", "layout", ra_layout_name(p->exec.layout),
            w->layout_auto ? " (auto)" : "");
    echo_strategies(out, w);
    fprintf(out, "# %-12s %s%s\n", "mode",
            w->ring && w->naive ? "ring and naive"
            : w->ring           ? "ring"
                                : "naive",
            p->no_poll ? " (no polling)" : "");
    fprintf(out, "# %-12s %lld warm-up, %lld timed (median)\n", "passes",
            (long long)w->warmup, (long long)w->reps);
    fprintf(out, "# %-12s %s\n", "exp", ra_exp2_impl());
    fprintf(out, "# %-12s %s\n", "gemm",
            ra_gemm_name(ra_gemm_pick(p->exec.gemm)));
    fprintf(out, "# %-12s %s, K/V as %s between ranks\n", "precision",
            ra_precision_name(p->num.precision),
            ra_params_wire_bf16(p) ? "bf16" : "fp32");
    bench_print_yard(out, y);
}
