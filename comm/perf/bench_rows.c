/* bench_rows.c: the rows of `ringattn bench` (and bench --backward) as
 * JSON and CSV, and the yardstick cells its table shows; ringattn-sim
 * writes its row in the same JSON schema. */
#include "bench_measure.h"
#include "gemm_env.h"
#include "perf_json.h"

/* Reals at 15 digits: each as the table rounds it, no digits of noise. */
enum { BENCH_JSON_DIGITS = 15 };

void bench_yard_cells(double gflops, double yard, char cell[16],
                      char frac[16])
{
    if (yard > 0) {
        snprintf(cell, 16, "%.1f", yard);
        snprintf(frac, 16, "%.3f", gflops / yard);
    } else {
        snprintf(cell, 16, "n/a");
        snprintf(frac, 16, "n/a");
    }
}

/* The problem and the decomposition of a row. */
static json_t *row_problem(const bench_result *r)
{
    const ra_shape *s = &r->s;
    const ra_layout lay = ra_params_layout(&r->p, r->segment_avg > 0);
    return json_pack(
        "{s:i, s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, "
        "s:b, s:I, s:s, s:i, s:I, s:I, s:s, s:s, s:s}",
        "ranks", r->ranks, "threads", r->threads, "mode", r->mode, "batch",
        (json_int_t)s->B, "seq_q", (json_int_t)s->N, "seq_kv", (json_int_t)s->M,
        "heads", (json_int_t)s->H, "kv_heads", (json_int_t)s->G, "dim",
        (json_int_t)s->D, "dim_v", (json_int_t)s->Dv, "causal", r->p.num.causal,
        "window_left",
        (json_int_t)(r->p.num.window ? r->p.num.window_left : -1),
        "window_right",
        (json_int_t)(r->p.num.window ? r->p.num.window_right : -1), "lens",
        r->lens, "segment_avg", (json_int_t)r->segment_avg, "layout",
        ra_layout_name(lay), "steps", r->steps, "block_q",
        (json_int_t)r->block_q, "block_kv", (json_int_t)r->block_kv,
        "precision", ra_precision_name(r->p.num.precision), "wire",
        ra_params_wire_bf16(&r->p) ? "bf16" : "fp32", "gemm",
        ra_gemm_name(ra_gemm_pick(r->p.exec.gemm)));
}

/* A row's rate over a yardstick, null when the yardstick was not
 * measured. */
static json_t *fraction_of(const bench_result *r, double yard)
{
    return perf_json_measured(yard > 0 ? r->gflops : 0.0, yard, "%.4f");
}

/* The times and rates of a row. */
static json_t *row_times(const bench_result *r)
{
    return json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
        "s:o, s:o, s:o}",
        "flops", perf_json_fixed(r->flops, "%.6e"),
        "pairs_max", perf_json_count(r->pairs_max),
        "seconds_median", perf_json_fixed(r->seconds_median, "%.6e"),
        "rank_seconds_min", perf_json_fixed(r->rank_seconds.min, "%.6e"),
        "rank_seconds_avg", perf_json_fixed(r->rank_seconds.avg, "%.6e"),
        "rank_seconds_max", perf_json_fixed(r->rank_seconds.max, "%.6e"),
        "busy_seconds_min", perf_json_fixed(r->busy_seconds.min, "%.6e"),
        "busy_seconds_max", perf_json_fixed(r->busy_seconds.max, "%.6e"),
        "thread_busy", perf_json_fixed(r->thread_busy, "%.4f"),
        "gflops", perf_json_fixed(r->gflops, "%.4f"),
        "sgemm_gflops", perf_json_measured(r->sgemm_gflops, 1.0, "%.4f"),
        "fraction_of_sgemm", fraction_of(r, r->sgemm_gflops),
        "peak_gflops", perf_json_measured(r->peak_gflops, 1.0, "%.4f"),
        "fraction_of_peak", fraction_of(r, r->peak_gflops),
        "comm_wait_fraction", perf_json_fixed(r->comm_wait_fraction, "%.6f"),
        "bytes_sent", perf_json_count(r->bytes_sent));
}

/* The traffic, memory and verdict of a row, the core's physical peak and
 * the products-only rate with the row's fractions of them (null: not
 * measured). */
static json_t *row_costs(const bench_result *r)
{
    return json_pack(
        "{s:o, s:o, s:o, s:i, s:i, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:s, "
        "s:o, s:o, s:o, s:o}",
        "bytes_sent_avg", perf_json_count(r->bytes_sent_avg),
        "cross_node_bytes", perf_json_count(r->cross_bytes),
        "cross_node_bytes_total", perf_json_count(r->cross_bytes_total),
        "nodes", r->nodes, "ranks_per_node", r->ranks_per_node,
        "ring_order", r->node_aware ? "node" : "mpirun",
        "ring_gbps", perf_json_fixed(r->ring_gbps, "%.4f"),
        "peak_rss_bytes", perf_json_count(r->peak_rss.max),
        "peak_rss_bytes_min", perf_json_count(r->peak_rss.min),
        "model_bytes", perf_json_count(r->model_bytes),
        "max_rel_error", perf_json_fixed(r->max_rel_error, "%.3e"),
        "max_lse_error", perf_json_fixed(r->max_lse_error, "%.3e"),
        "verdict", r->pass ? "PASS" : "FAIL",
        "core_peak_gflops", perf_json_measured(r->core_gflops, 1.0, "%.4f"),
        "fraction_of_core_peak", fraction_of(r, r->core_gflops),
        "products_gflops", perf_json_measured(r->products_gflops, 1.0,
                                              "%.4f"),
        "fraction_of_products", fraction_of(r, r->products_gflops));
}

json_t *bench_json_row(const bench_result *r)
{
    return perf_json_merge(perf_json_merge(row_problem(r), row_times(r)),
                           row_costs(r));
}

int bench_json_write(FILE *out, const bench_result *rows, int count)
{
    json_t *all = json_array();
    for (int i = 0; i < count && all; i++)
        all = perf_json_append(all, bench_json_row(&rows[i]));
    return perf_json_dump(out, all, BENCH_JSON_DIGITS);
}

int bench_csv_write(FILE *out, const bench_result *rows, int count)
{
    fprintf(out, "ranks,threads,mode,batch,seq_q,seq_kv,heads,kv_heads,dim,"
                 "dim_v,causal,layout,block_q,block_kv,seconds_median,gflops,"
                 "sgemm_gflops,peak_gflops,comm_wait_fraction,bytes_sent,ring_gbps,"
                 "peak_rss_bytes,model_bytes,max_rel_error,verdict\n");
    for (int i = 0; i < count; i++) {
        const bench_result *r = &rows[i];
        char sgemm[16], peak[16], frac[16];
        bench_yard_cells(r->gflops, r->sgemm_gflops, sgemm, frac);
        bench_yard_cells(r->gflops, r->peak_gflops, peak, frac);
        fprintf(out,
                "%d,%d,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%d,%s,%lld,"
                "%lld,%.6e,%.4f,%s,%s,%.6f,%.0f,%.4f,%.0f,%.0f,%.3e,"
                "%s\n",
                r->ranks, r->threads, r->mode, (long long)r->s.B,
                (long long)r->s.N, (long long)r->s.M, (long long)r->s.H,
                (long long)r->s.G, (long long)r->s.D, (long long)r->s.Dv,
                r->p.num.causal,
                ra_layout_name(ra_params_layout(&r->p, r->segment_avg > 0)),
                (long long)r->block_q, (long long)r->block_kv,
                r->seconds_median, r->gflops, sgemm, peak,
                r->comm_wait_fraction, r->bytes_sent, r->ring_gbps,
                r->peak_rss.max, r->model_bytes, r->max_rel_error,
                r->pass ? "PASS" : "FAIL");
    }
    return ferror(out) ? -1 : 0;
}

int bench_table_json(FILE *out, const void *table)
{
    const bench_table *t = table;
    return bench_json_write(out, t->rows, t->nrows);
}

int bench_table_csv(FILE *out, const void *table)
{
    const bench_table *t = table;
    return bench_csv_write(out, t->rows, t->nrows);
}
