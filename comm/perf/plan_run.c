/* plan_run.c: the predictions of a plan and `--strategy auto`'s pick for
 * a running job (plan_run.h). */
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "agree.h"
#include "plan_run.h"
#include "profile_json.h"

/* This machine's cores (at least 1). */
static int64_t machine_cores(void)
{
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

model_alloc plan_alloc(const perf_plan *w, int64_t P, int64_t K)
{
    const int64_t node = w->node_cores > 0 ? w->node_cores : machine_cores();
    const profile_kernel_key key = profile_key_of(&w->p, w->s.D, w->s.Dv);
    const double rate = w->kernel_rate > 0
                            ? w->kernel_rate * 1e9
                            : profile_kernel_rate(&w->pf, &key);
    return (model_alloc){.P = (int)P, .nodes = (int)K,
                         .cores = (int)(w->cores > 0 ? w->cores : K * node),
                         .core_rate = rate};
}

/* The links between nodes: w->pl's when w->pl.nodes > 0, or rate
 * (bits/s) and latency (s) in place of the profile's (0: kept); the
 * collectives between nodes then share that link. */
static void plan_links(perf_plan *w, double rate, double latency)
{
    const int pl = w->pl.nodes > 0;
    if (pl)
        platform_link(&w->pl, &w->pf);
    if (rate > 0)
        w->pf.inter.bandwidth = rate / 8.0;
    if (latency > 0)
        w->pf.inter.latency = latency;
    if (pl || rate > 0) {
        w->pf.alltoall_inter = w->pf.allgather_inter = 0;
        w->pf.reduce_scatter_inter = 0;
    }
    w->links_given = pl || rate > 0 || latency > 0;
}

/* A plan on the platform of file w->platform, read into w->pl: its
 * nodes' cores, and by default (w->nodes 0) one rank per node up to its
 * nodes. */
static ra_status plan_platform_fit(perf_plan *w)
{
    char why[512];
    const ra_platform *pl = &w->pl;
    if (platform_read(w->platform, &w->pl, why, sizeof why) != 0)
        return ra_error_set(RA_ERR_INPUT, "%s", why);
    w->node_cores = pl->cores;
    if (w->nodes == 0)
        w->nodes = w->ranks < pl->nodes ? w->ranks : pl->nodes;
    int64_t most = w->nodes;
    for (int i = 0; i < w->nsweep; i++)
        most = w->sweep[i] > most ? w->sweep[i] : most;
    if (most > pl->nodes)
        return ra_error_set(RA_ERR_ARG, "--platform %s: %lld nodes asked for "
                            "and the platform has %d", w->platform,
                            (long long)most, pl->nodes);
    if (w->ranks > w->nodes * pl->cores)
        return ra_error_set(RA_ERR_ARG, "--ranks: %lld ranks on %lld nodes "
                            "of %d cores (--platform %s)", (long long)w->ranks,
                            (long long)w->nodes, pl->cores, w->platform);
    return RA_OK;
}

plan_point plan_point_of(const perf_plan *w, int i)
{
    if (i < 0)
        return (plan_point){w->s, w->ranks, w->nodes, "none", &w->table};
    const int64_t per = w->ranks / w->nodes > 0 ? w->ranks / w->nodes : 1;
    const int64_t K = w->sweep[i / 2];
    plan_point at = {w->s, K * per, K, i % 2 ? "weak" : "strong",
                     w->sweeps ? &w->sweeps[i] : NULL};
    if (i % 2) {
        at.s.N = at.s.N * K / w->sweep[0];
        at.s.M = at.s.M * K / w->sweep[0];
    }
    return at;
}

/* Whether w's profile can time every allocation the plan predicts. */
static ra_status plan_profile_fits(const perf_plan *w)
{
    const profile_kernel_key key = profile_key_of(&w->p, w->s.D, w->s.Dv);
    ra_status st = RA_OK;
    for (int i = -1; i < 2 * w->nsweep && st == RA_OK; i += i < 0 ? 1 : 2) {
        const plan_point at = plan_point_of(w, i);
        const model_alloc al = plan_alloc(w, at.ranks, at.nodes);
        st = model_profile_check(w->profile, &w->pf, &al, &key, w->with_io);
    }
    return st;
}

ra_status plan_fit(perf_plan *w, int64_t P, int64_t K, double rate,
                   double latency, int timed)
{
    ra_status st = RA_OK;
    if (w->ranks == 0)
        w->ranks = P;
    if (w->platform)
        st = plan_platform_fit(w);
    if (st == RA_OK && w->nodes == 0)
        w->nodes = w->ranks == P ? K : 1;
    if (st == RA_OK && w->nodes > w->ranks)
        st = ra_error_set(RA_ERR_ARG, "--nodes: %lld nodes for %lld ranks "
                          "(at least one rank per node)",
                          (long long)w->nodes, (long long)w->ranks);
    if (st == RA_OK)
        st = profile_load(w->profile, &w->pf);
    if (st == RA_OK)
        plan_links(w, rate, latency);
    return st == RA_OK && timed ? plan_profile_fits(w) : st;
}

ra_status plan_masks_random(perf_plan *w, uint64_t seed, int lens,
                            int64_t segment_avg, bench_masks *bm)
{
    const ra_shape *s = &w->s;
    const ra_slice qall = {1, {{0, s->N, 1}}, s->N};
    const ra_slice kall = {1, {{0, s->M, 1}}, s->M};
    const bench_gen gen = {.seed = seed, .lens = lens,
                           .segment_avg = segment_avg};
    const ra_status st = bench_masks_make(&gen, s, &qall, &kall, bm);
    w->mk = (model_masks){bm->q_lens, bm->kv_lens, bm->q_seg, bm->kv_seg};
    return st;
}

ra_status plan_evaluate(perf_plan *w)
{
    const double t0 = MPI_Wtime();
    const model_alloc al = plan_alloc(w, w->ranks, w->nodes);
    ra_status st = model_evaluate(&w->s, &w->p, w->layout_auto, &w->mk, &al,
                                  &w->pf, w->with_io, &w->table);
    w->seconds = MPI_Wtime() - t0;
    if (st != RA_OK || w->nsweep == 0)
        return st;
    w->sweeps = calloc((size_t)(2 * w->nsweep), sizeof(model_table));
    if (!w->sweeps)
        return ra_error_set(RA_ERR_NOMEM, "plan: out of memory");
    for (int i = 0; i < 2 * w->nsweep && st == RA_OK; i++) {
        const plan_point at = plan_point_of(w, i);
        const model_alloc a = plan_alloc(w, at.ranks, at.nodes);
        st = model_evaluate(&at.s, &w->p, w->layout_auto,
                            i % 2 ? NULL : &w->mk, &a, &w->pf, w->with_io,
                            &w->sweeps[i]);
    }
    return st;
}

void plan_max_seq(const perf_plan *w, const model_alloc *al,
                  int64_t n[RA_STRATEGY_COUNT],
                  double bytes[RA_STRATEGY_COUNT])
{
    for (int k = 0; k < RA_STRATEGY_COUNT; k++) {
        ra_params p = w->p;
        model_use_strategy(&p, (ra_strategy)k);
        const ra_layout lay = ra_params_layout(&p, 0);
        n[k] = model_max_seq(&w->s, &p, lay, al, &w->pf);
        ra_shape s = w->s;
        s.N = s.M = n[k] > 0 ? n[k] : 1;
        bytes[k] = model_rank_bytes(&s, &p, lay, al->P, 0);
    }
}

/* The running job's allocation (ring order, nodes, the machines' cores)
 * for the model; node_of (P entries) is filled. Collective. */
static ra_status job_alloc(const plan_job *j, const ra_params *p,
                           const ra_profile *pf, const ra_shape *s,
                           int *node_of, model_alloc *al)
{
    int P;
    MPI_Comm_size(j->comm, &P);
    uint64_t *ids = malloc(sizeof(uint64_t) * (size_t)P);
    ra_status st = ra_agree(j->comm, ids ? RA_OK
                            : ra_error_set(RA_ERR_NOMEM, "plan: out of "
                                                         "memory"));
    if (st != RA_OK) {
        free(ids);
        return st;
    }
    MPI_Allgather(&j->node, 1, MPI_INT, node_of, 1, MPI_INT, j->comm);
    MPI_Allgather(&j->machine, 1, MPI_UINT64_T, ids, 1, MPI_UINT64_T,
                  j->comm);
    int machines = 0;
    for (int r = 0; r < P; r++) {
        int seen = 0;
        for (int i = 0; i < r && !seen; i++)
            seen = ids[i] == ids[r];
        machines += !seen;
    }
    free(ids);
    const profile_kernel_key key = profile_key_of(p, s->D, s->Dv);
    *al = (model_alloc){.P = P, .nodes = j->nodes,
                        .cores = machines * (int)machine_cores(),
                        .node_of = node_of,
                        .core_rate = profile_kernel_rate(pf, &key)};
    return RA_OK;
}

/* Every strategy for this job under the resolved layout of p, into a new
 * *out (the caller frees it, also on failure). A profile that cannot
 * predict this job: RA_ERR_INPUT and *unusable set. Collective. */
static ra_status job_table(const plan_job *j, const ra_shape *s,
                           const ra_params *p, const model_masks *masks,
                           const char *profile, model_table **out,
                           int *unusable)
{
    int P;
    MPI_Comm_size(j->comm, &P);
    ra_profile *pf = malloc(sizeof *pf);
    int *node_of = malloc(sizeof(int) * (size_t)P);
    *out = malloc(sizeof **out);
    ra_status st = pf && node_of && *out
                   ? RA_OK : ra_error_set(RA_ERR_NOMEM, "plan: out of memory");
    if (st == RA_OK)
        st = profile_load(profile, pf);
    if ((st = ra_agree(j->comm, st)) != RA_OK)
        goto cleanup;
    model_alloc al;
    if ((st = job_alloc(j, p, pf, s, node_of, &al)) != RA_OK)
        goto cleanup;
    const profile_kernel_key key = profile_key_of(p, s->D, s->Dv);
    *unusable = (st = model_profile_check(profile, pf, &al, &key, 0)) !=
                RA_OK;
    if (st != RA_OK) /* the same verdict on every rank: the same inputs */
        goto cleanup;
    ra_params q = *p; /* every strategy is evaluated; p's may be auto */
    q.exec.strategy = RA_STRATEGY_RING;
    st = ra_agree(j->comm,
                  model_evaluate(s, &q, 0, masks, &al, pf, 0, *out));
cleanup:
    free(pf);
    free(node_of);
    return st;
}

ra_status plan_job_pick(const plan_job *j, const ra_shape *s, ra_params *p,
                        const model_masks *masks, const char *profile,
                        model_result *pick, int *unusable)
{
    model_table *t;
    *unusable = 0;
    ra_status st = job_table(j, s, p, masks, profile, &t, unusable);
    if (*unusable) { /* run on the ring, never on a prediction of NaN */
        memset(pick, 0, sizeof *pick);
        model_use_strategy(p, pick->strategy = RA_STRATEGY_RING);
        st = RA_OK;
    } else if (st == RA_OK && t->best < 0) {
        st = ra_error_set(RA_ERR_ARG, "--strategy auto: no strategy takes "
                          "this problem (ring: %s)", t->row[0].why);
    } else if (st == RA_OK) {
        *pick = t->row[t->best];
        model_use_strategy(p, pick->strategy);
    }
    free(t);
    return st;
}

ra_status plan_job_predict(const plan_job *j, const ra_shape *s,
                           const ra_params *p, const model_masks *masks,
                           const char *profile, model_result *out)
{
    model_table *t;
    int unusable = 0;
    ra_status st = job_table(j, s, p, masks, profile, &t, &unusable);
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
