/* plan_report.c: what `ringattn plan` prints and writes (rank 0). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agree.h"
#include "internal.h"
#include "plan_out.h"

static const char *const no_profile =
    "no machine profile: using this machine's built-in figures, not probed";

/* The model's median error, |measured / predicted - 1| over 85 measured
 * cases (docs/PERFORMANCE.md, "Accuracy"): strategies predicted closer
 * than this to the fastest are a tie, not a ranking. */
#define PLAN_MODEL_ERROR 0.048

/* The row of strategy k with the best layout (the first when none
 * applies). */
static const model_result *best_of(const plan_table *t, int k)
{
    const model_result *best = NULL;
    for (int i = 0; i < t->nrows; i++) {
        const model_result *r = &t->row[i];
        if ((int)r->strategy != k)
            continue;
        if (!best || (r->applies && (!best->applies ||
                                     r->t_total < best->t_total)))
            best = r;
    }
    return best;
}

/* The strategies (each at its best layout) predicted within the model's
 * error of t's best, the best first, joined by sep into buf; how many. */
static int plan_ties(const plan_table *t, const char *sep, char *buf,
                     size_t size)
{
    const model_result *b = &t->row[t->best];
    int n = 1;
    snprintf(buf, size, "%s", ra_strategy_name(b->strategy));
    for (int k = 0; k < RA_STRATEGY_COUNT; k++) {
        const model_result *r = best_of(t, k);
        if (k == (int)b->strategy || !r->applies ||
            r->t_total > b->t_total * (1.0 + PLAN_MODEL_ERROR))
            continue;
        const size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", sep,
                 ra_strategy_name(r->strategy));
        n++;
    }
    return n;
}

static void print_echo(const plan_opts *o, const plan_state *w)
{
    const ra_shape *s = &w->s;
    if (!o->profile)
        printf("# %s\n", no_profile);
    printf("# ringattn plan %s\n", RA_VERSION_STRING);
    printf("# %-10s %s\n", "problem", o->in ? o->in : "shape flags");
    printf("# %-10s B=%lld N=%lld M=%lld H=%lld G=%lld D=%lld Dv=%lld\n",
           "shape", (long long)s->B, (long long)s->N, (long long)s->M,
           (long long)s->H, (long long)s->G, (long long)s->D,
           (long long)s->Dv);
    printf("# %-10s causal %s, window %s, score %s, masks%s%s%s\n", "options",
           o->p.causal ? "yes" : "no", o->p.window ? "yes" : "no",
           ra_score_name(o->p.score), w->mk.q_lens ? " lens" : "",
           w->mk.q_seg ? " segments" : "",
           w->mk.q_lens || w->mk.q_seg ? "" : " none");
    printf("# %-10s %lld ranks on %lld node(s), %d thread(s) per rank, "
           "%lld cores in all\n", "allocation", (long long)o->ranks,
           (long long)o->nodes, ra_params_threads(&o->p),
           (long long)(o->cores > 0 ? o->cores : sysconf(_SC_NPROCESSORS_ONLN) * o->nodes));
    printf("# %-10s %s%s%s\n", "profile", o->profile ? o->profile : "built-in",
           o->link_rate > 0 ? " (links between nodes: --link-rate)" : "",
           o->kernel_rate > 0 ? " (kernel rate: --kernel-rate)" : "");
    printf("# %-10s %s\n", "layout",
           w->layout_auto ? "auto: each tried, the best per strategy shown"
                          : ra_layout_name(o->p.layout));
}

/* vs_best of a row: its time over the best's, "tie" within the model's
 * error; "-" when it or nothing applies. */
static const char *vs_best(const plan_table *t, const model_result *r,
                           char *buf, size_t size)
{
    if (!r->applies || t->best < 0)
        return "-";
    const double x = r->t_total / t->row[t->best].t_total - 1.0;
    snprintf(buf, size, "%+.1f%%%s", 100.0 * x,
             x <= PLAN_MODEL_ERROR ? " tie" : "");
    return buf;
}

static void print_table(const plan_state *w)
{
    char vs[32];
    printf("#%9s %10s %7s %9s %12s %9s %9s %9s %8s %9s %9s %9s  %s\n",
           "strategy", "layout", "applies", "time_s", "vs_best", "compute",
           "comm", "imbalance", "io", "peak_MB", "MB_intra", "MB_inter",
           "why not");
    for (int k = 0; k < RA_STRATEGY_COUNT; k++) {
        const model_result *r = best_of(&w->table, k);
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
static void print_fastest(const plan_state *w)
{
    const plan_table *t = &w->table;
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
               100.0 * PLAN_MODEL_ERROR);
    else
        printf("fastest: ");
    printf("strategy %s, layout %s, predicted %.4f s +- %.1f%% (model took "
           "%.3f s)\n", ra_strategy_name(b->strategy),
           ra_layout_name(b->layout), b->t_total, 100.0 * PLAN_MODEL_ERROR,
           w->seconds);
}

static void print_sweep(const plan_opts *o, const plan_state *w)
{
    printf("# predicted scaling (ranks per node %lld; weak: N and M grow "
           "with the nodes)\n", (long long)(o->ranks / o->nodes));
    printf("#%7s %6s %8s %9s %9s %10s %9s  %s\n", "scaling", "nodes",
           "ranks", "N", "best", "layout", "time_s", "within the model's "
           "error");
    const int64_t per = o->ranks / o->nodes > 0 ? o->ranks / o->nodes : 1;
    for (int i = 0; i < 2 * o->nsweep; i++) {
        const plan_table *t = &w->sweep[i];
        const int64_t K = o->sweep[i / 2];
        const int64_t N = i % 2 ? w->s.N * K / o->sweep[0] : w->s.N;
        if (t->best < 0) {
            printf(" %7s %6lld %8lld %9lld %9s\n", i % 2 ? "weak" : "strong",
                   (long long)K, (long long)(K * per), (long long)N, "none");
            continue;
        }
        const model_result *b = &t->row[t->best];
        char ties[256];
        const int n = plan_ties(t, ",", ties, sizeof ties);
        printf(" %7s %6lld %8lld %9lld %9s %10s %9.4f  %s\n",
               i % 2 ? "weak" : "strong", (long long)K, (long long)(K * per),
               (long long)N, ra_strategy_name(b->strategy),
               ra_layout_name(b->layout), b->t_total, n > 1 ? ties : "-");
    }
}

/* ---- JSON and CSV ------------------------------------------------------------ */

static void json_row(FILE *f, const plan_opts *o, const ra_shape *s,
                     const model_result *r, int64_t P, int64_t K,
                     const char *scaling)
{
    fprintf(f, "{\"strategy\": \"%s\", \"layout\": \"%s\", \"applies\": %s, "
            "\"why\": \"", ra_strategy_name(r->strategy),
            ra_layout_name(r->layout), r->applies ? "true" : "false");
    for (const char *c = r->why; *c; c++) /* messages hold no control chars */
        fprintf(f, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
    fprintf(f, "\", \"ranks\": %lld, \"nodes\": %lld, \"threads\": %d, "
            "\"scaling\": \"%s\", \"batch\": %lld, \"seq_q\": %lld, "
            "\"seq_kv\": %lld, \"heads\": %lld, \"kv_heads\": %lld, "
            "\"dim\": %lld, \"dim_v\": %lld, \"causal\": %s, "
            "\"time_s\": %.6e, \"compute_s\": %.6e, \"comm_s\": %.6e, "
            "\"imbalance_s\": %.6e, \"io_s\": %.6e, \"flops\": %.6e, "
            "\"pairs_total\": %.0f, \"pairs_max\": %.0f, "
            "\"bytes_sent\": %.0f, \"bytes_sent_avg\": %.0f, "
            "\"intra_bytes\": %.0f, \"inter_bytes\": %.0f, "
            "\"cross_node_bytes\": %.0f, \"cross_node_bytes_total\": %.0f, "
            "\"model_bytes\": %.0f}",
            (long long)P, (long long)K, ra_params_threads(&o->p), scaling,
            (long long)s->B, (long long)s->N, (long long)s->M,
            (long long)s->H, (long long)s->G, (long long)s->D,
            (long long)s->Dv, o->p.causal ? "true" : "false", r->t_total,
            r->t_compute, r->t_comm, r->t_imbalance, r->t_io, r->flops,
            r->pairs_total, r->pairs_ring_max, r->bytes_max, r->bytes_avg,
            r->intra_max, r->inter_max, r->cross_max, r->cross_total,
            r->mem_max);
}

static int json_write(FILE *f, const plan_opts *o, const plan_state *w)
{
    const plan_table *t = &w->table;
    fprintf(f, "{\"measured_profile\": %s, \"profile\": \"%s\", "
            "\"seconds\": %.6f,\n \"best\": ", w->pf.measured ? "true"
            : "false", o->profile ? o->profile : "built-in", w->seconds);
    if (t->best >= 0)
        fprintf(f, "{\"strategy\": \"%s\", \"layout\": \"%s\", "
                "\"time_s\": %.6e}", ra_strategy_name(t->row[t->best].strategy),
                ra_layout_name(t->row[t->best].layout),
                t->row[t->best].t_total);
    else
        fprintf(f, "null");
    fprintf(f, ",\n \"rows\": [\n");
    for (int i = 0; i < t->nrows; i++) {
        fprintf(f, "  ");
        json_row(f, o, &w->s, &t->row[i], o->ranks, o->nodes, "none");
        fprintf(f, "%s\n", i + 1 < t->nrows ? "," : "");
    }
    fprintf(f, " ],\n \"sweep\": [\n");
    const int64_t per = o->ranks / o->nodes > 0 ? o->ranks / o->nodes : 1;
    for (int i = 0; i < 2 * o->nsweep; i++) {
        const int64_t K = o->sweep[i / 2];
        ra_shape s = w->s;
        if (i % 2) {
            s.N = s.N * K / o->sweep[0];
            s.M = s.M * K / o->sweep[0];
        }
        for (int j = 0; j < w->sweep[i].nrows; j++) {
            fprintf(f, "  ");
            json_row(f, o, &s, &w->sweep[i].row[j], K * per, K,
                     i % 2 ? "weak" : "strong");
            fprintf(f, "%s\n", i + 1 < 2 * o->nsweep ||
                                       j + 1 < w->sweep[i].nrows ? "," : "");
        }
    }
    fprintf(f, " ]}\n");
    return ferror(f) ? -1 : 0;
}

static int csv_write(FILE *f, const plan_opts *o, const plan_state *w)
{
    fprintf(f, "scaling,nodes,ranks,seq_q,strategy,layout,applies,time_s,"
            "compute_s,comm_s,imbalance_s,io_s,model_bytes,bytes_sent,"
            "intra_bytes,inter_bytes\n");
    const int64_t per = o->ranks / o->nodes > 0 ? o->ranks / o->nodes : 1;
    for (int i = -1; i < 2 * o->nsweep; i++) {
        const plan_table *t = i < 0 ? &w->table : &w->sweep[i];
        const int64_t K = i < 0 ? o->nodes : o->sweep[i / 2];
        const int64_t N = i % 2 == 1 ? w->s.N * K / o->sweep[0] : w->s.N;
        const char *sc = i < 0 ? "none" : i % 2 ? "weak" : "strong";
        for (int j = 0; j < t->nrows; j++) {
            const model_result *r = &t->row[j];
            fprintf(f, "%s,%lld,%lld,%lld,%s,%s,%d,%.6e,%.6e,%.6e,%.6e,%.6e,"
                    "%.0f,%.0f,%.0f,%.0f\n", sc, (long long)K,
                    (long long)(i < 0 ? o->ranks : K * per), (long long)N,
                    ra_strategy_name(r->strategy), ra_layout_name(r->layout),
                    r->applies, r->t_total, r->t_compute, r->t_comm,
                    r->t_imbalance, r->t_io, r->mem_max, r->bytes_max,
                    r->intra_max, r->inter_max);
        }
    }
    return ferror(f) ? -1 : 0;
}

/* The predictions and the writer of one output file's format. */
typedef struct {
    const plan_opts *o;
    const plan_state *w;
    int (*writer)(FILE *, const plan_opts *, const plan_state *);
} plan_file;

static int plan_fill(FILE *f, const void *arg)
{
    const plan_file *p = arg;
    return p->writer(f, p->o, p->w);
}

/* The whole file, atomically, or on a failed write the earlier one. */
static ra_status write_file(const char *path, const plan_opts *o,
                            const plan_state *w,
                            int (*writer)(FILE *, const plan_opts *,
                                          const plan_state *))
{
    const plan_file p = {o, w, writer};
    return h5io_text_write(path, 1, plan_fill, &p);
}

ra_status plan_report(const cli_ctx *ctx, const plan_opts *o,
                      const plan_state *w)
{
    ra_status st = RA_OK;
    if (ctx->rank == 0) {
        print_echo(o, w);
        print_table(w);
        print_fastest(w);
        if (o->nsweep > 0)
            print_sweep(o, w);
        fflush(stdout);
        if (o->tab.json)
            st = write_file(o->tab.json, o, w, json_write);
        if (st == RA_OK && o->tab.csv)
            st = write_file(o->tab.csv, o, w, csv_write);
    }
    return ra_agree(ctx->comm, st);
}

ra_status plan_report_max_seq(const cli_ctx *ctx, const plan_opts *o,
                              const plan_state *w, const model_alloc *al)
{
    if (ctx->rank != 0)
        return RA_OK;
    print_echo(o, w);
    printf("# %-10s %.1f GB per node over %lld ranks per node\n", "memory",
           (double)w->pf.mem_per_node / 1e9,
           (long long)((o->ranks + o->nodes - 1) / o->nodes));
    printf("#%9s %14s %12s\n", "strategy", "max_seq", "peak_MB");
    for (int k = 0; k < RA_STRATEGY_COUNT; k++) {
        ra_params p = o->p;
        p.strategy = (ra_strategy)k;
        const ra_layout lay = ra_params_layout(&p, 0);
        const int64_t n = model_max_seq(&w->s, &p, lay, al, &w->pf);
        ra_shape s = w->s;
        s.N = s.M = n > 0 ? n : 1;
        printf(" %9s %14lld %12.1f%s\n", ra_strategy_name(p.strategy),
               (long long)n,
               model_rank_bytes(&s, &p, lay, al->P, 0) / 1048576.0,
               k == RA_STRATEGY_ULYSSES && w->s.H < al->P
                   ? "  (does not apply: more ranks than heads)" : "");
    }
    fflush(stdout);
    return RA_OK;
}
