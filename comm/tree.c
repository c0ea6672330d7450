/* tree.c: the tree strategy for decoding (few queries, long K/V).
 *
 * Every rank gathers all queries (N is small), attends its own K/V slice
 * with them, and the partial (o, lse) of every query row and head are then
 * merged over the ranks by MPI_Reduce_scatter with a user-defined operation
 * doing the LSE merge (tree_merge below, the merge the kernel applies to
 * its tiles in engine/kernel.c), which MPI runs in about log P steps; each
 * rank keeps the merged rows of its own query slice.
 *
 * The operation is declared non-commutative. The merge is commutative even
 * in floating point (it is symmetric in its operands), but only associative
 * up to rounding: declared commutative, MPI may regroup the operands by
 * message size or algorithm, and the last bits would depend on it. Non-
 * commutative, it combines in rank order, so a run at fixed P is
 * reproducible bit for bit. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "internal.h"
#include "strategy.h"

/* All queries of all ranks: rank j's slice (B, n_j, H, D) starts at row
 * off[j] (rows of H*D floats); the partials of those rows are o
 * (B, n_j, H, Dv) at row off[j] and lse (B, H, n_j) at B*H*... likewise. */
typedef struct {
    int64_t *cnt, *off;   /* P each: queries per rank, first row */
    int *rcount, *rdisp;  /* P each: rows as MPI counts */
    int *ecount;          /* P each: merge elements of each slice */
    float *q, *o, *lse;   /* all queries, their partial o and lse */
    float *pair;          /* (B N H) merge elements of Dv + 1 floats */
    float *mine;          /* (B n H) merged elements of the own slice */
    int64_t *qseg;        /* (B N) ids, or NULL */
    int64_t *qpos;        /* the largest query slice */
    int64_t nmax;         /* the largest query slice */
    void *mem;            /* the block the arrays above are carved from */
    ra_workspace *ws;
} tree_state;

/* One entry of the merge, (wa a + wb b) / sum; a non-finite entry (a NaN
 * or inf value its row sees, nonfinite inputs) stands for itself whatever
 * its weight, which may have underflowed to 0 (0 x inf would make NaN):
 * then the sum of the non-finite ones, as engine/kernel.c merges tiles. */
static float merge_entry(double wa, float a, double wb, float b, double sum)
{
    if (isfinite(a) && isfinite(b))
        return (float)((wa * a + wb * b) / sum);
    return (isfinite(a) ? 0.0f : a) + (isfinite(b) ? 0.0f : b);
}

/* inout = in merged with inout, element by element: each element is a row
 * o (Dv floats) and its lse. A NaN lse (non-finite inputs) wins. */
static void tree_merge(void *in, void *inout, int *len, MPI_Datatype *type)
{
    int size = 0;
    MPI_Type_size(*type, &size);
    const int w = size / (int)sizeof(float), dv = w - 1;
    const float *a = in;
    float *b = inout;
    for (int e = 0; e < *len; e++, a += w, b += w) {
        const double la = a[dv], lb = b[dv];
        if (isnan(la) || isnan(lb) || lb == -INFINITY) {
            if (!isnan(lb) || isnan(la))
                memcpy(b, a, sizeof(float) * (size_t)w);
            continue;
        }
        if (la == -INFINITY)
            continue;
        const double mx = la > lb ? la : lb;
        const double wa = exp(la - mx), wb = exp(lb - mx), sum = wa + wb;
        for (int d = 0; d < dv; d++)
            b[d] = merge_entry(wa, a[d], wb, b[d], sum);
        b[dv] = (float)(mx + log(sum));
    }
}

/* The arrays above (ids only with segments), carved out of t->mem
 * (tree_alloc). */
static void tree_carve(void *state, const strat_call *c, ra_carver *cv)
{
    tree_state *t = state;
    const ra_shape *s = c->shape;
    const int64_t P = c->P, w = s->Dv + 1;
    const int64_t all = s->B * s->N * s->H, own = s->B * c->n * s->H;
    t->cnt = ra_carve(cv, P, sizeof(int64_t));
    t->off = ra_carve(cv, P, sizeof(int64_t));
    t->rcount = ra_carve(cv, P, sizeof(int));
    t->rdisp = ra_carve(cv, P, sizeof(int));
    t->ecount = ra_carve(cv, P, sizeof(int));
    t->q = ra_carve(cv, all * s->D, sizeof(float));
    t->o = ra_carve(cv, all * s->Dv, sizeof(float));
    t->lse = ra_carve(cv, all, sizeof(float));
    t->pair = ra_carve(cv, all * w, sizeof(float));
    t->mine = ra_carve(cv, own * w, sizeof(float));
    if (c->segs)
        t->qseg = ra_carve(cv, s->B * s->N, sizeof(int64_t));
    t->qpos = ra_carve(cv, t->nmax, sizeof(int64_t));
}

static ra_status tree_alloc(tree_state *t, const strat_call *c)
{
    const ra_shape *s = c->shape;
    if (s->B * s->N * s->H > INT_MAX)
        return ra_error_set(RA_ERR_ARG, "tree: %lld query rows and heads "
                            "cannot be described to MPI (counts are int); "
                            "strategy ring has no such limit",
                            (long long)(s->B * s->N * s->H));
    t->nmax = strat_slice_most(c, s->N);
    ra_status st = strat_alloc(c, tree_carve, t, "the gathered queries",
                               &t->mem, &t->ws);
    if (st != RA_OK)
        return st;
    strat_rows(c, s->N, t->cnt, t->off);
    for (int j = 0; j < c->P; j++) {
        t->rcount[j] = (int)(s->B * t->cnt[j]);
        t->rdisp[j] = (int)t->off[j];
        t->ecount[j] = (int)(s->B * t->cnt[j] * s->H);
    }
    return RA_OK;
}

static void tree_free(tree_state *t, const strat_call *c)
{
    strat_free(c, t->mem, NULL, 0, t->ws);
}

/* Every rank's queries (and their segment ids) on every rank. */
static ra_status tree_gather(tree_state *t, strat_call *c)
{
    const ra_shape *s = c->shape;
    MPI_Datatype qrow;
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int rc = MPI_Type_contiguous((int)(s->H * s->D), MPI_FLOAT, &qrow);
    if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(&qrow)) == MPI_SUCCESS) {
        rc = MPI_Iallgatherv(c->q, t->rcount[c->r], qrow, t->q, t->rcount,
                             t->rdisp, qrow, c->comm, &req[0]);
        MPI_Type_free(&qrow); /* the gather keeps what it needs */
    }
    if (rc == MPI_SUCCESS && c->segs)
        rc = MPI_Iallgatherv(c->masks->q_segments, t->rcount[c->r],
                             MPI_INT64_T, t->qseg, t->rcount, t->rdisp,
                             MPI_INT64_T, c->comm, &req[1]);
    if (rc != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "tree: gathering the queries failed");
    strat_count_all(c, s->B * c->n *
                           ((int64_t)sizeof(float) * s->H * s->D +
                            (c->segs ? (int64_t)sizeof(int64_t) : 0)));
    const strat_watch w = {"the gathering of the queries", NULL, 0};
    return strat_wait(c, 2, req, &w);
}

/* The partials of every rank's queries against the own K/V slice, packed
 * as merge elements: (b, i, h) of slice j at element (off[j] + b n_j + i)
 * H + h. */
static void tree_attend(tree_state *t, const strat_call *c)
{
    const ra_shape *s = c->shape;
    const int64_t H = s->H, Dv = s->Dv, w = Dv + 1;
    ra_block blk;
    for (int j = 0; j < c->P; j++) {
        const int64_t nj = t->cnt[j], at = t->off[j];
        float *o = t->o + at * H * Dv, *lse = t->lse + at * H;
        strat_slice_pos(c, s->N, j, t->qpos);
        strat_block_init(c, nj, t->qpos, c->segs ? t->qseg + at : NULL,
                         &blk);
        blk.m = c->m_own;
        blk.mask.kpos = c->kpos;
        blk.mask.k_seg = c->segs ? c->masks->kv_segments : NULL;
        ra_state_reset(s->B, nj, H, Dv, o, lse);
        if (nj > 0 && c->m_own > 0)
            ra_kernel_forward_block(
                &blk,
                &(ra_fwd_ops){t->q + at * H * s->D, c->k, c->v, o, lse,
                              NULL, NULL},
                t->ws);
        for (int64_t b = 0; b < s->B; b++)
            for (int64_t i = 0; i < nj; i++)
                for (int64_t h = 0; h < H; h++) {
                    const int64_t row = (b * nj + i) * H + h;
                    float *e = t->pair + (at * H + row) * w;
                    memcpy(e, o + row * Dv, sizeof(float) * (size_t)Dv);
                    e[Dv] = lse[(b * H + h) * nj + i];
                }
    }
}

/* Merges the partials over the ranks; each rank keeps its own slice's
 * elements and unpacks them into o (B, n, H, Dv) and lse (B, H, n). */
static ra_status tree_reduce(tree_state *t, strat_call *c)
{
    const ra_shape *s = c->shape;
    const int64_t H = s->H, Dv = s->Dv, w = Dv + 1, n = c->n;
    MPI_Datatype elem = MPI_DATATYPE_NULL;
    MPI_Op merge = MPI_OP_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Type_contiguous((int)w, MPI_FLOAT, &elem);
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_commit(&elem);
    if (rc == MPI_SUCCESS)
        rc = MPI_Op_create(tree_merge, 0, &merge);
    if (rc == MPI_SUCCESS)
        rc = MPI_Ireduce_scatter(t->pair, t->mine, t->ecount, elem, merge,
                                 c->comm, &req);
    const strat_watch wt = {"the reduction of the partial results", NULL, 0};
    ra_status st = rc == MPI_SUCCESS ? strat_wait(c, 1, &req, &wt)
                                     : ra_error_set(RA_ERR_MPI, "tree: the "
                                       "reduction of the partial results "
                                       "failed");
    if (c->stalled) /* the reduction still uses them */
        return st;
    if (merge != MPI_OP_NULL)
        MPI_Op_free(&merge);
    if (elem != MPI_DATATYPE_NULL)
        MPI_Type_free(&elem);
    if (st != RA_OK)
        return st;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t row = (b * n + i) * H + h;
                const float *e = t->mine + row * w;
                memcpy(c->o + row * Dv, e, sizeof(float) * (size_t)Dv);
                c->lse[(b * H + h) * n + i] = e[Dv];
            }
    for (int j = 0; j < c->P; j++)
        if (j != c->r)
            strat_count(c, j, (int64_t)sizeof(float) * t->ecount[j] * w);
    return RA_OK;
}

ra_status tree_forward(strat_call *c)
{
    tree_state t = {0};
    ra_status st = ra_agree(c->comm, tree_alloc(&t, c));
    if (st == RA_OK) {
        const double t0 = MPI_Wtime();
        st = tree_gather(&t, c);
        const double t1 = MPI_Wtime();
        if (st == RA_OK)
            tree_attend(&t, c);
        const double t2 = MPI_Wtime();
        if (st == RA_OK)
            st = tree_reduce(&t, c);
        c->tm->compute = t2 - t1;
        c->tm->comm_wait = (t1 - t0) + (MPI_Wtime() - t2);
    }
    tree_free(&t, c);
    return st;
}
