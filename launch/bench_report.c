/* bench_report.c: the JSON and CSV files of `ringattn bench` and
 * `ringattn bench --backward` (comm/perf/bench_rows.c writes their text),
 * checked and written as plan's are too. */
#include "bench.h"
#include "h5io.h"
#include "internal.h"

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

ra_status bench_tables_write(const cli_ctx *ctx, const cli_tables *tab,
                             const bench_result *rows, int nrows)
{
    const bench_table t = {rows, nrows};
    return ctx->rank == 0 ? cli_tables_write(tab, bench_table_json,
                                             bench_table_csv, &t)
                          : RA_OK;
}
