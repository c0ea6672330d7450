/* profile_tmp.c: TEMPORARY stand-in for launch/profile_json.c of the probe
 * branch, so that plan links and tests here; removed at the merge. The
 * figures are this machine's, from docs/PERFORMANCE.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "profile_json.h"

void profile_default(ra_profile *p)
{
    memset(p, 0, sizeof *p);
    p->nodes = 1;
    p->ranks = p->ranks_per_node = p->threads = 1;
    p->nrates = 1;
    p->rate[0] = (profile_rate){64, 64, RA_SCORE_DOT, 106e9};
    p->intra = (profile_link){5e-6, 7.7e9};
    p->inter = (profile_link){0, 0};
    p->alltoall_intra = p->allgather_intra = 3e9;
    p->io_read = 0.8e9;
    p->io_write = 0.5e9;
    p->mem_per_node = (int64_t)23 << 30;
}

int profile_read_json(const char *path, ra_profile *p, char *err, size_t n)
{
    (void)p;
    snprintf(err, n, "%s: profile files are read on the probe branch", path);
    return -1;
}

int profile_write_json(FILE *f, const ra_profile *p)
{
    (void)f;
    (void)p;
    return -1;
}

double profile_kernel_rate(const ra_profile *p, int64_t D, int64_t Dv,
                           ra_score score)
{
    const profile_rate *best = NULL;
    for (int i = 0; i < p->nrates; i++) {
        const profile_rate *r = &p->rate[i];
        if (r->score != score && !(best == NULL && r->score == RA_SCORE_DOT))
            continue;
        if (r->D == D && r->Dv == Dv)
            return r->flops_per_core;
        if (!best || best->score != score ||
            llabs(r->D - D) < llabs(best->D - D))
            best = r;
    }
    return best ? best->flops_per_core : 1e9;
}
