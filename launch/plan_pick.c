/* plan_pick.c: the model over every strategy and layout, the running job's
 * allocation, and `--strategy auto`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "agree.h"
#include "internal.h"
#include "placement.h"
#include "plan.h"
#include "profile_json.h"

void plan_profile_warn(const cli_ctx *ctx, const char *path,
                       const ra_profile *pf)
{
    if (ctx->rank != 0 || !path || !pf->oversubscribed)
        return;
    fprintf(stderr, "ringattn: warning: %s: probed oversubscribed (more ranks "
            "x threads than cores on a machine): its rates are shares of a "
            "core, so the predictions run slow; probe again with a rank per "
            "core\n", path);
    fflush(stderr);
}

ra_status plan_job_alloc(const cli_ctx *ctx, const ra_params *p,
                         const ra_profile *pf, const ra_shape *s,
                         int *node_of, model_alloc *al)
{
    const int P = ctx->nranks;
    uint64_t mine = cli_machine_id();
    uint64_t *ids = malloc(sizeof(uint64_t) * (size_t)P);
    ra_status st = ra_agree(ctx->comm, ids ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "plan: out of "
                                                         "memory"));
    if (st != RA_OK) {
        free(ids);
        return st;
    }
    MPI_Allgather(&ctx->nodes.node, 1, MPI_INT, node_of, 1, MPI_INT,
                  ctx->comm);
    MPI_Allgather(&mine, 1, MPI_UINT64_T, ids, 1, MPI_UINT64_T, ctx->comm);
    int machines = 0;
    for (int r = 0; r < P; r++) {
        int seen = 0;
        for (int j = 0; j < r && !seen; j++)
            seen = ids[j] == ids[r];
        machines += !seen;
    }
    free(ids);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const profile_kernel_key key = profile_key_of(p, s->D, s->Dv);
    *al = (model_alloc){.P = P, .nodes = ctx->nodes.nodes,
                        .cores = machines * (int)(cores > 0 ? cores : 1),
                        .node_of = node_of,
                        .core_rate = profile_kernel_rate(pf, &key)};
    return RA_OK;
}

/* Every strategy for this job under the resolved layout of p, into a new
 * *out (the caller frees it, also on failure). A profile that cannot
 * predict this job: RA_ERR_INPUT and *unusable set. Collective. */
static ra_status plan_job_table(const cli_ctx *ctx, const ra_shape *s,
                                const ra_params *p, const model_masks *masks,
                                const char *profile, model_table **out,
                                int *unusable)
{
    ra_profile *pf = malloc(sizeof *pf);
    int *node_of = malloc(sizeof(int) * (size_t)ctx->nranks);
    *out = malloc(sizeof **out);
    ra_status st = pf && node_of && *out
                   ? RA_OK : ra_error_set(RA_ERR_NOMEM, "plan: out of memory");
    if (st == RA_OK)
        st = profile_load(profile, pf);
    if ((st = ra_agree(ctx->comm, st)) != RA_OK)
        goto cleanup;
    model_alloc al;
    if ((st = plan_job_alloc(ctx, p, pf, s, node_of, &al)) != RA_OK)
        goto cleanup;
    const profile_kernel_key key = profile_key_of(p, s->D, s->Dv);
    *unusable = (st = model_profile_check(profile, pf, &al, &key, 0)) !=
                RA_OK;
    if (st != RA_OK) /* the same verdict on every rank: the same inputs */
        goto cleanup;
    ra_params q = *p; /* every strategy is evaluated; p's may be auto */
    q.exec.strategy = RA_STRATEGY_RING;
    st = ra_agree(ctx->comm,
                  model_evaluate(s, &q, 0, masks, &al, pf, 0, *out));
cleanup:
    free(pf);
    free(node_of);
    return st;
}

ra_status plan_pick(const cli_ctx *ctx, const ra_shape *s, ra_params *p,
                    const model_masks *masks, const char *profile,
                    model_result *pick)
{
    model_table *t;
    int unusable = 0;
    ra_status st = plan_job_table(ctx, s, p, masks, profile, &t, &unusable);
    if (unusable) { /* run on the ring, never on a prediction of NaN */
        if (ctx->rank == 0)
            fprintf(stderr, "ringattn: warning: --strategy auto: %s; "
                    "running the ring\n", ra_error_message());
        memset(pick, 0, sizeof *pick);
        p->exec.strategy = pick->strategy = RA_STRATEGY_RING;
        st = RA_OK;
    } else if (st == RA_OK && t->best < 0) {
        st = ra_error_set(RA_ERR_ARG, "--strategy auto: no strategy takes "
                          "this problem (ring: %s)", t->row[0].why);
    } else if (st == RA_OK) {
        *pick = t->row[t->best];
        p->exec.strategy = pick->strategy;
    }
    free(t);
    return st;
}

ra_status plan_predict(const cli_ctx *ctx, const ra_shape *s,
                       const ra_params *p, const model_masks *masks,
                       const char *profile, model_result *out)
{
    model_table *t;
    int unusable = 0;
    ra_status st = plan_job_table(ctx, s, p, masks, profile, &t, &unusable);
    for (int k = 0; st == RA_OK && k <= t->nrows; k++) {
        if (k == t->nrows)
            st = RA_ERR_ARG; /* the model says it does not apply */
        else if (t->row[k].strategy == p->exec.strategy && t->row[k].applies) {
            *out = t->row[k];
            break;
        }
    }
    free(t);
    return st;
}

void plan_pick_print(const cli_ctx *ctx, const model_result *pick,
                     const char *profile)
{
    if (ctx->rank != 0)
        return;
    printf("# %-10s %s, chosen by the plan (--strategy auto)\n", "auto",
           ra_strategy_name(pick->strategy));
    printf("# %-10s %.3f s (compute %.3f, comm %.3f, imbalance %.3f), "
           "%s\n", "predicted", pick->t_total, pick->t_compute, pick->t_comm,
           pick->t_imbalance,
           profile ? profile : "built-in profile of this machine, not probed");
    fflush(stdout);
}
