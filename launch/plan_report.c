/* plan_report.c: what `ringattn plan` prints and writes (rank 0); the
 * predictions and their JSON and CSV are comm/perf/plan_run.c's. */
#include <stdio.h>
#include <string.h>

#include "agree.h"
#include "plan.h"
#include "plan_out.h"

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
static void print_rates(const plan_opts *o)
{
    const perf_plan *w = &o->w;
    if (o->pl.nodes > 0)
        printf("# %-10s %s: cluster '%s', %s, %d nodes of %d cores, link "
               "%.4g GB/s, %.3g us between neighbours\n", "platform",
               w->platform, o->pl.id, o->pl.topology, o->pl.nodes,
               o->pl.cores, w->pf.inter.bandwidth * 1e-9,
               w->pf.inter.latency * 1e6);
    printf("# %-10s %s%s%s\n", "profile", w->profile ? w->profile : "built-in",
           o->link_rate > 0 || o->link_latency > 0 || o->pl.nodes > 0
               ? " (links between nodes: the platform or --link-*)" : "",
           w->kernel_rate > 0 ? " (kernel rate: --kernel-rate)" : "");
    const profile_kernel_key key = profile_key_of(&w->p, w->s.D, w->s.Dv);
    printf("# %-10s %s %s, %s tiles: %.1f GFLOP/s per core%s\n", "kernel",
           ra_gemm_name(key.gemm), key.precision,
           profile_class_name(key.cls),
           w->kernel_rate > 0 ? w->kernel_rate
                              : profile_kernel_rate(&w->pf, &key) * 1e-9,
           w->kernel_rate > 0 ? " (--kernel-rate)" : "");
}

static void print_echo(const plan_opts *o)
{
    const perf_plan *w = &o->w;
    const ra_shape *s = &w->s;
    if (!w->profile)
        printf("# %s\n", no_profile);
    printf("# ringattn plan %s\n", RA_VERSION_STRING);
    printf("# %-10s %s\n", "problem", o->in ? o->in : "shape flags");
    printf("# %-10s B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld\n",
           "shape", (long long)s->B, (long long)s->N, (long long)s->M,
           (long long)s->H, (long long)s->G, (long long)s->D,
           (long long)s->Dv);
    printf("# %-10s causal %s, window %s, score %s, masks%s%s%s\n", "options",
           w->p.num.causal ? "yes" : "no", w->p.num.window ? "yes" : "no",
           ra_score_name(w->p.num.score), w->mk.q_lens ? " lens" : "",
           w->mk.q_seg ? " segments" : "",
           w->mk.q_lens || w->mk.q_seg ? "" : " none");
    printf("# %-10s %lld ranks on %lld node(s), %d thread(s) per rank, "
           "%d cores in all\n", "allocation", (long long)w->ranks,
           (long long)w->nodes, ra_params_threads(&w->p),
           plan_alloc(w, w->ranks, w->nodes).cores);
    print_rates(o);
    printf("# %-10s %s\n", "layout",
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

static void print_table(const perf_plan *w)
{
    char vs[32];
    printf("#%9s %10s %7s %9s %12s %9s %9s %9s %8s %9s %9s %9s  %s\n",
           "strategy", "layout", "applies", "time_s", "vs_best", "compute",
           "comm", "imbalance", "io", "peak_MB", "MB_intra", "MB_inter",
           "why not");
    for (int k = 0; k < RA_STRATEGY_COUNT; k++) {
        const model_result *r = model_best_of(&w->table, (ra_strategy)k);
        printf(" %9s %10s %7s %9.4f %12s %9.4f %9.4f %9.4f %8.4f %9.1f "
               "%9.2f %9.2f  %s\n", ra_strategy_name(r->strategy),
               ra_layout_name(r->layout), r->applies ? "yes" : "no",
               r->t_total, vs_best(&w->table, r, vs, sizeof vs), r->t_compute,
               r->t_comm, r->t_imbalance, r->t_io, r->mem_max / 1048576.0,
               r->intra_max / 1e6, r->inter_max / 1e6,
               r->applies ? "" : r->why);
    }
}

/* The verdict line: the fastest, or the strategies the model cannot tell
 * apart (within its error), with the error stated. */
static void print_fastest(const perf_plan *w)
{
    const model_table *t = &w->table;
    char ties[256];
    if (t->best < 0) {
        printf("fastest: none: no strategy takes this problem\n");
        return;
    }
    const model_result *b = &t->row[t->best];
    const int n = plan_ties(t, ", ", ties, sizeof ties);
    const char *last = strrchr(ties, ','); /* names hold no comma */
    if (n > 1)
        printf("fastest: %.*s and %s within the model's error (%.1f%%): a "
               "tie; ", (int)(last - ties), ties, last + 2,
               100.0 * MODEL_ERROR);
    else
        printf("fastest: ");
    printf("strategy %s, layout %s, predicted %.4f s +- %.1f%% (model took "
           "%.3f s)\n", ra_strategy_name(b->strategy),
           ra_layout_name(b->layout), b->t_total, 100.0 * MODEL_ERROR,
           w->seconds);
}

static void print_sweep(const perf_plan *w)
{
    printf("# predicted scaling (ranks per node %lld; weak: N and M grow "
           "with the nodes)\n", (long long)(w->ranks / w->nodes));
    printf("#%7s %6s %8s %9s %9s %10s %9s  %s\n", "scaling", "nodes",
           "ranks", "N", "best", "layout", "time_s", "within the model's "
           "error");
    for (int i = 0; i < 2 * w->nsweep; i++) {
        const plan_point at = plan_point_of(w, i);
        const model_table *t = at.table;
        printf(" %7s %6lld %8lld %9lld", at.scaling, (long long)at.nodes,
               (long long)at.ranks, (long long)at.s.N);
        if (t->best < 0) {
            printf(" %9s\n", "none");
            continue;
        }
        const model_result *b = &t->row[t->best];
        char ties[256];
        const int n = plan_ties(t, ",", ties, sizeof ties);
        printf(" %9s %10s %9.4f  %s\n", ra_strategy_name(b->strategy),
               ra_layout_name(b->layout), b->t_total, n > 1 ? ties : "-");
    }
}

static int json_fill(FILE *f, const void *w)
{
    return plan_json_write(f, w);
}

static int csv_fill(FILE *f, const void *w)
{
    return plan_csv_write(f, w);
}

ra_status plan_report(const cli_ctx *ctx, const plan_opts *o)
{
    ra_status st = RA_OK;
    if (ctx->rank == 0) {
        print_echo(o);
        print_table(&o->w);
        print_fastest(&o->w);
        if (o->w.nsweep > 0)
            print_sweep(&o->w);
        fflush(stdout);
        st = cli_tables_write(&o->tab, json_fill, csv_fill, &o->w);
    }
    return ra_agree(ctx->comm, st);
}

void plan_report_max_seq(const cli_ctx *ctx, const plan_opts *o,
                         const model_alloc *al)
{
    int64_t n[RA_STRATEGY_COUNT];
    double bytes[RA_STRATEGY_COUNT];
    if (ctx->rank != 0)
        return;
    plan_max_seq(&o->w, al, n, bytes);
    print_echo(o);
    printf("# %-10s %.1f GB per node over %lld ranks per node\n", "memory",
           (double)o->w.pf.mem_per_node / 1e9,
           (long long)((o->w.ranks + o->w.nodes - 1) / o->w.nodes));
    printf("#%9s %14s %12s\n", "strategy", "max_seq", "peak_MB");
    for (int k = 0; k < RA_STRATEGY_COUNT; k++)
        printf(" %9s %14lld %12.1f%s\n", ra_strategy_name((ra_strategy)k),
               (long long)n[k], bytes[k] / 1048576.0,
               k == RA_STRATEGY_ULYSSES && o->w.s.H < al->P
                   ? "  (does not apply: more ranks than heads)"
                   : "");
    fflush(stdout);
}
