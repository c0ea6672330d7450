/* bench_run.c: one measured configuration of `ringattn bench`
 * (bench_run.h). */
#include <math.h>
#include <string.h>

#include "agree.h"
#include "band.h"
#include "bench_run.h"
#include "call.h"
#include "model.h"
#include "score_features.h"
#include "tally.h"

void bench_inputs_make(uint64_t seed, const ra_shape *s, int backward,
                       const bench_operands *x)
{
    ra_random_slice(seed, RA_STREAM_Q, s->B, s->N, s->H * s->D, &x->qs, x->q);
    ra_random_slice(seed, RA_STREAM_K, s->B, s->M, s->G * ra_shape_dk(s),
                    &x->ks, x->k);
    ra_random_slice(seed, RA_STREAM_V, s->B, s->M, s->G * s->Dv, &x->ks, x->v);
    if (backward)
        ra_random_slice(seed, RA_STREAM_DO, s->B, s->N, s->H * s->Dv, &x->qs,
                        x->dout);
}

/* Warm-up and timed passes, a barrier before each; a backward pass after
 * one forward for o and lse. */
static ra_status passes_run(MPI_Comm comm, const bench_config *c,
                            const bench_operands *x, const bench_masks *bm,
                            bench_reps *reps)
{
    const ra_params *p = c->gen.p;
    const ra_qkv in = {x->q, x->k, x->v};
    const ra_out out = {x->o, x->lse, NULL};
    const ra_grads g = {x->o, x->lse, x->dout, x->dq, x->dk, x->dv, x->dw};
    const ra_baseline_operands naive = {x->q, x->k, x->v, x->o, x->lse};
    ra_status st = c->backward ? ra_call_forward(comm, c->s, p, NULL, &in,
                                                 &out, NULL)
                               : RA_OK;
    for (int64_t rep = -c->warmup; rep < c->reps && st == RA_OK; rep++) {
        MPI_Barrier(comm);
        st = c->backward ? ra_call_backward(comm, c->s, p, NULL, &in, &g,
                                            &reps->tm)
             : c->naive  ? ra_baseline_forward(comm, c->s, p, &naive,
                                               &reps->tm)
                         : ra_call_forward(comm, c->s, p, &bm->view, &in,
                                           &out, &reps->tm);
        if (rep >= 0)
            bench_reps_record(reps, rep);
    }
    return st;
}

/* The bytes this rank is expected to hold: its slices, plus what the
 * strategy holds (model_rank_bytes, the plan's own formula) or, naive,
 * the gathered K/V and a score row block, or, backward, the gradients and
 * the ring's 2 K/V and 3 dK|dV buffers of the largest key slice. */
static double rank_bytes(MPI_Comm comm, const bench_config *c,
                         const bench_operands *x)
{
    const ra_shape *s = c->s;
    const ra_params *p = c->gen.p;
    int P, rank;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &rank);
    const double n = (double)x->qs.count, m = (double)x->ks.count;
    const double q = s->B * n * s->H * s->D, o = s->B * n * s->H * s->Dv;
    const double kv = s->B * m * s->G * (ra_shape_dk(s) + s->Dv);
    const double lse = s->B * n * s->H, kv_all = s->B * s->M * s->G *
                                                 (s->D + s->Dv);
    if (c->naive)
        return (q + kv + o + lse) * 4.0 + 4.0 * kv_all + 4.0 * n * s->M;
    if (!c->backward)
        return model_rank_bytes(s, p, p->exec.layout, P, rank);
    int64_t mmax = 0;
    for (int r = 0; r < P; r++) {
        const int64_t k = ra_params_slice(p, p->exec.layout, s->M, r, P).count;
        mmax = k > mmax ? k : mmax;
    }
    return 4.0 * (2 * (q + kv + o) + lse +
                  5.0 * s->B * mmax * s->G * (s->D + s->Dv));
}

/* 1 when the n floats of x are finite. */
static int all_finite(const float *x, double n)
{
    for (int64_t i = 0; i < (int64_t)n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

void bench_row_verdict(MPI_Comm comm, const bench_config *c,
                       const bench_operands *x, const bench_masks *bm,
                       bench_result *r)
{
    const ra_shape *s = c->s;
    if (c->backward) {
        const double n = (double)x->qs.count, m = (double)x->ks.count;
        int finite = all_finite(x->dq, s->B * n * s->H * s->D) &&
                     all_finite(x->dk, s->B * m * s->G * ra_shape_dk(s)) &&
                     all_finite(x->dv, s->B * m * s->G * s->Dv);
        MPI_Allreduce(MPI_IN_PLACE, &finite, 1, MPI_INT, MPI_MIN, comm);
        r->pass = finite;
        return;
    }
    ra_tally mine = {0}, all = {0};
    bench_check_output(&c->gen, s, &x->qs, bm, x->o, x->lse, &mine);
    if (ra_tally_allreduce(comm, &mine, &all) != RA_OK)
        all.bad_inf = 1;
    r->max_rel_error = all.rel_o;
    r->max_lse_error = all.bad_inf ? INFINITY : all.max_lse;
    r->pass = ra_tally_ok(&all, RA_TOLERANCE);
}

/* Useful FLOPs of one pass: the visible pairs times what one costs
 * (ra_pair_flops, as ra_forward_flops counts), the busiest rank's pairs;
 * a backward pass's FLOPs. Collective. */
static void row_flops(MPI_Comm comm, const bench_config *c,
                      const bench_operands *x, const bench_masks *bm,
                      bench_result *r)
{
    const ra_params *p = c->gen.p;
    if (c->backward) {
        r->flops = ra_params_backward_flops(c->s, p, NULL);
        return;
    }
    double pairs = bench_local_pairs(&c->gen, c->s, &x->qs, bm), all = 0;
    MPI_Allreduce(&pairs, &all, 1, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Allreduce(&pairs, &r->pairs_max, 1, MPI_DOUBLE, MPI_MAX, comm);
    r->flops = ra_pair_flops(c->s, p) * all;
}

void bench_row_begin(MPI_Comm comm, const bench_config *c, bench_reps *reps,
                     bench_result *r)
{
    const ra_params *p = c->gen.p;
    memset(r, 0, sizeof *r);
    r->s = *c->s;
    r->p = *p;
    MPI_Comm_size(comm, &r->ranks);
    r->threads = ra_params_threads(p);
    r->mode = c->backward ? "backward" : c->naive ? "naive"
                          : ra_strategy_name(p->exec.strategy);
    ra_params_tiles(p, c->s, &r->block_q, &r->block_kv);
    bench_times(comm, c->reps, reps, r);
    r->nodes = c->place.nodes;
    r->ranks_per_node = c->place.ranks_per_node;
    r->node_aware = c->place.node_aware;
    r->steps = c->naive ? 1 : reps->tm.steps;
    r->lens = c->gen.lens;
    r->segment_avg = c->gen.segment_avg;
}

/* Everything a row says about one measured configuration. Collective. */
static void row_fill(MPI_Comm comm, const bench_config *c,
                     const bench_operands *x, const bench_masks *bm,
                     bench_reps *reps, bench_result *r)
{
    const ra_params *p = c->gen.p;
    bench_row_begin(comm, c, reps, r);
    row_flops(comm, c, x, bm, r);
    r->gflops = r->flops / r->seconds_median * 1e-9;
    r->sgemm_gflops = c->yard->sgemm;
    r->peak_gflops = c->yard->peak;
    r->core_gflops = c->yard->core;
    r->products_gflops = bench_products_rate(comm, c->s, p, c->backward,
                                             c->no_yardsticks);
    r->model_bytes = bench_spread(comm, rank_bytes(comm, c, x)).max;
    r->ring_gbps = c->naive ? 0.0 : bench_ring_bandwidth(comm, c->s, p,
                                                         p->exec.layout);
    bench_row_verdict(comm, c, x, bm, r);
}

ra_status bench_config_run(MPI_Comm comm, const bench_config *c,
                           const bench_operands *x, bench_result *res)
{
    bench_reps reps = {0};
    bench_masks bm = {0};
    ra_status st = bench_reps_alloc(&reps, c->reps, c->backward
                                    ? "bench --backward" : "bench");
    if (st == RA_OK && !c->backward)
        st = bench_masks_make(&c->gen, c->s, &x->qs, &x->ks, &bm);
    if ((st = ra_agree(comm, st)) == RA_OK) {
        bench_inputs_make(c->gen.seed, c->s, c->backward, x);
        bench_rss_reset();
        st = passes_run(comm, c, x, &bm, &reps);
        reps.rss = bench_rss_peak();
    }
    if (st == RA_OK)
        row_fill(comm, c, x, &bm, &reps, res);
    bench_masks_free(&bm);
    bench_reps_free(&reps);
    const ra_params *p = c->gen.p;
    if (st != RA_OK || !c->plain ||
        (!ra_features_first(&p->num) && !p->num.sinks))
        return st;
    ra_params q = *p; /* the plain pass beside */
    ra_features_copy(&q.num, NULL);
    q.num.sinks = NULL;
    bench_config plain = *c;
    plain.gen.p = &q;
    plain.plain = NULL;
    return bench_config_run(comm, &plain, x, c->plain);
}

int bench_strategy_applies(const ra_params *p, const ra_shape *s, int P)
{
    if (p->exec.strategy != RA_STRATEGY_RING &&
        p->num.score == RA_SCORE_ADDITIVE)
        return 0;
    return p->exec.strategy != RA_STRATEGY_ULYSSES || s->H >= P;
}
