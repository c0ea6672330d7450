/* bench_report.c: the table of `ringattn bench` and `ringattn bench
 * --backward`, and its JSON and CSV files (comm/perf/bench_rows.c writes
 * their text), as plan's files are checked and written too. */
#include "bench.h"
#include "h5io.h"
#include "internal.h"

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
            "wait%", "MB_sent",
            "MB_xnode", "MB_xn_all", "ring_GB/s", "rss_MB", "model_MB", "rel_err", "verdict",
            "core", "f_core", "prod", "f_prod");
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
            100.0 * r->comm_wait_fraction,
            r->bytes_sent / 1e6, r->cross_bytes / 1e6,
            r->cross_bytes_total / 1e6, r->ring_gbps, r->peak_rss.max / 1048576.0,
            r->model_bytes / 1048576.0, r->max_rel_error,
            r->pass ? "PASS" : "FAIL", core, f_core, prod, f_prod);
    fflush(out);
}

ra_status cli_tables_check(const cli_tables *tab, const char *in,
                           const char *profile)
{
    const char *const inputs[] = {in, NULL};
    ra_status st = h5io_paths_check((const h5io_named_path[]){
        {"--in", in, 0}, {"--profile", profile, 0}, {"--json", tab->json, 1},
        {"--csv", tab->csv, 1}, {NULL, NULL, 0}});
    if (st == RA_OK && tab->json)
        st = h5io_output_check(tab->json, 1, inputs);
    if (st == RA_OK && tab->csv)
        st = h5io_output_check(tab->csv, 1, inputs);
    return st;
}

ra_status cli_tables_write(const cli_tables *tab,
                           int (*json)(FILE *, const void *),
                           int (*csv)(FILE *, const void *), const void *arg)
{
    ra_status st = RA_OK;
    if (tab->json)
        st = h5io_text_write(tab->json, 1, json, arg);
    if (st == RA_OK && tab->csv)
        st = h5io_text_write(tab->csv, 1, csv, arg);
    return st;
}

/* Rows as cli_tables_write fills its files with them. */
typedef struct {
    const bench_result *rows;
    int nrows;
} rows_of;

static int json_fill(FILE *f, const void *arg)
{
    const rows_of *r = arg;
    return bench_json_write(f, r->rows, r->nrows);
}

static int csv_fill(FILE *f, const void *arg)
{
    const rows_of *r = arg;
    return bench_csv_write(f, r->rows, r->nrows);
}

ra_status bench_tables_write(const cli_ctx *ctx, const cli_tables *tab,
                             const bench_result *rows, int nrows)
{
    const rows_of r = {rows, nrows};
    return ctx->rank == 0 ? cli_tables_write(tab, json_fill, csv_fill, &r)
                          : RA_OK;
}
