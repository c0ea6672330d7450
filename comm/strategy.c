/* strategy.c: the set-up every strategy beside the ring shares: checks,
 * agreement, sizes, the kernel's view of a block, the float32 range check,
 * and the dispatch to one strategy's file.
 *
 * Discipline as in ring.c: validate locally, agree, then collectives. */
#include <math.h>
#include <string.h>

#include "agree.h"
#include "internal.h"
#include "range.h"
#include "strategy.h"

/* What a strategy other than ring refuses before any work. */
static ra_status strat_check(const ra_shape *s, const ra_params *p,
                             const ra_masks *mk)
{
    ra_status st = ring_check_params(s, p, mk);
    if (st != RA_OK)
        return st;
    if (p->score == RA_SCORE_ADDITIVE)
        return ra_error_set(RA_ERR_ARG, "strategy %s: the additive score "
                            "runs on strategy ring only",
                            ra_strategy_name(p->strategy));
    return RA_OK;
}

void strat_block_init(const strat_call *c, int64_t n, const int64_t *qpos,
                      const int64_t *q_seg, ra_block *blk)
{
    const ra_shape *s = c->shape;
    const ra_params *p = c->params;
    const ra_masks *mk = c->masks;
    const int gauss = p->score == RA_SCORE_GAUSSIAN;
    int64_t bq, bkv;
    ra_params_tiles(p, s, &bq, &bkv);
    memset(blk, 0, sizeof *blk);
    blk->B = s->B;
    blk->n = n;
    blk->H = s->H;
    blk->G = s->G;
    blk->D = s->D;
    blk->Dv = s->Dv;
    blk->alpha = (float)(gauss ? M_LOG2E / (p->sigma * p->sigma)
                               : ra_params_scale(p, s) * M_LOG2E);
    blk->block_q = bq;
    blk->block_kv = bkv;
    blk->score = p->score;
    blk->nan_check = p->nonfinite;
    blk->half_inv_sigma2 = gauss ? 0.5 / (p->sigma * p->sigma) : 0.0;
    blk->mask = (ra_mask){.causal = p->causal, .diag = s->M - s->N,
                          .window = p->window, .left = p->window_left,
                          .right = p->window_right, .qpos = qpos,
                          .q_lens = mk ? mk->q_lens : NULL,
                          .kv_lens = mk ? mk->kv_lens : NULL,
                          .q_seg = q_seg};
}

int64_t strat_slice_pos(const strat_call *c, int64_t len, int j,
                        int64_t *pos)
{
    const ra_slice sl = ra_layout_slice(c->lay, len, j, c->P);
    for (int64_t i = 0; i < sl.count; i++)
        pos[i] = ra_slice_pos(&sl, i);
    return sl.count;
}

ra_status strat_check_range(const strat_call *c)
{
    int64_t block_keys = 0;
    if (c->params->nonfinite)
        return RA_OK;
    for (int j = 0; j < c->P; j++) {
        const int64_t m = ra_layout_slice(c->lay, c->shape->M, j, c->P).count;
        block_keys = m > block_keys ? m : block_keys;
    }
    const ra_input_bounds mine = ra_input_bounds_of(c->shape, c->n, c->m_own,
                                                    c->q, c->k, c->v,
                                                    ra_params_threads(c->params));
    double in[3] = {mine.q_norm, mine.k_norm, mine.v_abs}, all[3];
    if (MPI_Allreduce(in, all, 3, MPI_DOUBLE, MPI_MAX, c->comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Allreduce of the input "
                            "bounds failed",
                            ra_strategy_name(c->params->strategy));
    const ra_input_bounds bounds = {all[0], all[1], all[2]};
    return ra_input_bounds_check(c->shape, c->params, &bounds, block_keys);
}

/* This rank's sizes under the resolved layout. */
static ra_status strat_size(strat_call *c)
{
    if (MPI_Comm_size(c->comm, &c->P) != MPI_SUCCESS ||
        MPI_Comm_rank(c->comm, &c->r) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: cannot query the communicator",
                            ra_strategy_name(c->params->strategy));
    c->segs = c->masks && c->masks->q_segments;
    c->lay = ra_params_layout(c->params, c->segs);
    c->n = ra_layout_slice(c->lay, c->shape->N, c->r, c->P).count;
    c->m_own = ra_layout_slice(c->lay, c->shape->M, c->r, c->P).count;
    return RA_OK;
}

static ra_status strategy_run(strat_call *c)
{
    switch (c->params->strategy) {
    case RA_STRATEGY_ALLGATHER:
        return allgather_forward(c);
    case RA_STRATEGY_TREE:
        return tree_forward(c);
    case RA_STRATEGY_RING_Q:
        return ringq_forward(c);
    case RA_STRATEGY_ULYSSES:
        return ulysses_forward(c);
    case RA_STRATEGY_HYBRID:
        return hybrid_forward(c);
    default:
        return ra_error_set(RA_ERR_ARG, "strategy %d is not one of ring, "
                            "allgather, tree, ring-q, ulysses, hybrid",
                            (int)c->params->strategy);
    }
}

ra_status ra_strategy_check(MPI_Comm comm, const ra_shape *shape,
                            const ra_params *params, int segments)
{
    ra_error_clear();
    int P = 1;
    if (params->strategy == RA_STRATEGY_RING)
        return RA_OK;
    ra_status st = strat_check(shape, params, NULL);
    if (MPI_Comm_size(comm, &P) != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "strategy: cannot query the "
                                      "communicator");
    if (st == RA_OK && params->strategy == RA_STRATEGY_ULYSSES)
        st = ulysses_fits(shape, P);
    st = ra_agree(comm, st);
    if (st == RA_OK && params->strategy == RA_STRATEGY_ALLGATHER)
        st = ra_agree(comm, allgather_fits(comm, shape, params, segments));
    if (st == RA_OK && params->strategy == RA_STRATEGY_HYBRID) {
        int u;
        st = ra_agree(comm, hybrid_group_size(comm, shape, params, &u));
    }
    return st;
}

void strat_step(strat_call *c, int done, int total)
{
    c->stepped = 1;
    ra_step_report(c->params, done, total);
}

ra_status strategy_forward(MPI_Comm comm, const ra_shape *shape,
                           const ra_params *params, const ra_masks *masks,
                           const float *q, const float *k, const float *v,
                           float *o, float *lse, ra_timing *timing)
{
    const double t_start = MPI_Wtime();
    ra_timing tm = {0};
    strat_call c = {.comm = MPI_COMM_NULL, .shape = shape, .params = params,
                    .masks = masks, .q = q, .k = k, .v = v, .o = o,
                    .lse = lse, .tm = &tm};
    ra_status st = strat_check(shape, params, masks);
    if (MPI_Comm_dup(comm, &c.comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_dup failed",
                            ra_strategy_name(params->strategy));
    st = ra_agree(c.comm, st);
    if (st == RA_OK)
        st = ra_agree(c.comm, strat_size(&c));
    if (st == RA_OK) {
        const int blas = ra_blas_enter(1);
        st = strategy_run(&c);
        ra_blas_leave(blas);
        if (st == RA_OK && !c.stepped) /* a strategy without steps */
            ra_step_report(params, 1, 1);
    }
    if (MPI_Comm_free(&c.comm) != MPI_SUCCESS && st == RA_OK)
        st = ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_free failed",
                          ra_strategy_name(params->strategy));
    tm.total = MPI_Wtime() - t_start;
    tm.steps = st == RA_OK ? c.P : 0;
    if (timing)
        *timing = tm;
    return st;
}
