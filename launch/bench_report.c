/* bench_report.c: the table, JSON and CSV of `ringattn bench` and
 * `ringattn bench --backward`. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <sys/stat.h>

#include "bench.h"
#include "h5io.h"
#include "internal.h"

void bench_print_header(FILE *out)
{
    fprintf(out, "#%7s %7s %2s %2s %9s %9s %9s %9s %5s %5s %8s %8s %6s %6s %9s "
                 "%9s %9s %8s %8s %8s %9s %s\n",
            "N", "M", "P", "T", "mode", "time_s", "rank_min", "rank_max",
            "busy", "tbusy", "GFLOP/s", "sgemm", "ratio", "wait%", "MB_sent",
            "MB_xnode", "MB_xn_all", "ring_GB/s", "rss_MB", "model_MB", "rel_err", "verdict");
}

void bench_print_row(FILE *out, const bench_result *r)
{
    fprintf(out, " %7lld %7lld %2d %2d %9s %9.4f %9.4f %9.4f %5.2f %5.2f %8.1f "
                 "%8.1f %6.3f %6.2f %9.2f %9.2f %9.2f %9.2f %8.1f %8.1f %9.2e "
                 "%s\n",
            (long long)r->s.N, (long long)r->s.M, r->ranks, r->threads,
            r->mode, r->seconds_median, r->rank_seconds.min,
            r->rank_seconds.max,
            r->busy_seconds.min > 0 ? r->busy_seconds.max / r->busy_seconds.min
                                    : 0.0,
            r->thread_busy, r->gflops, r->sgemm_gflops,
            r->gflops / r->sgemm_gflops, 100.0 * r->comm_wait_fraction,
            r->bytes_sent / 1e6, r->cross_bytes / 1e6,
            r->cross_bytes_total / 1e6, r->ring_gbps, r->peak_rss.max / 1048576.0,
            r->model_bytes / 1048576.0, r->max_rel_error,
            r->pass ? "PASS" : "FAIL");
    fflush(out);
}

/* JSON numbers must be finite. */
static double finite_or_zero(double x) { return isfinite(x) ? x : 0.0; }

int bench_json_write(FILE *out, const bench_result *rows, int count)
{
    fprintf(out, "[\n");
    for (int i = 0; i < count; i++) {
        const bench_result *r = &rows[i];
        fprintf(out,
                "  {\"ranks\": %d, \"threads\": %d, \"mode\": \"%s\", "
                "\"batch\": %lld, \"seq_q\": %lld, \"seq_kv\": %lld, "
                "\"heads\": %lld, \"kv_heads\": %lld, \"dim\": %lld, "
                "\"dim_v\": %lld, \"causal\": %s, \"window_left\": %lld, "
                "\"window_right\": %lld, \"lens\": %s, \"segment_avg\": %lld, "
                "\"layout\": \"%s\", \"steps\": %d, "
                "\"block_q\": %lld, \"block_kv\": %lld, "
                "\"flops\": %.6e, \"pairs_max\": %.0f, \"seconds_median\": %.6e, "
                "\"rank_seconds_min\": %.6e, \"rank_seconds_avg\": %.6e, "
                "\"rank_seconds_max\": %.6e, \"busy_seconds_min\": %.6e, "
                "\"busy_seconds_max\": %.6e, \"thread_busy\": %.4f, "
                "\"gflops\": %.4f, "
                "\"sgemm_gflops\": %.4f, \"fraction_of_sgemm\": %.4f, "
                "\"comm_wait_fraction\": %.6f, \"bytes_sent\": %.0f, "
                "\"bytes_sent_avg\": %.0f, \"cross_node_bytes\": %.0f, "
                "\"cross_node_bytes_total\": %.0f, \"nodes\": %d, "
                "\"ranks_per_node\": %d, \"ring_order\": \"%s\", "
                "\"ring_gbps\": %.4f, \"peak_rss_bytes\": %.0f, "
                "\"peak_rss_bytes_min\": %.0f, \"model_bytes\": %.0f, "
                "\"max_rel_error\": %.3e, \"max_lse_error\": %.3e, "
                "\"verdict\": \"%s\"}%s\n",
                r->ranks, r->threads, r->mode, (long long)r->s.B,
                (long long)r->s.N, (long long)r->s.M, (long long)r->s.H,
                (long long)r->s.G, (long long)r->s.D, (long long)r->s.Dv,
                r->p.causal ? "true" : "false",
                (long long)(r->p.window ? r->p.window_left : -1),
                (long long)(r->p.window ? r->p.window_right : -1),
                r->lens ? "true" : "false", (long long)r->segment_avg,
                ra_layout_name(ra_params_layout(&r->p, r->segment_avg > 0)), r->steps,
                (long long)r->block_q, (long long)r->block_kv, r->flops,
                r->pairs_max, r->seconds_median, r->rank_seconds.min, r->rank_seconds.avg,
                r->rank_seconds.max, r->busy_seconds.min,
                r->busy_seconds.max, finite_or_zero(r->thread_busy),
                finite_or_zero(r->gflops),
                finite_or_zero(r->sgemm_gflops),
                finite_or_zero(r->gflops / r->sgemm_gflops),
                r->comm_wait_fraction, r->bytes_sent, r->bytes_sent_avg,
                r->cross_bytes, r->cross_bytes_total, r->nodes,
                r->ranks_per_node, r->node_aware ? "node" : "mpirun",
                finite_or_zero(r->ring_gbps), r->peak_rss.max,
                r->peak_rss.min, r->model_bytes,
                finite_or_zero(r->max_rel_error),
                finite_or_zero(r->max_lse_error), r->pass ? "PASS" : "FAIL",
                i + 1 < count ? "," : "");
    }
    fprintf(out, "]\n");
    return ferror(out) ? -1 : 0;
}

int bench_csv_write(FILE *out, const bench_result *rows, int count)
{
    fprintf(out, "ranks,threads,mode,batch,seq_q,seq_kv,heads,kv_heads,dim,"
                 "dim_v,causal,layout,block_q,block_kv,seconds_median,gflops,"
                 "sgemm_gflops,comm_wait_fraction,bytes_sent,ring_gbps,"
                 "peak_rss_bytes,model_bytes,max_rel_error,verdict\n");
    for (int i = 0; i < count; i++) {
        const bench_result *r = &rows[i];
        fprintf(out, "%d,%d,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%d,%s,%lld,"
                     "%lld,%.6e,%.4f,%.4f,%.6f,%.0f,%.4f,%.0f,%.0f,%.3e,%s\n",
                r->ranks, r->threads, r->mode, (long long)r->s.B,
                (long long)r->s.N, (long long)r->s.M, (long long)r->s.H,
                (long long)r->s.G, (long long)r->s.D, (long long)r->s.Dv,
                r->p.causal, ra_layout_name(ra_params_layout(&r->p, r->segment_avg > 0)),
                (long long)r->block_q, (long long)r->block_kv,
                r->seconds_median, r->gflops, r->sgemm_gflops,
                r->comm_wait_fraction, r->bytes_sent, r->ring_gbps,
                r->peak_rss.max, r->model_bytes, r->max_rel_error,
                r->pass ? "PASS" : "FAIL");
    }
    return ferror(out) ? -1 : 0;
}

/* The rows and the writer of one output file's format. */
typedef struct {
    const bench_result *rows;
    int nrows;
    int (*writer)(FILE *, const bench_result *, int);
} rows_file;

static int rows_fill(FILE *f, const void *arg)
{
    const rows_file *r = arg;
    return r->writer(f, r->rows, r->nrows);
}

/* Writes one output file of the rows (rank 0), atomically: the whole file
 * or, on a failed write, the earlier one (they are replaced if they
 * exist). */
static ra_status write_rows(const char *path, const bench_result *rows,
                            int nrows,
                            int (*writer)(FILE *, const bench_result *, int))
{
    const rows_file r = {rows, nrows, writer};
    return h5io_text_write(path, 1, rows_fill, &r);
}

ra_status bench_tables_check(const cli_ctx *ctx, const cli_tables *tab,
                             const char *profile)
{
    ra_status st = RA_OK;
    if (ctx->rank != 0)
        return RA_OK;
    st = h5io_paths_check((const h5io_named_path[]){
        {"--profile", profile, 0}, {"--json", tab->json, 1},
        {"--csv", tab->csv, 1}, {NULL, NULL, 0}});
    if (st == RA_OK && tab->json)
        st = h5io_output_check(tab->json, 1, NULL);
    if (st == RA_OK && tab->csv)
        st = h5io_output_check(tab->csv, 1, NULL);
    return st;
}

ra_status bench_tables_write(const cli_ctx *ctx, const cli_tables *tab,
                             const bench_result *rows, int nrows)
{
    ra_status st = RA_OK;
    if (ctx->rank == 0 && tab->json)
        st = write_rows(tab->json, rows, nrows, bench_json_write);
    if (st == RA_OK && ctx->rank == 0 && tab->csv)
        st = write_rows(tab->csv, rows, nrows, bench_csv_write);
    return st;
}
