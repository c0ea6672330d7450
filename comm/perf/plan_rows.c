/* plan_rows.c: a plan's predictions as JSON and CSV (plan_run.h): a row
 * per strategy and layout tried, for the job and each point of the
 * sweep. */
#include "perf_json.h"
#include "plan_run.h"

/* Reals at 15 digits: each as the table rounds it, no digits of noise. */
enum { PLAN_JSON_DIGITS = 15 };

static json_t *row_problem(const perf_plan *w, const plan_point *at,
                           const model_result *r)
{
    const ra_shape *s = &at->s;
    return json_pack(
        "{s:s, s:s, s:b, s:o, s:I, s:I, s:i, s:s, s:I, s:I, s:I, s:I, s:I, "
        "s:I, s:I, s:b, s:o}",
        "strategy", ra_strategy_name(r->strategy), "layout",
        ra_layout_name(r->layout), "applies", r->applies, "why",
        perf_json_text(r->why), "ranks", (json_int_t)at->ranks, "nodes",
        (json_int_t)at->nodes, "threads", ra_params_threads(&w->p), "scaling",
        at->scaling, "batch", (json_int_t)s->B, "seq_q", (json_int_t)s->N,
        "seq_kv", (json_int_t)s->M, "heads", (json_int_t)s->H, "kv_heads",
        (json_int_t)s->G, "dim", (json_int_t)s->D, "dim_v", (json_int_t)s->Dv,
        "causal", w->p.num.causal, "platform", perf_json_text(w->platform));
}

static json_t *row_costs(const model_result *r)
{
    return json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
        "s:o, s:o}",
        "time_s", perf_json_fixed(r->t_total, "%.6e"),
        "compute_s", perf_json_fixed(r->t_compute, "%.6e"),
        "comm_s", perf_json_fixed(r->t_comm, "%.6e"),
        "imbalance_s", perf_json_fixed(r->t_imbalance, "%.6e"),
        "io_s", perf_json_fixed(r->t_io, "%.6e"),
        "flops", perf_json_fixed(r->flops, "%.6e"),
        "pairs_total", perf_json_count(r->pairs_total),
        "pairs_max", perf_json_count(r->pairs_ring_max),
        "bytes_sent", perf_json_count(r->bytes_max),
        "bytes_sent_avg", perf_json_count(r->bytes_avg),
        "intra_bytes", perf_json_count(r->intra_max),
        "inter_bytes", perf_json_count(r->inter_max),
        "cross_node_bytes", perf_json_count(r->cross_max),
        "cross_node_bytes_total", perf_json_count(r->cross_total),
        "model_bytes", perf_json_count(r->mem_max));
}

/* The rows of points [from, to) of w (plan_point_of) in a new array;
 * NULL when out of memory. */
static json_t *json_rows(const perf_plan *w, int from, int to)
{
    json_t *rows = json_array();
    for (int i = from; i < to; i++) {
        const plan_point at = plan_point_of(w, i);
        for (int k = 0; k < at.table->nrows && rows; k++)
            rows = perf_json_append(rows, perf_json_merge(
                row_problem(w, &at, &at.table->row[k]),
                row_costs(&at.table->row[k])));
    }
    return rows;
}

int plan_json_write(FILE *f, const void *plan)
{
    const perf_plan *w = plan;
    const model_table *t = &w->table;
    const model_result *b = t->best >= 0 ? &t->row[t->best] : NULL;
    json_t *best = b ? json_pack("{s:s, s:s, s:o}", "strategy",
                                 ra_strategy_name(b->strategy), "layout",
                                 ra_layout_name(b->layout), "time_s",
                                 perf_json_fixed(b->t_total, "%.6e"))
                     : json_null();
    return perf_json_dump(f, json_pack(
        "{s:b, s:o, s:o, s:o, s:o, s:o}", "measured_profile", w->pf.measured,
        "profile", perf_json_text(w->profile ? w->profile : "built-in"),
        "seconds", perf_json_fixed(w->seconds, "%.6f"), "best", best,
        "rows", json_rows(w, -1, 0),
        "sweep", json_rows(w, 0, 2 * w->nsweep)), PLAN_JSON_DIGITS);
}

int plan_csv_write(FILE *f, const void *plan)
{
    const perf_plan *w = plan;
    fprintf(f, "scaling,nodes,ranks,seq_q,strategy,layout,applies,time_s,"
            "compute_s,comm_s,imbalance_s,io_s,model_bytes,bytes_sent,"
            "intra_bytes,inter_bytes\n");
    for (int i = -1; i < 2 * w->nsweep; i++) {
        const plan_point at = plan_point_of(w, i);
        for (int j = 0; j < at.table->nrows; j++) {
            const model_result *r = &at.table->row[j];
            fprintf(f, "%s,%lld,%lld,%lld,%s,%s,%d,%.6e,%.6e,%.6e,%.6e,%.6e,"
                    "%.0f,%.0f,%.0f,%.0f\n", at.scaling, (long long)at.nodes,
                    (long long)at.ranks, (long long)at.s.N,
                    ra_strategy_name(r->strategy), ra_layout_name(r->layout),
                    r->applies, r->t_total, r->t_compute, r->t_comm,
                    r->t_imbalance, r->t_io, r->mem_max, r->bytes_max,
                    r->intra_max, r->inter_max);
        }
    }
    return ferror(f) ? -1 : 0;
}
