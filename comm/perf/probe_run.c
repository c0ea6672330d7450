/* probe_run.c: the measurements of `ringattn probe` in order and each
 * kernel rate's yardsticks (probe.h). */
#include <string.h>

#include "bench_measure.h"
#include "probe.h"

enum {
    PROBE_COMM_ITEMS = 10, /* two links, six collectives, the I/O, the
                              fixed costs */
};

ra_status probe_run(MPI_Comm comm, const ra_nodes *nodes, double seconds,
                    ra_profile *p)
{
    probe_comms c;
    const double share = seconds / (p->nrates + PROBE_COMM_ITEMS);
    ra_status st = probe_comms_make(comm, nodes, share, &c);
    if (st != RA_OK)
        return st;
    probe_machine(&c, p);
    for (int i = 0; i < p->nrates; i++)
        p->rate[i].flops_per_core = probe_kernel(&c, &p->rate[i]);
    probe_fixed(&c, &p->call_seconds, &p->step_seconds);
    probe_links(&c, &p->intra, &p->inter);
    probe_collectives(&c, p);
    probe_comms_free(&c);
    return RA_OK;
}

void probe_yardsticks(MPI_Comm comm, const ra_profile *p, probe_yard *y)
{
    bench_yard by[2];
    int P;
    MPI_Comm_size(comm, &P);
    const double cores = (double)P * (p->threads > 0 ? p->threads : 1);
    int asked[2] = {0, 0}; /* a precision no rate has costs nothing */
    for (int i = 0; i < p->nrates; i++)
        asked[strcmp(p->rate[i].precision, "bf16") == 0] = 1;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        bench_yardsticks(comm, p->threads, bf16, !asked[bf16], &by[bf16]);
        if (!asked[bf16])
            snprintf(by[bf16].loop, sizeof by[bf16].loop, "none (no %s rate "
                     "asked)", bf16 ? "bf16" : "fp32");
    }
    for (int i = 0; i < p->nrates; i++) {
        const profile_rate *r = &p->rate[i];
        const int bf16 = strcmp(r->precision, "bf16") == 0;
        const ra_shape s = {.B = 1, .N = 4096, .M = 4096, .H = 4, .G = 4,
                            .D = r->D, .Dv = r->Dv};
        ra_params q;
        ra_params_default(&q);
        q.num.score = r->score;
        if (r->score == RA_SCORE_GAUSSIAN) /* the gaussian's alone */
            q.num.sigma = 4.0;
        q.exec.gemm = r->gemm;
        q.num.precision = bf16 ? RA_PRECISION_BF16 : RA_PRECISION_FP32;
        y[i].core = by[bf16].core / cores * 1e9; /* FLOP/s, as the rate */
        y[i].peak = by[bf16].peak / cores * 1e9;
        y[i].products = bench_products_rate(comm, &s, &q, 0, 0) / cores * 1e9;
        snprintf(y[i].loop_fp32, sizeof y[i].loop_fp32, "%s", by[0].loop);
        snprintf(y[i].loop_bf16, sizeof y[i].loop_bf16, "%s", by[1].loop);
    }
}
