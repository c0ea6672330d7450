/* plan_report.c: what `ringattn plan` prints and writes (rank 0). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agree.h"
#include "internal.h"
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
           o->p.num.causal ? "yes" : "no", o->p.num.window ? "yes" : "no",
           ra_score_name(o->p.num.score), w->mk.q_lens ? " lens" : "",
           w->mk.q_seg ? " segments" : "",
           w->mk.q_lens || w->mk.q_seg ? "" : " none");
    printf("# %-10s %lld ranks on %lld node(s), %d thread(s) per rank, "
           "%lld cores in all\n", "allocation", (long long)o->ranks,
           (long long)o->nodes, ra_params_threads(&o->p),
           (long long)(o->cores > 0 ? o->cores
                       : (w->pl.nodes > 0 ? w->pl.cores
                                          : sysconf(_SC_NPROCESSORS_ONLN)) *
                             o->nodes));
    if (w->pl.nodes > 0)
        printf("# %-10s %s: cluster '%s', %s, %d nodes of %d cores, link "
               "%.4g GB/s, %.3g us between neighbours\n", "platform",
               o->platform, w->pl.id, w->pl.topology, w->pl.nodes,
               w->pl.cores, w->pf.inter.bandwidth * 1e-9,
               w->pf.inter.latency * 1e6);
    printf("# %-10s %s%s%s\n", "profile", o->profile ? o->profile : "built-in",
           o->link_rate > 0 || o->link_latency > 0 || w->pl.nodes > 0
               ? " (links between nodes: the platform or --link-*)" : "",
           o->kernel_rate > 0 ? " (kernel rate: --kernel-rate)" : "");
    const profile_kernel_key key = profile_key_of(&o->p, s->D, s->Dv);
    printf("# %-10s %s %s, %s tiles: %.1f GFLOP/s per core%s\n", "kernel",
           ra_gemm_name(key.gemm), key.precision,
           profile_class_name(key.cls),
           o->kernel_rate > 0 ? o->kernel_rate
                              : profile_kernel_rate(&w->pf, &key) * 1e-9,
           o->kernel_rate > 0 ? " (--kernel-rate)" : "");
    printf("# %-10s %s\n", "layout",
           w->layout_auto ? "auto: each tried, the best per strategy shown"
                          : ra_layout_name(o->p.exec.layout));
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

static void print_table(const plan_state *w)
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
static void print_fastest(const plan_state *w)
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

static void print_sweep(const plan_opts *o, const plan_state *w)
{
    printf("# predicted scaling (ranks per node %lld; weak: N and M grow "
           "with the nodes)\n", (long long)(o->ranks / o->nodes));
    printf("#%7s %6s %8s %9s %9s %10s %9s  %s\n", "scaling", "nodes",
           "ranks", "N", "best", "layout", "time_s", "within the model's "
           "error");
    const int64_t per = o->ranks / o->nodes > 0 ? o->ranks / o->nodes : 1;
    for (int i = 0; i < 2 * o->nsweep; i++) {
        const model_table *t = &w->sweep[i];
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

/* Reals at 15 digits: each as the table rounds it, no digits of noise. */
enum { PLAN_JSON_DIGITS = 15 };

/* Where a row's prediction is for: the allocation and the shape. */
typedef struct {
    const ra_shape *s;
    int64_t ranks, nodes;
    const char *scaling; /* "none", "strong", "weak" */
} plan_point;

static json_t *plan_json_row_problem(const plan_opts *o, const plan_point *at,
                                const model_result *r)
{
    const ra_shape *s = at->s;
    return json_pack(
        "{s:s, s:s, s:b, s:o, s:I, s:I, s:i, s:s, s:I, s:I, s:I, s:I, s:I, "
        "s:I, s:I, s:b, s:o}",
        "strategy", ra_strategy_name(r->strategy), "layout",
        ra_layout_name(r->layout), "applies", r->applies, "why",
        cli_json_text(r->why), "ranks", (json_int_t)at->ranks, "nodes",
        (json_int_t)at->nodes, "threads", ra_params_threads(&o->p), "scaling",
        at->scaling, "batch", (json_int_t)s->B, "seq_q", (json_int_t)s->N,
        "seq_kv", (json_int_t)s->M, "heads", (json_int_t)s->H, "kv_heads",
        (json_int_t)s->G, "dim", (json_int_t)s->D, "dim_v", (json_int_t)s->Dv,
        "causal", o->p.num.causal, "platform", cli_json_text(o->platform));
}

static json_t *plan_json_row_costs(const model_result *r)
{
    return json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
        "s:o, s:o}",
        "time_s", cli_json_fixed(r->t_total, "%.6e"),
        "compute_s", cli_json_fixed(r->t_compute, "%.6e"),
        "comm_s", cli_json_fixed(r->t_comm, "%.6e"),
        "imbalance_s", cli_json_fixed(r->t_imbalance, "%.6e"),
        "io_s", cli_json_fixed(r->t_io, "%.6e"),
        "flops", cli_json_fixed(r->flops, "%.6e"),
        "pairs_total", cli_json_count(r->pairs_total),
        "pairs_max", cli_json_count(r->pairs_ring_max),
        "bytes_sent", cli_json_count(r->bytes_max),
        "bytes_sent_avg", cli_json_count(r->bytes_avg),
        "intra_bytes", cli_json_count(r->intra_max),
        "inter_bytes", cli_json_count(r->inter_max),
        "cross_node_bytes", cli_json_count(r->cross_max),
        "cross_node_bytes_total", cli_json_count(r->cross_total),
        "model_bytes", cli_json_count(r->mem_max));
}

/* The rows of table t at point at appended to the array rows (NULL: a
 * row failed, rows released). */
static json_t *plan_json_rows(json_t *rows, const plan_opts *o,
                         const plan_point *at, const model_table *t)
{
    for (int i = 0; i < t->nrows && rows; i++) {
        json_t *row = cli_json_merge(plan_json_row_problem(o, at, &t->row[i]),
                                     plan_json_row_costs(&t->row[i]));
        if (json_array_append_new(rows, row) != 0) {
            json_decref(rows);
            rows = NULL;
        }
    }
    return rows;
}

/* The sweep's tables, strong and weak for each node count. */
static json_t *plan_json_sweep(const plan_opts *o, const plan_state *w)
{
    json_t *rows = json_array();
    const int64_t per = o->ranks / o->nodes > 0 ? o->ranks / o->nodes : 1;
    for (int i = 0; i < 2 * o->nsweep; i++) {
        const int64_t K = o->sweep[i / 2];
        ra_shape s = w->s;
        if (i % 2) {
            s.N = s.N * K / o->sweep[0];
            s.M = s.M * K / o->sweep[0];
        }
        const plan_point at = {&s, K * per, K, i % 2 ? "weak" : "strong"};
        rows = plan_json_rows(rows, o, &at, &w->sweep[i]);
    }
    return rows;
}

static int plan_json_write(FILE *f, const plan_opts *o, const plan_state *w)
{
    const model_table *t = &w->table;
    const model_result *b = t->best >= 0 ? &t->row[t->best] : NULL;
    const plan_point at = {&w->s, o->ranks, o->nodes, "none"};
    json_t *best = b ? json_pack("{s:s, s:s, s:o}", "strategy",
                                 ra_strategy_name(b->strategy), "layout",
                                 ra_layout_name(b->layout), "time_s",
                                 cli_json_fixed(b->t_total, "%.6e"))
                     : json_null();
    return cli_json_dump(f, json_pack(
        "{s:b, s:o, s:o, s:o, s:o, s:o}", "measured_profile", w->pf.measured,
        "profile", cli_json_text(o->profile ? o->profile : "built-in"),
        "seconds", cli_json_fixed(w->seconds, "%.6f"), "best", best,
        "rows", plan_json_rows(json_array(), o, &at, t),
        "sweep", plan_json_sweep(o, w)), PLAN_JSON_DIGITS);
}

static int csv_write(FILE *f, const plan_opts *o, const plan_state *w)
{
    fprintf(f, "scaling,nodes,ranks,seq_q,strategy,layout,applies,time_s,"
            "compute_s,comm_s,imbalance_s,io_s,model_bytes,bytes_sent,"
            "intra_bytes,inter_bytes\n");
    const int64_t per = o->ranks / o->nodes > 0 ? o->ranks / o->nodes : 1;
    for (int i = -1; i < 2 * o->nsweep; i++) {
        const model_table *t = i < 0 ? &w->table : &w->sweep[i];
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
            st = write_file(o->tab.json, o, w, plan_json_write);
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
        p.exec.strategy = (ra_strategy)k;
        const ra_layout lay = ra_params_layout(&p, 0);
        const int64_t n = model_max_seq(&w->s, &p, lay, al, &w->pf);
        ra_shape s = w->s;
        s.N = s.M = n > 0 ? n : 1;
        printf(" %9s %14lld %12.1f%s\n", ra_strategy_name(p.exec.strategy),
               (long long)n,
               model_rank_bytes(&s, &p, lay, al->P, 0) / 1048576.0,
               k == RA_STRATEGY_ULYSSES && w->s.H < al->P
                   ? "  (does not apply: more ranks than heads)"
                   : "");
    }
    fflush(stdout);
    return RA_OK;
}
