/* probe_text.c: what `ringattn probe` prints (probe.h): the profile as a
 * table, and each kernel rate beside its yardsticks. */
#include "probe.h"

/* x in fmt into buf (32 bytes) when shown, else "-". */
static const char *cell_of(double x, int shown, const char *fmt, char *buf)
{
    if (shown)
        snprintf(buf, 32, fmt, x);
    else
        snprintf(buf, 32, "-");
    return buf;
}

/* A rate in units of scale, or "-" when not measured. */
static const char *cell(double x, double scale, char *buf)
{
    return cell_of(x / scale, x > 0, "%.2f", buf);
}

/* A line of the table: what, and rates a and b in units of sa and sb. */
static void pair(FILE *out, const char *what, double a, double sa, double b,
                 double sb)
{
    char x[32], y[32];
    fprintf(out, "  %-26s %8s %8s\n", what, cell(a, sa, x), cell(b, sb, y));
}

/* The head line of a part of the table and its two columns. */
static void part(FILE *out, const char *what, const char *a, const char *b)
{
    fprintf(out, "%-28s %8s %8s\n", what, a, b);
}

/* A kernel rate's name in the tables: score, engine (with it), precision
 * and tile class. */
static void rate_name(const profile_rate *r, int engine, char what[64])
{
    snprintf(what, 64, "%s%s%s %s %s", ra_score_name(r->score),
             engine ? " " : "", !engine ? ""
             : r->gemm == RA_GEMM_AUTO ? "(engine not recorded)"
                                       : ra_gemm_name(r->gemm),
             r->precision[0] ? r->precision : "fp32",
             profile_class_name(r->cls));
}

/* The head of the table: how the profile was made, and its kernel
 * rates. */
static void print_head(FILE *out, const ra_profile *p)
{
    char a[32], what[64];
    fprintf(out, "# ringattn probe: %s\n# %d ranks on %d node%s (at most %d "
            "per node), %d thread%s per rank%s; %s\n# %s\n# hosts: %s\n",
            p->measured ? "measured" : "built-in default, not measured",
            p->ranks, p->nodes, p->nodes == 1 ? "" : "s", p->ranks_per_node,
            p->threads, p->threads == 1 ? "" : "s",
            p->oversubscribed ? ", oversubscribed" : "", p->date, p->version,
            p->hosts);
    part(out, "kernel (per core)", "D = Dv", "GFLOP/s");
    for (int i = 0; i < p->nrates; i++) {
        rate_name(&p->rate[i], 1, what);
        fprintf(out, "  %-26s %8lld %8s\n", what, (long long)p->rate[i].D,
                cell(p->rate[i].flops_per_core, 1e9, a));
    }
}

/* x / of as a cell ("-" when of is not measured). */
static const char *fraction(double x, double of, char *buf)
{
    return cell_of(of > 0 ? x / of : 0.0, of > 0, "%.3f", buf);
}

/* Each kernel rate as a fraction of its three yardsticks. */
static void print_yards(FILE *out, const ra_profile *p, const probe_yard *y)
{
    char v[6][32], what[64];
    fprintf(out, "%-28s %8s %8s %8s %8s %6s %6s %6s\n",
            "yardsticks (per core)", "D = Dv", "core", "peak", "prod",
            "f_core", "f_peak", "f_prod");
    for (int i = 0; i < p->nrates; i++) {
        const double k = p->rate[i].flops_per_core;
        rate_name(&p->rate[i], 0, what);
        fprintf(out, "  %-26s %8lld %8s %8s %8s %6s %6s %6s\n", what,
                (long long)p->rate[i].D, cell(y[i].core, 1e9, v[0]),
                cell(y[i].peak, 1e9, v[1]), cell(y[i].products, 1e9, v[2]),
                fraction(k, y[i].core, v[3]), fraction(k, y[i].peak, v[4]),
                fraction(k, y[i].products, v[5]));
    }
    fprintf(out, "  (core: %s loop for fp32, %s for bf16)\n", y[0].loop_fp32,
            y[0].loop_bf16);
}

void probe_print(FILE *out, const ra_profile *p, const probe_yard *y)
{
    char a[32];
    print_head(out, p);
    part(out, "fixed costs (ms)", "call", "step");
    pair(out, "forward", p->call_seconds, 1e-3, p->step_seconds, 1e-3);
    part(out, "ring step (per rank)", "lat us", "GB/s");
    pair(out, "within a node", p->intra.latency, 1e-6, p->intra.bandwidth,
         1e9);
    pair(out, "between nodes", p->inter.latency, 1e-6, p->inter.bandwidth,
         1e9);
    part(out, "collectives (GB/s per rank)", "node", "across");
    pair(out, "all-to-all (sent)", p->alltoall_intra, 1e9,
         p->alltoall_inter, 1e9);
    pair(out, "all-gather (received)", p->allgather_intra, 1e9,
         p->allgather_inter, 1e9);
    pair(out, "reduce-scatter (sent)", p->reduce_scatter_intra, 1e9,
         p->reduce_scatter_inter, 1e9);
    part(out, "parallel HDF5 (GB/s, all)", "write", "read");
    pair(out, p->io_dir, p->io_write, 1e9, p->io_read, 1e9);
    part(out, "memory per node", "",
         cell((double)p->mem_per_node, 1073741824.0, a));
    fprintf(out, "  (GiB)\n");
    if (y)
        print_yards(out, p, y);
}
