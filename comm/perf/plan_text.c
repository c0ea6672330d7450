/* plan_text.c: what `ringattn plan` prints (plan_run.h): the echo of the
 * problem, allocation and rates, a row per strategy, the verdict, the
 * scaling sweep and --max-seq's table. */
#include <string.h>

#include "plan_run.h"
#include "profile_json.h"

static const char *const no_profile =
    "no machine profile: using this machine's built-in figures, not probed";

/* The strategies tied with t's best (model_ties), the best first, joined
 * by sep into buf; how many. */
static int plan_ties(const model_table *t, const char *sep, char *buf,
                     size_t size)
{
    ra_strategy tie[RA_STRATEGY_COUNT];
    const int n = model_ties(t, tie);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        const size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", i ? sep : "",
                 ra_strategy_name(tie[i]));
    }
    return n;
}

/* The links and the kernel rate the plan was given. */
static void print_rates(FILE *out, const perf_plan *w)
{
    const ra_platform *pl = &w->pl;
    if (pl->nodes > 0)
        fprintf(out, "# %-10s %s: cluster '%s', %s, %d nodes of %d cores, "
                "link %.4g GB/s, %.3g us between neighbours\n", "platform",
                w->platform, pl->id, pl->topology, pl->nodes, pl->cores,
                w->pf.inter.bandwidth * 1e-9, w->pf.inter.latency * 1e6);
    fprintf(out, "# %-10s %s%s%s\n", "profile",
            w->profile ? w->profile : "built-in",
            w->links_given ? " (links between nodes: the platform or "
                             "--link-*)" : "",
            w->kernel_rate > 0 ? " (kernel rate: --kernel-rate)" : "");
    const profile_kernel_key key = profile_key_of(&w->p, w->s.D, w->s.Dv);
    fprintf(out, "# %-10s %s %s, %s tiles: %.1f GFLOP/s per core%s\n",
            "kernel", ra_gemm_name(key.gemm), key.precision,
            profile_class_name(key.cls),
            w->kernel_rate > 0 ? w->kernel_rate
                               : profile_kernel_rate(&w->pf, &key) * 1e-9,
            w->kernel_rate > 0 ? " (--kernel-rate)" : "");
}

static void print_echo(FILE *out, const perf_plan *w)
{
    const ra_shape *s = &w->s;
    if (!w->profile)
        fprintf(out, "# %s\n", no_profile);
    fprintf(out, "# ringattn plan %s\n", RA_VERSION_STRING);
    fprintf(out, "# %-10s %s\n", "problem", w->in ? w->in : "shape flags");
    fprintf(out, "# %-10s B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld "
            "Dv=%lld\n", "shape", (long long)s->B, (long long)s->N,
            (long long)s->M, (long long)s->H, (long long)s->G,
            (long long)s->D, (long long)s->Dv);
    fprintf(out, "# %-10s causal %s, window %s, score %s, masks%s%s%s\n",
            "options", w->p.num.causal ? "yes" : "no",
            w->p.num.window ? "yes" : "no", ra_score_name(w->p.num.score),
            w->mk.q_lens ? " lens" : "", w->mk.q_seg ? " segments" : "",
            w->mk.q_lens || w->mk.q_seg ? "" : " none");
    fprintf(out, "# %-10s %lld ranks on %lld node(s), %d thread(s) per "
            "rank, %d cores in all\n", "allocation", (long long)w->ranks,
            (long long)w->nodes, ra_params_threads(&w->p),
            plan_alloc(w, w->ranks, w->nodes).cores);
    print_rates(out, w);
    fprintf(out, "# %-10s %s\n", "layout",
            w->layout_auto ? "auto: each tried, the best per strategy shown"
                           : ra_layout_name(w->p.exec.layout));
}

/* vs_best of a row: its time over the best's, "tie" within the model's
 * error; "-" when it or nothing applies. */
static const char *vs_best(const model_table *t, const model_result *r,
                           char *buf, size_t size)
{
    if (!r->applies || t->best < 0)
        return "-";
    const double x = r->t_total / t->row[t->best].t_total - 1.0;
    snprintf(buf, size, "%+.1f%%%s", 100.0 * x,
             x <= MODEL_ERROR ? " tie" : "");
    return buf;
}

static void print_table(FILE *out, const perf_plan *w)
{
    char vs[32];
    fprintf(out, "#%9s %10s %7s %9s %12s %9s %9s %9s %8s %9s %9s %9s  %s\n",
            "strategy", "layout", "applies", "time_s", "vs_best", "compute",
            "comm", "imbalance", "io", "peak_MB", "MB_intra", "MB_inter",
            "why not");
    for (int k = 0; k < RA_STRATEGY_COUNT; k++) {
        const model_result *r = model_best_of(&w->table, (ra_strategy)k);
        fprintf(out, " %9s %10s %7s %9.4f %12s %9.4f %9.4f %9.4f %8.4f "
                "%9.1f %9.2f %9.2f  %s\n", ra_strategy_name(r->strategy),
                ra_layout_name(r->layout), r->applies ? "yes" : "no",
                r->t_total, vs_best(&w->table, r, vs, sizeof vs),
                r->t_compute, r->t_comm, r->t_imbalance, r->t_io,
                r->mem_max / 1048576.0, r->intra_max / 1e6,
                r->inter_max / 1e6, r->applies ? "" : r->why);
    }
}

/* The verdict line: the fastest, or the strategies the model cannot tell
 * apart (within its error), with the error stated. */
static void print_fastest(FILE *out, const perf_plan *w)
{
    const model_table *t = &w->table;
    char ties[256];
    if (t->best < 0) {
        fprintf(out, "fastest: none: no strategy takes this problem\n");
        return;
    }
    const model_result *b = &t->row[t->best];
    const int n = plan_ties(t, ", ", ties, sizeof ties);
    const char *last = strrchr(ties, ','); /* names hold no comma */
    if (n > 1)
        fprintf(out, "fastest: %.*s and %s within the model's error "
                "(%.1f%%): a tie; ", (int)(last - ties), ties, last + 2,
                100.0 * MODEL_ERROR);
    else
        fprintf(out, "fastest: ");
    fprintf(out, "strategy %s, layout %s, predicted %.4f s +- %.1f%% (model "
            "took %.3f s)\n", ra_strategy_name(b->strategy),
            ra_layout_name(b->layout), b->t_total, 100.0 * MODEL_ERROR,
            w->seconds);
}

static void print_sweep(FILE *out, const perf_plan *w)
{
    fprintf(out, "# predicted scaling (ranks per node %lld; weak: N and M "
            "grow with the nodes)\n", (long long)(w->ranks / w->nodes));
    fprintf(out, "#%7s %6s %8s %9s %9s %10s %9s  %s\n", "scaling", "nodes",
            "ranks", "N", "best", "layout", "time_s", "within the model's "
            "error");
    for (int i = 0; i < 2 * w->nsweep; i++) {
        const plan_point at = plan_point_of(w, i);
        const model_table *t = at.table;
        fprintf(out, " %7s %6lld %8lld %9lld", at.scaling,
                (long long)at.nodes, (long long)at.ranks, (long long)at.s.N);
        if (t->best < 0) {
            fprintf(out, " %9s\n", "none");
            continue;
        }
        const model_result *b = &t->row[t->best];
        char ties[256];
        const int n = plan_ties(t, ",", ties, sizeof ties);
        fprintf(out, " %9s %10s %9.4f  %s\n", ra_strategy_name(b->strategy),
                ra_layout_name(b->layout), b->t_total, n > 1 ? ties : "-");
    }
}

void plan_print(FILE *out, const perf_plan *w)
{
    print_echo(out, w);
    print_table(out, w);
    print_fastest(out, w);
    if (w->nsweep > 0)
        print_sweep(out, w);
    fflush(out);
}

void plan_print_max_seq(FILE *out, const perf_plan *w)
{
    int64_t n[RA_STRATEGY_COUNT];
    double bytes[RA_STRATEGY_COUNT];
    const model_alloc al = plan_alloc(w, w->ranks, w->nodes);
    plan_max_seq(w, &al, n, bytes);
    print_echo(out, w);
    fprintf(out, "# %-10s %.1f GB per node over %lld ranks per node\n",
            "memory", (double)w->pf.mem_per_node / 1e9,
            (long long)((w->ranks + w->nodes - 1) / w->nodes));
    fprintf(out, "#%9s %14s %12s\n", "strategy", "max_seq", "peak_MB");
    for (int k = 0; k < RA_STRATEGY_COUNT; k++)
        fprintf(out, " %9s %14lld %12.1f%s\n",
                ra_strategy_name((ra_strategy)k), (long long)n[k],
                bytes[k] / 1048576.0,
                k == RA_STRATEGY_ULYSSES && w->s.H < al.P
                    ? "  (does not apply: more ranks than heads)"
                    : "");
    fflush(out);
}

void plan_pick_write(FILE *out, const model_result *pick,
                     const char *profile)
{
    fprintf(out, "# %-10s %s, chosen by the plan (--strategy auto)\n",
            "auto", ra_strategy_name(pick->strategy));
    fprintf(out, "# %-10s %.3f s (compute %.3f, comm %.3f, imbalance %.3f), "
            "%s\n", "predicted", pick->t_total, pick->t_compute,
            pick->t_comm, pick->t_imbalance,
            profile ? profile : "built-in profile of this machine, not "
                                "probed");
    fflush(out);
}

void plan_profile_warning(FILE *err, const char *path, const ra_profile *pf)
{
    if (!path || !pf->oversubscribed)
        return;
    fprintf(err, "ringattn: warning: %s: probed oversubscribed (more ranks "
            "x threads than cores on a machine): its rates are shares of a "
            "core, so the predictions run slow; probe again with a rank per "
            "core\n", path);
    fflush(err);
}

void plan_auto_warning(FILE *err)
{
    fprintf(err, "ringattn: warning: --strategy auto: %s; running the "
            "ring\n", ra_error_message());
}
