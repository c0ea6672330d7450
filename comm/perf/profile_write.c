/* profile_write.c: a machine profile (profile.h) written as the JSON
 * file that profile_json.c reads back exactly (profile_json.h). */
#include <jansson.h>

#include "gemm.h"
#include "perf_json.h"
#include "profile_json.h"

/* Reals at 17 digits: a profile reads back exactly. */
enum { PROFILE_JSON_DIGITS = 17 };

static json_t *pj_kernel(const ra_profile *p)
{
    json_t *rates = json_array();
    for (int i = 0; i < p->nrates && rates; i++) {
        const profile_rate *r = &p->rate[i];
        if (json_array_append_new(rates, json_pack(
                "{s:I, s:I, s:s, s:s, s:s, s:s, s:f}", "D", (json_int_t)r->D,
                "Dv", (json_int_t)r->Dv, "score", ra_score_name(r->score),
                "gemm", ra_gemm_name(r->gemm), "precision",
                r->precision[0] ? r->precision : "fp32", "class",
                profile_class_name(r->cls),
                "flops_per_core", r->flops_per_core)) != 0) {
            json_decref(rates);
            rates = NULL;
        }
    }
    return rates;
}

int profile_write_json(FILE *f, const void *profile)
{
    const ra_profile *p = profile;
    json_t *head = json_pack(
        "{s:i, s:b, s:b, s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:i, s:o, "
        "s:{s:f, s:f}, s:{s:f, s:f}}", "schema", PROFILE_JSON_SCHEMA,
        "measured", p->measured, "oversubscribed", p->oversubscribed,
        "date", perf_json_text(p->date),
        "version", perf_json_text(p->version),
        "hosts", perf_json_text(p->hosts), "io_dir", perf_json_text(p->io_dir), "nodes", p->nodes,
        "ranks", p->ranks, "ranks_per_node", p->ranks_per_node,
        "threads", p->threads, "kernel", pj_kernel(p),
        "intra", "latency", p->intra.latency, "bandwidth", p->intra.bandwidth,
        "inter", "latency", p->inter.latency, "bandwidth", p->inter.bandwidth);
    json_t *rates = json_pack(
        "{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:f, s:f}",
        "alltoall_intra", p->alltoall_intra,
        "alltoall_inter", p->alltoall_inter,
        "allgather_intra", p->allgather_intra,
        "allgather_inter", p->allgather_inter,
        "reduce_scatter_intra", p->reduce_scatter_intra,
        "reduce_scatter_inter", p->reduce_scatter_inter,
        "io_read", p->io_read, "io_write", p->io_write,
        "mem_per_node", (json_int_t)p->mem_per_node,
        "call_seconds", p->call_seconds, "step_seconds", p->step_seconds);
    return perf_json_dump(f, perf_json_merge(head, rates),
                          PROFILE_JSON_DIGITS);
}
