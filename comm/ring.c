/* ring.c: ra_forward and its variants: the set-up, the passes and the
 * tear-down of one ring call (the steps themselves are in ring_pass.c).
 *
 * Discipline: validate locally, agree over the ranks (ra_agree), then start
 * the collectives, so that a refusal on one rank never leaves the others
 * waiting inside the ring. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "agree.h"
#include "align.h"
#include "internal.h"
#include "range.h"
#include "nodes.h"
#include "ring.h"
#include "strategy.h"

static ra_status check_score(const ra_shape *s, const ra_params *p)
{
    if (p->score == RA_SCORE_GAUSSIAN && !(p->sigma > 0 && isfinite(p->sigma)))
        return ra_error_set(RA_ERR_ARG, "score gaussian: sigma must be a "
                                        "finite number > 0");
    if (p->score == RA_SCORE_ADDITIVE &&
        (!p->additive || p->additive->A < 1 || !p->additive->w_q ||
         !p->additive->w_k || !p->additive->w_v))
        return ra_error_set(RA_ERR_ARG, "score additive: weights w_q (A, D), "
                                        "w_k (A, Dk), w_v (A) are required");
    if (!ra_shape_dk_allowed(s, p->score))
        return ra_error_set(RA_ERR_ARG, "shape: keys of dim Dk=%lld differ "
                            "from queries of dim D=%lld, which only the "
                            "additive score allows", (long long)ra_shape_dk(s),
                            (long long)s->D);
    if (p->score != RA_SCORE_ADDITIVE && !isnan(p->scale) &&
        !isfinite(p->scale))
        return ra_error_set(RA_ERR_ARG, "scale: %g is not a finite number",
                            p->scale);
    return RA_OK;
}

/* RoPE and ALiBi: the pairing and base, the slopes the caller gave. */
static ra_status check_posenc(const ra_shape *s, const ra_params *p)
{
    if ((unsigned)p->rope > RA_ROPE_HALF)
        return ra_error_set(RA_ERR_ARG, "rope: unknown pairing %d",
                            (int)p->rope);
    if (p->rope != RA_ROPE_NONE && p->score == RA_SCORE_ADDITIVE)
        return ra_error_set(RA_ERR_ARG, "rope: the additive score projects q "
                            "and k itself; rotary embeddings apply to the dot "
                            "and gaussian scores");
    if (p->rope != RA_ROPE_NONE && s->D % 2 != 0)
        return ra_error_set(RA_ERR_ARG, "rope: the head dim D=%lld must be "
                            "even (dims are rotated in pairs)",
                            (long long)s->D);
    if (p->rope != RA_ROPE_NONE && !(p->rope_base > 0 &&
                                     isfinite(p->rope_base)))
        return ra_error_set(RA_ERR_ARG, "rope: the base must be a finite "
                            "number > 0");
    for (int64_t h = 0; p->alibi && p->alibi_slopes && h < s->H; h++)
        if (!isfinite(p->alibi_slopes[h]))
            return ra_error_set(RA_ERR_ARG, "alibi: slope %lld is not a "
                                "finite number", (long long)h);
    return RA_OK;
}

static ra_status check_masks(const ra_shape *s, const ra_masks *mk)
{
    if (mk && (!mk->q_segments) != (!mk->kv_segments))
        return ra_error_set(RA_ERR_ARG, "masks: q_segments and kv_segments "
                                        "go together");
    for (int64_t b = 0; mk && b < s->B; b++) {
        if (mk->q_lens && (mk->q_lens[b] < 0 || mk->q_lens[b] > s->N))
            return ra_error_set(RA_ERR_ARG, "masks: q_lens[%lld] = %lld is "
                                "outside [0, N=%lld]", (long long)b,
                                (long long)mk->q_lens[b], (long long)s->N);
        if (mk->kv_lens && (mk->kv_lens[b] < 0 || mk->kv_lens[b] > s->M))
            return ra_error_set(RA_ERR_ARG, "masks: kv_lens[%lld] = %lld is "
                                "outside [0, M=%lld]", (long long)b,
                                (long long)mk->kv_lens[b], (long long)s->M);
    }
    return RA_OK;
}

ra_status ring_check_params(const ra_shape *s, const ra_params *p,
                            const ra_masks *mk)
{
    ra_status st = ra_shape_check(s);
    if (st == RA_OK)
        st = check_score(s, p);
    if (st == RA_OK)
        st = check_posenc(s, p);
    if (st != RA_OK)
        return st;
    if (p->window && (p->window_left < 0 || p->window_right < 0))
        return ra_error_set(RA_ERR_ARG, "window: left and right must be >= 0");
    if (p->block_q < 0 || p->block_kv < 0)
        return ra_error_set(RA_ERR_ARG, "tiles: block sizes must be >= 0");
    if (p->threads < 0)
        return ra_error_set(RA_ERR_ARG, "threads: %d is negative", p->threads);
    if (!ra_gemm_available(p->gemm))
        return ra_error_set(RA_ERR_ARG, "gemm: engine '%s' is not in this "
                            "build of the library (oneDNN: build with "
                            "libdnnl-dev installed)", ra_gemm_name(p->gemm));
    if (!(p->stall_timeout >= 0))
        return ra_error_set(RA_ERR_ARG, "stall timeout: must be >= 0 seconds");
    if ((unsigned)p->strategy >= RA_STRATEGY_COUNT || p->mem_limit < 0)
        return ra_error_set(RA_ERR_ARG, "strategy: unknown strategy %d or "
                            "negative memory limit", (int)p->strategy);
    if ((unsigned)p->align > RA_ALIGN_SEQUENCE)
        return ra_error_set(RA_ERR_ARG, "align: unknown alignment %d",
                            (int)p->align);
    return check_masks(s, mk);
}

/* The local rows whose global positions lie in [map->i0, map->i1): one
 * range of local indices, since positions increase along a slice. */
static ra_range map_rows(const ra_slice *qs, const ra_attn_map *map)
{
    int64_t a = 0, z;
    while (a < qs->count && ra_slice_pos(qs, a) < map->i0)
        a++;
    z = a;
    while (z < qs->count && ra_slice_pos(qs, z) < map->i1)
        z++;
    return (ra_range){a, z - a};
}

ra_range ra_attn_map_rows(ra_layout layout, int64_t N, int rank, int nranks,
                          const ra_attn_map *map)
{
    const ra_slice qs = ra_layout_slice(layout, N, rank, nranks);
    return map_rows(&qs, map);
}

static ra_status check_map(const ra_shape *s, const ra_attn_map *map)
{
    if (!map || map->i0 < 0 || map->i1 > s->N || map->i0 >= map->i1)
        return ra_error_set(RA_ERR_ARG, "attention map: rows [%lld, %lld) "
                            "must lie within [0, N=%lld) and be non-empty",
                            map ? (long long)map->i0 : 0LL,
                            map ? (long long)map->i1 : 0LL, (long long)s->N);
    if (map->nheads < 1 || !map->heads || !map->out)
        return ra_error_set(RA_ERR_ARG, "attention map: heads and out are "
                                        "required");
    for (int64_t i = 0; i < map->nheads; i++)
        if (map->heads[i] < 0 || map->heads[i] >= s->H)
            return ra_error_set(RA_ERR_ARG, "attention map: head %lld is "
                                "outside [0, H=%lld)",
                                (long long)map->heads[i], (long long)s->H);
    return RA_OK;
}

/* Sizes, layout and plan of the call on this rank (no allocation). */
static ra_status ring_size(ring_state *rs, const ring_args *a)
{
    const ra_shape *s = a->shape;
    const ra_params *p = a->params;
    int level = MPI_THREAD_SINGLE;
    if (MPI_Comm_size(rs->comm, &rs->P) != MPI_SUCCESS ||
        MPI_Comm_rank(rs->comm, &rs->r) != MPI_SUCCESS ||
        MPI_Query_thread(&level) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring: cannot query the communicator");
    rs->shape = s;
    rs->threads = ra_params_threads(p);
    /* only the thread that called MPI may poll, and only if MPI allows it
     * while other threads run */
    rs->may_poll = !p->no_poll &&
                   (rs->threads == 1 || level >= MPI_THREAD_FUNNELED);
    rs->stall_timeout = p->stall_timeout;
    rs->segs = a->masks && a->masks->q_segments;
    rs->lay = ra_params_layout(p, rs->segs);
    rs->n = ra_layout_slice(rs->lay, s->N, rs->r, rs->P).count;
    rs->m_own = ra_layout_slice(rs->lay, s->M, rs->r, rs->P).count;
    for (int i = 0; i < rs->P; i++) {
        const int64_t c = ra_layout_slice(rs->lay, s->M, i, rs->P).count;
        rs->mmax = c > rs->mmax ? c : rs->mmax;
    }
    /* the additive score sends the keys' projections W_k k (A per head)
     * around the ring instead of the keys, and works on W_q q */
    const int64_t A = p->score == RA_SCORE_ADDITIVE ? p->additive->A : 0;
    rs->row_k = s->G * (A ? A : s->D);
    rs->row_v = s->G * s->Dv;
    rs->plan = ring_plan_make(s, p, a->masks, rs->P);
    rs->last = ring_plan_last_step(&rs->plan);
    if (s->B * rs->mmax > INT_MAX || rs->row_k + rs->row_v > INT_MAX)
        return ra_error_set(RA_ERR_ARG, "ring: a K/V block of %lld rows of "
                            "%lld floats cannot be described to MPI (counts "
                            "are int); use more ranks",
                            (long long)(s->B * rs->mmax),
                            (long long)(rs->row_k + rs->row_v));
    return RA_OK;
}

typedef struct {
    ring_state *rs;
    const ring_args *a;
} ring_carve_arg;

/* The arrays of one call, carved out of one block (ring_alloc): the two
 * K/V blocks and their ids, the positions, the additive projections, the
 * rotated q and k, the ALiBi slopes; those a call does not use stay NULL. */
static void ring_carve(void *arg, ra_carver *c)
{
    ring_state *rs = ((ring_carve_arg *)arg)->rs;
    const ring_args *a = ((ring_carve_arg *)arg)->a;
    const ra_shape *s = a->shape;
    const ra_params *p = a->params;
    const int64_t rows = s->B * rs->mmax;
    for (int i = 0; i < 2; i++) {
        rs->buf[i].kv = ra_carve(c, rows * (rs->row_k + rs->row_v),
                                 sizeof(float));
        if (rs->segs)
            rs->buf[i].seg = ra_carve(c, rows, sizeof(int64_t));
    }
    rs->qpos = ra_carve(c, rs->n, sizeof(int64_t));
    rs->kpos = ra_carve(c, rs->mmax, sizeof(int64_t));
    if (p->score == RA_SCORE_ADDITIVE) {
        const int64_t qp[4] = {s->B, rs->n, s->H, p->additive->A};
        rs->qp = ra_carve(c, ra_count_checked(4, qp), sizeof(float));
        rs->kp = ra_carve(c, s->B * rs->m_own * rs->row_k, sizeof(float));
    }
    if (p->rope != RA_ROPE_NONE) {
        rs->qr = ra_carve(c, s->B * rs->n * s->H * s->D, sizeof(float));
        rs->kr = ra_carve(c, s->B * rs->m_own * rs->row_k, sizeof(float));
    }
    if (p->alibi)
        rs->slopes = ra_carve(c, s->H, sizeof(double));
    if (p->align == RA_ALIGN_SEQUENCE)
        rs->qalign = ra_carve(c, s->B * rs->n, sizeof(int64_t));
}

/* Allocates the ring's arrays (one block) and the kernel's tiles. */
static ra_status ring_alloc(ring_state *rs, const ring_args *a)
{
    int64_t bq, bkv;
    ra_params_tiles(a->params, a->shape, &bq, &bkv);
    ring_carve_arg arg = {rs, a};
    rs->mem = ra_carve_alloc(ring_carve, &arg);
    rs->ws = ra_workspace_create(rs->threads, bq, bkv, a->shape->Dv);
    if (rs->ws)
        ra_workspace_set_tick(rs->ws, a->params->on_tick,
                              a->params->on_step_ctx);
    if (!rs->mem || !rs->ws)
        return ra_error_set(RA_ERR_NOMEM, "ring: cannot allocate the ring "
                                          "buffers");
    rs->blk = (ra_block){.block_q = bq, .block_kv = bkv};
    return RA_OK;
}

/* Frees what ring_alloc made and the communicator. After a stall the
 * buffers and the communicator stay: transfers into them are still in
 * flight, and the job must end (ringattn.h). */
static ra_status ring_free(ring_state *rs)
{
    if (rs->stalled)
        return RA_OK;
    free(rs->mem);
    ra_workspace_free(rs->ws);
    if (rs->comm != MPI_COMM_NULL && MPI_Comm_free(&rs->comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring: MPI_Comm_free failed");
    return RA_OK;
}

/* Whether this rank's successor runs on another node. Collective. */
static ra_status ring_find_nodes(ring_state *rs)
{
    int *node_of;
    ra_status st = ra_nodes_of(rs->comm, "ring", &node_of);
    if (st == RA_OK)
        rs->right_cross = node_of[(rs->r + 1) % rs->P] != node_of[rs->r];
    free(node_of);
    return st;
}

/* Refuses, on every rank alike, inputs whose scores or accumulators would
 * leave float32 (range.h): local bounds, their maxima over the ranks, one
 * verdict. Inputs that may hold NaN or inf (params->nonfinite) are the
 * caller's to judge. */
static ra_status ring_check_range(ring_state *rs, const ring_args *a)
{
    if (a->params->nonfinite)
        return RA_OK;
    const ra_input_bounds mine = ra_input_bounds_of(a->shape, rs->n, rs->m_own,
                                                    a->q, a->k, a->v,
                                                    rs->threads);
    double in[3] = {mine.q_norm, mine.k_norm, mine.v_abs}, all[3];
    if (MPI_Allreduce(in, all, 3, MPI_DOUBLE, MPI_MAX, rs->comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring: MPI_Allreduce of the input "
                                        "bounds failed");
    const ra_input_bounds bounds = {all[0], all[1], all[2]};
    return ra_input_bounds_check(a->shape, a->params, &bounds, rs->mmax);
}

/* The kernel's description of the problem (everything but the block). */
static void ring_block_init(ring_state *rs, const ring_args *a)
{
    const ra_shape *s = a->shape;
    const ra_params *p = a->params;
    const ra_masks *mk = a->masks;
    const int gauss = p->score == RA_SCORE_GAUSSIAN;
    const int additive = p->score == RA_SCORE_ADDITIVE;
    const double alpha = gauss ? M_LOG2E / (p->sigma * p->sigma)
                               : ra_params_scale(p, s) * M_LOG2E;
    ra_block *blk = &rs->blk;
    blk->B = s->B;
    blk->n = rs->n;
    blk->H = s->H;
    blk->G = s->G;
    blk->D = additive ? p->additive->A : s->D;
    blk->Dv = s->Dv;
    blk->alpha = (float)alpha;
    blk->score = p->score;
    blk->nan_check = p->nonfinite;
    blk->gemm = p->gemm;
    blk->half_inv_sigma2 = gauss ? 0.5 / (p->sigma * p->sigma) : 0.0;
    blk->w_v = additive ? p->additive->w_v : NULL;
    blk->mask = (ra_mask){.causal = p->causal, .diag = s->M - s->N,
                          .window = p->window, .left = p->window_left,
                          .right = p->window_right, .qpos = rs->qpos,
                          .kpos = rs->kpos,
                          .q_lens = mk ? mk->q_lens : NULL,
                          .kv_lens = mk ? mk->kv_lens : NULL,
                          .q_seg = rs->segs ? mk->q_segments : NULL,
                          .qalign = rs->qalign};
    const ra_slice qs = ra_layout_slice(rs->lay, s->N, rs->r, rs->P);
    for (int64_t i = 0; i < rs->n; i++)
        rs->qpos[i] = ra_slice_pos(&qs, i);
    if (p->alibi) {
        if (p->alibi_slopes)
            memcpy(rs->slopes, p->alibi_slopes, sizeof(double) * (size_t)s->H);
        else
            ra_alibi_slopes(s->H, rs->slopes);
    }
    blk->alibi = p->alibi ? rs->slopes : NULL;
}

/* RoPE: rotated copies of this rank's q and k at their global positions
 * (queries aligned as causal, i + (M - N)); rs->kpos is free until the
 * ring's first step. */
void ring_rotate(ring_state *rs, const ring_args *a)
{
    const ra_shape *s = a->shape;
    const ra_params *p = a->params;
    const ra_slice ks = ra_layout_slice(rs->lay, s->M, rs->r, rs->P);
    for (int64_t j = 0; j < rs->m_own; j++)
        rs->kpos[j] = ra_slice_pos(&ks, j);
    memcpy(rs->qr, a->q, sizeof(float) * (size_t)(s->B * rs->n * s->H * s->D));
    memcpy(rs->kr, a->k,
           sizeof(float) * (size_t)(s->B * rs->m_own * s->G * s->D));
    ring_rope_queries(rs, p, rs->qr, 0);
    ra_rope_apply(p->rope, p->rope_base, rs->kr, s->B, rs->m_own, s->G, s->D,
                  rs->kpos, 0);
}

void ring_rope_queries(const ring_state *rs, const ra_params *p, float *x,
                       int transpose)
{
    const ra_shape *s = rs->shape;
    const double sign = transpose ? -1.0 : 1.0;
    ra_rope_rows r = {p->rope, p->rope_base, s->B, rs->n, s->H, s->D,
                      rs->qpos, s->M - s->N};
    if (!rs->qalign) {
        ra_rope_turn(&r, x, sign);
        return;
    }
    r.B = 1; /* each batch at its own aligned positions */
    r.offset = 0;
    for (int64_t b = 0; b < s->B; b++) {
        r.pos = rs->qalign + b * rs->n;
        ra_rope_turn(&r, x + b * rs->n * s->H * s->D, sign);
    }
}

/* The additive score's projections: rows of q (B n H, D) and k (B m G, Dk)
 * times W_q^T and W_k^T, once per call. */
void ring_project(ring_state *rs, const ring_args *a)
{
    const ra_shape *s = a->shape;
    const ra_additive *ad = a->params->additive;
    const int64_t Dk = ra_shape_dk(s);
    if (rs->n > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
                    (int)(s->B * rs->n * s->H), (int)ad->A, (int)s->D, 1.0f,
                    a->q, (int)s->D, ad->w_q, (int)s->D, 0.0f, rs->qp,
                    (int)ad->A);
    if (rs->m_own > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
                    (int)(s->B * rs->m_own * s->G), (int)ad->A, (int)Dk, 1.0f,
                    a->k, (int)Dk, ad->w_k, (int)Dk, 0.0f, rs->kp, (int)ad->A);
}

/* The forward pass: fold each block into (o, lse). */
typedef struct {
    const float *q; /* or its additive projection */
    float *o, *lse;
} forward_arg;

static void visit_forward(ring_state *rs, const float *kb, const float *vb,
                          ring_step *step, void *arg)
{
    forward_arg *fa = arg;
    ra_kernel_forward_block(&rs->blk, fa->q, kb, vb, fa->o, fa->lse, rs->ws,
                            rs->may_poll ? ring_poll : NULL, step);
}

/* The attention-map pass: write each block's columns of the weights. */
typedef struct {
    const float *q;
    const float *lse;
    ra_range rows;
    const ra_attn_map *map;
} map_arg;

static void visit_map(ring_state *rs, const float *kb, const float *vb,
                      ring_step *step, void *arg)
{
    (void)vb;
    map_arg *ma = arg;
    ra_kernel_probs(&rs->blk, ma->rows.start, ma->rows.count, ma->map->heads,
                    ma->map->nheads, ma->q, kb, ma->lse, ma->map->out,
                    rs->shape->M, rs->ws, rs->may_poll ? ring_poll : NULL,
                    step);
}

/* The passes: the forward, then with a map a second pass that writes the
 * exact weights of the chosen rows from the final LSE. */
static ra_status ring_run(ring_state *rs, const ring_args *a)
{
    const ra_shape *s = a->shape;
    const int additive = a->params->score == RA_SCORE_ADDITIVE;
    const int rope = a->params->rope != RA_ROPE_NONE;
    const float *kr = additive ? rs->kp : rope ? rs->kr : a->k;
    const int64_t *kseg = rs->segs ? a->masks->kv_segments : NULL;
    const int blas = ra_blas_enter(1); /* single-threaded BLAS inside our
                                          own threads */
    ring_block_init(rs, a);
    ra_state_reset_threads(s->B, rs->n, s->H, s->Dv, a->o, a->lse,
                           rs->threads);
    if (additive)
        ring_project(rs, a);
    if (rope)
        ring_rotate(rs, a);
    ring_pack_own(rs, kr, a->v, kseg);
    forward_arg fa = {additive ? rs->qp : rope ? rs->qr : a->q, a->o, a->lse};
    ra_status st = ring_pass(rs, visit_forward, &fa);
    ra_workspace_busy(rs->ws, &rs->tm->thread_busy_min,
                      &rs->tm->thread_busy_max);
    if (st == RA_OK && a->want_map) {
        const ra_slice qs = ra_layout_slice(rs->lay, s->N, rs->r, rs->P);
        const map_arg ma = {fa.q, a->lse, map_rows(&qs, a->map), a->map};
        ring_pack_own(rs, kr, a->v, kseg); /* the own block to the front */
        memset(a->map->out, 0, sizeof(float) *
                                   (size_t)(s->B * a->map->nheads *
                                            ma.rows.count * s->M));
        st = ring_pass(rs, visit_map, (void *)&ma);
    }
    if (st == RA_OK)
        st = ring_finish(rs);
    rs->tm->steps = rs->last + 1;
    ra_blas_leave(blas);
    return st;
}

/* One call: open (check, agree, size and allocate, agree, check the
 * range), run, free. Every rank takes the same branches up to the
 * passes. */
static ra_status ring_forward(MPI_Comm user_comm, const ring_args *a,
                              ra_timing *timing)
{
    const double t_start = MPI_Wtime();
    ra_timing tm = {0};
    ring_state rs = {.comm = MPI_COMM_NULL, .tm = &tm};
    const ra_status mst = a->want_map ? check_map(a->shape, a->map) : RA_OK;
    ra_status st = ring_open(user_comm, a, mst, &rs);
    if (st == RA_OK)
        st = ring_run(&rs, a);
    return ring_close(&rs, st, t_start, timing);
}

ra_status ra_forward_ex(MPI_Comm comm, const ra_shape *shape,
                        const ra_params *params, const ra_masks *masks,
                        const float *q, const float *k, const float *v,
                        float *o, float *lse, ra_timing *timing)
{
    ra_error_clear();
    if (params && params->strategy != RA_STRATEGY_RING)
        return strategy_forward(comm, shape, params, masks, q, k, v, o, lse,
                                timing);
    const ring_args a = {shape, params, masks, q, k, v, o, lse, NULL, 0};
    return ring_forward(comm, &a, timing);
}

ra_status ra_forward_map(MPI_Comm comm, const ra_shape *shape,
                         const ra_params *params, const ra_masks *masks,
                         const float *q, const float *k, const float *v,
                         float *o, float *lse, ra_attn_map *map)
{
    ra_error_clear();
    const ring_args a = {shape, params, masks, q, k, v, o, lse, map, 1};
    return ring_forward(comm, &a, NULL);
}

ra_status ra_forward(MPI_Comm comm, const ra_shape *shape,
                     const ra_params *params, const float *q, const float *k,
                     const float *v, float *o, float *lse)
{
    return ra_forward_ex(comm, shape, params, NULL, q, k, v, o, lse, NULL);
}

ra_status ring_open(MPI_Comm user_comm, const ring_args *a, ra_status st,
                    ring_state *rs)
{
    if (st == RA_OK)
        st = ring_check_params(a->shape, a->params, a->masks);
    if (MPI_Comm_dup(user_comm, &rs->comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "ring: MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(rs->comm, MPI_ERRORS_RETURN); /* ringattn.h */
    st = ra_agree(rs->comm, st);
    if (st == RA_OK) {
        st = ring_size(rs, a);
        if (st == RA_OK)
            st = ring_alloc(rs, a);
        st = ra_agree(rs->comm, st);
    }
    if (st == RA_OK)
        st = ring_find_nodes(rs);
    if (st == RA_OK)
        st = ring_check_range(rs, a);
    if (st == RA_OK && a->params->align == RA_ALIGN_SEQUENCE)
        st = ra_align_queries(rs->comm, a->shape, rs->lay, a->params,
                              a->masks, rs->qalign);
    if (st == RA_OK)
        ring_block_init(rs, a);
    rs->params = a->params;
    rs->steps_total = (rs->last + 1) * (a->want_map ? 2 : 1);
    return st;
}

ra_status ring_close(ring_state *rs, ra_status st, double t_start,
                     ra_timing *timing)
{
    /* a ring rank sends only to its successor: all or nothing crosses */
    rs->tm->bytes_cross_node = rs->right_cross ? rs->tm->bytes_sent : 0;
    const ra_status fst = ring_free(rs);
    rs->tm->total = MPI_Wtime() - t_start;
    if (timing)
        *timing = *rs->tm;
    return st != RA_OK ? st : fst;
}
