/* bench_json.c: the JSON rows of `ringattn bench` (and bench
 * --backward), apart from the rest of its report (bench_report.c) so that
 * ringattn-sim, which has no HDF5, writes its rows in the same schema. */
#include "bench.h"
#include "gemm_env.h"
#include "internal.h"

/* Reals at 15 digits: each as the table rounds it, no digits of noise. */
enum { BENCH_JSON_DIGITS = 15 };

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

/* A fixed-point real, or null when x is not a measured figure (0). */
static json_t *measured_or_null(double x, double of, const char *fmt)
{
    return x > 0 && of > 0 ? cli_json_fixed(x / of, fmt) : json_null();
}

/* The times and rates of a row. */
static json_t *row_times(const bench_result *r)
{
    return json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
        "s:o, s:o, s:o}",
        "flops", cli_json_fixed(r->flops, "%.6e"),
        "pairs_max", cli_json_count(r->pairs_max),
        "seconds_median", cli_json_fixed(r->seconds_median, "%.6e"),
        "rank_seconds_min", cli_json_fixed(r->rank_seconds.min, "%.6e"),
        "rank_seconds_avg", cli_json_fixed(r->rank_seconds.avg, "%.6e"),
        "rank_seconds_max", cli_json_fixed(r->rank_seconds.max, "%.6e"),
        "busy_seconds_min", cli_json_fixed(r->busy_seconds.min, "%.6e"),
        "busy_seconds_max", cli_json_fixed(r->busy_seconds.max, "%.6e"),
        "thread_busy", cli_json_fixed(r->thread_busy, "%.4f"),
        "gflops", cli_json_fixed(r->gflops, "%.4f"),
        "sgemm_gflops", measured_or_null(r->sgemm_gflops, 1.0, "%.4f"),
        "fraction_of_sgemm", measured_or_null(r->sgemm_gflops > 0 ? r->gflops
                                              : 0.0, r->sgemm_gflops, "%.4f"),
        "peak_gflops", measured_or_null(r->peak_gflops, 1.0, "%.4f"),
        "fraction_of_peak", measured_or_null(r->peak_gflops > 0 ? r->gflops
                                             : 0.0, r->peak_gflops, "%.4f"),
        "comm_wait_fraction", cli_json_fixed(r->comm_wait_fraction, "%.6f"),
        "bytes_sent", cli_json_count(r->bytes_sent));
}

/* The traffic, memory and verdict of a row. */
static json_t *row_costs(const bench_result *r)
{
    return json_pack(
        "{s:o, s:o, s:o, s:i, s:i, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:s}",
        "bytes_sent_avg", cli_json_count(r->bytes_sent_avg),
        "cross_node_bytes", cli_json_count(r->cross_bytes),
        "cross_node_bytes_total", cli_json_count(r->cross_bytes_total),
        "nodes", r->nodes, "ranks_per_node", r->ranks_per_node,
        "ring_order", r->node_aware ? "node" : "mpirun",
        "ring_gbps", cli_json_fixed(r->ring_gbps, "%.4f"),
        "peak_rss_bytes", cli_json_count(r->peak_rss.max),
        "peak_rss_bytes_min", cli_json_count(r->peak_rss.min),
        "model_bytes", cli_json_count(r->model_bytes),
        "max_rel_error", cli_json_fixed(r->max_rel_error, "%.3e"),
        "max_lse_error", cli_json_fixed(r->max_lse_error, "%.3e"),
        "verdict", r->pass ? "PASS" : "FAIL");
}

/* The core's physical peak and the products-only rate of a row, with the
 * row's fractions of them (null: not measured). */
static json_t *row_yards(const bench_result *r)
{
    return json_pack(
        "{s:o, s:o, s:o, s:o}",
        "core_peak_gflops", measured_or_null(r->core_gflops, 1.0, "%.4f"),
        "fraction_of_core_peak",
        measured_or_null(r->core_gflops > 0 ? r->gflops : 0.0,
                         r->core_gflops, "%.4f"),
        "products_gflops", measured_or_null(r->products_gflops, 1.0, "%.4f"),
        "fraction_of_products",
        measured_or_null(r->products_gflops > 0 ? r->gflops : 0.0,
                         r->products_gflops, "%.4f"));
}

json_t *bench_json_row(const bench_result *r)
{
    return cli_json_merge(cli_json_merge(cli_json_merge(row_problem(r),
                                                        row_times(r)),
                                         row_costs(r)),
                          row_yards(r));
}

int bench_json_write(FILE *out, const bench_result *rows, int count)
{
    json_t *all = json_array();
    for (int i = 0; i < count && all; i++) {
        if (json_array_append_new(all, bench_json_row(&rows[i])) != 0) {
            json_decref(all);
            all = NULL;
        }
    }
    return cli_json_dump(out, all, BENCH_JSON_DIGITS);
}

