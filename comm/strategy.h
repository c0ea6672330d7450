/* strategy.h: one call of any strategy and the table of strategies
 * (internal to comm/).
 *
 * ra_call_forward and ra_call_backward (call.h) open a call once
 * (call.c: checks, agreement, layout, tiles, threads, positions, position
 * encodings, range check), run one row of the strategy table and close it.
 * Each row's file takes the same layout slices and writes the same (o, lse)
 * of this rank's query slice:
 *   ring.c       K/V blocks travel the ring (ring_pass.c; ring_bwd.c: the
 *                backward)
 *   allgather.c  all K/V gathered in chunks, each chunk computed on arrival
 *   tree.c       all queries on every rank, partials merged by a reduction
 *   ringq.c      query blocks and their (o, lse) travel, K/V stay
 *   ulysses.c    all-to-all from sequence slices to head groups and back
 *   hybrid.c     ulysses inside groups of ranks, a K/V ring between them */
#ifndef RA_STRATEGY_H
#define RA_STRATEGY_H

#include <mpi.h>

#include "internal.h"
#include "kernel.h"

/* One call, opened once (call.c) and read by every row. */
typedef struct {
    MPI_Comm comm;      /* a duplicate of the caller's, owned by the call */
    int P, r;
    const char *name;   /* the row's strategy, opening every message */
    const ra_shape *shape;
    const ra_params *params;
    const ra_masks *masks;
    const float *q, *k, *v; /* this rank's slices (ringattn.h); with RoPE
                           rotated copies at qpos and kpos, with bf16
                           precision (k, v: or a bf16 wire) rounded ones */
    float *o, *lse;     /* the forward's outputs (NULL in the backward) */
    ra_attn_map *map;   /* the forward's attention map, or NULL */
    const ra_grads *grads; /* the backward's (dw only with the additive
                           score, else NULL), or NULL: a forward */
    ra_layout lay;      /* resolved */
    int segs;           /* segment ids are given */
    int threads;        /* resolved (ra_params_threads) */
    int may_poll;       /* the kernel may test requests between tiles */
    int64_t n, m_own;   /* this rank's query and key counts */
    int64_t *qpos, *kpos; /* global positions of the n local queries and of
                           the m_own own keys, increasing */
    const double *slopes; /* ALiBi: the H slopes of the call, or NULL */
    int64_t *qalign;    /* per-sequence alignment: the local queries'
                           aligned positions (B, n) (align.h), or NULL:
                           qpos + (M - N) */
    int *node_of;       /* P: the node of each rank of comm (nodes.h) */
    ra_mm16 *mm16;      /* bf16 precision: the call's tile products, made
                           once when it opens (bf16.h), else NULL */
    int stalled;        /* a watched wait gave up: transfers are still in
                           flight, so their buffers must stay (the job
                           must end) */
    ra_timing *tm;
    int stepped;        /* strat_step was called */
    void *mem;          /* the call's block: positions, rotated q, k,
                           slopes */
} strat_call;

/* A strategy, one row of the table in call.c: whether it takes the
 * additive score, what it refuses before any work beyond the shared
 * checks (NULL: nothing more; collective over comm), its forward and its
 * backward (NULL: none), and whether a pass on P ranks reports P steps
 * (one per block; else one). The performance model keeps its own row per
 * strategy (comm/perf/model.h); nothing here points into it. */
typedef struct {
    ra_strategy id;
    int additive;
    ra_status (*fits)(MPI_Comm comm, const ra_shape *s, const ra_params *p,
                      int segs);
    ra_status (*forward)(strat_call *c);
    ra_status (*backward)(strat_call *c);
    int stepped;
} strat_row;

/* Every strategy, one row each, in the order of ra_strategy (call.c). */
extern const strat_row strat_table[RA_STRATEGY_COUNT];

/* The one home of which strategy takes which options (call.c): RA_OK, or
 * RA_ERR_ARG naming the strategy and the option it does not take (the
 * additive score without row->additive; per-sequence alignment and a bf16
 * wire off the ring). The calls refuse, and the model (plan, --strategy
 * auto) never picks, what it refuses. */
ra_status strat_takes(const strat_row *row, const ra_params *p);

/* Reports step done of total to the caller's progress callback. */
void strat_step(strat_call *c, int done, int total);

/* What a watched wait names when it gives up: the phase ("step 3", "the
 * all-to-all of q, k, v") and, for point-to-point requests, each one's
 * peer (a rank of comm; requests [0, nrecv) receive, the rest send);
 * peer NULL: the requests are collectives, which do not say who is late. */
typedef struct {
    const char *phase;
    const int *peer;
    int nrecv;
    /* Called between tests while waiting, when not NULL (the wait then
     * loops even without a timeout): a strategy's own progress, such as
     * posting its next send. Returns 0, or -1 when that failed. */
    int (*tick)(void *ctx);
    void *ctx;
} strat_watch;

/* Waits for req[0 .. n) under params->stall_timeout (0: MPI_Waitall). With
 * a timeout, gives up when none of them completed for that long, sets
 * c->stalled and returns RA_ERR_MPI with "<strategy>: rank R stalled at
 * <phase>: ..." naming the peer of the first open request. */
ra_status strat_wait(strat_call *c, int n, MPI_Request *req,
                     const strat_watch *w);

/* ---- the ring loop (ring_loop.c), the steps of every ring ---- */

/* The requests of one step: receives from the left neighbour in
 * req[0, RING_PAIRS), sends to the right one in req[RING_PAIRS, 2
 * RING_PAIRS) (MPI_REQUEST_NULL: unused), their datatypes when the poster
 * made some (freed after the step); the kernel's progress callback
 * (ring_poll) sets failed when a test returns an error. */
enum { RING_PAIRS = 3 };
typedef struct {
    MPI_Request req[2 * RING_PAIRS];
    MPI_Datatype types[2 * RING_PAIRS];
    int failed;
} ring_reqs;

/* A ring of steps 0 .. steps - 1 between neighbours left and right (ranks
 * of the call's communicator). At step t: post(ctx, t, rq) posts the
 * step's transfers and counts their bytes (strat_count); visit computes,
 * passing ring_poll and rq to the kernel; the loop waits (watched,
 * "step t"); settle (NULL: none) does what needs the step's data and may
 * post more transfers, which the loop also waits for; then the step is
 * reported as done + 1 of total (strat_step). compute and comm_wait are
 * tallied into the call's timing. */
typedef struct {
    int steps, left, right;
    ra_status (*post)(void *ctx, int t, ring_reqs *rq);
    void (*visit)(void *ctx, int t, ring_reqs *rq);
    ra_status (*settle)(void *ctx, int t, ring_reqs *rq);
    void *ctx;
    int done, total; /* steps reported so far, of total */
    /* Checkpoints: the loop starts at step start (a loaded state's) and,
     * when the call has exec.checkpoint and state is not NULL, asks at
     * the boundary before each step t > start (strat_ckpt_boundary) with
     * the parts state(ctx, t, st) names. */
    int start;
    void (*state)(void *ctx, int t, ra_state *st);
} ring_loop;

ra_status ring_loop_run(strat_call *c, ring_loop *lp);

/* The kernel's progress callback: tests the ring_reqs at ctx. */
void ring_poll(void *ctx);

/* ---- checkpoints (ckpt.c; ringattn.h, ra_checkpoint) ---- */

/* RA_ERR_ARG naming what takes no checkpoint when c has exec.checkpoint:
 * a strategy other than ring, the attention map, the additive score's
 * backward; a checkpoint without ask or save. Local. */
ra_status strat_ckpt_takes(const strat_call *c);

/* At the boundary state->step of state->steps: every rank's ask, the
 * largest answer over the ranks (watched); on a save every rank's save,
 * agreed; RA_STOPPED (every rank) when asked to stop. */
ra_status strat_ckpt_boundary(strat_call *c, const ra_state *state);

/* With a load callback: fills state's parts and step (every rank the
 * same step in 1 .. steps - 1, else RA_ERR_INPUT); without: step 0.
 * Collective, agreed. state names its parts and steps on entry. */
ra_status strat_ckpt_load(strat_call *c, ra_state *state);

/* A strategy's arrays for one call: fill(state, c, cv) carves each of
 * them (ra_carve; run twice, once to size and once to carve, so it
 * depends on nothing but sizes already in state); the block they share
 * goes to *mem, the kernel's tiles to *ws. RA_ERR_NOMEM naming the
 * strategy and what when memory runs out or a size overflows; the caller
 * frees both with strat_free, also after a failure. */
typedef void (*strat_fill)(void *state, const strat_call *c, ra_carver *cv);
ra_status strat_alloc(const strat_call *c, strat_fill fill, void *state,
                      const char *what, void **mem, ra_workspace **ws);

/* The end of a strategy's call: frees mem (strat_alloc's block, or NULL),
 * the ntypes datatypes of types (MPI_DATATYPE_NULL ones too) and the
 * tiles ws; after a stall nothing, since transfers into them are still in
 * flight (the job must end). */
void strat_free(const strat_call *c, void *mem, MPI_Datatype *types,
                int ntypes, ra_workspace *ws);

/* Adds bytes handed to MPI for rank dst of comm to c->tm's bytes_sent and,
 * when dst runs on another node, bytes_cross_node. */
void strat_count(const strat_call *c, int dst, int64_t bytes);

/* The same for a block this rank addresses to every other rank (its part
 * of an all-gather or a broadcast). */
void strat_count_all(const strat_call *c, int64_t bytes);

/* RoPE of this rank's queries x (B, n, H, D) at their aligned positions
 * (c->qalign, or qpos + M - N): sign 1 rotates, -1 applies the transpose
 * (how a gradient goes back). */
void call_rope_queries(const strat_call *c, float *x, double sign);

/* The kernel's per-thread tiles for params' tiles and threads, ticking
 * params->on_tick between tiles, or NULL. */
ra_workspace *strat_workspace(const strat_call *c);

/* Ranks of comm on this rank's node, into *count. Collective. */
ra_status strat_node_ranks(MPI_Comm comm, const char *what, int *count);

/* The largest slice of a length-len axis over the ranks of c's
 * communicator. */
int64_t strat_slice_most(const strat_call *c, int64_t len);

/* For each rank j of c's communicator, cnt[j] = its slice of a length-len
 * axis and off[j] = the first row (of B rows per token) of that slice
 * when the slices lie one after the other (the largest count:
 * strat_slice_most). */
void strat_rows(const strat_call *c, int64_t len, int64_t *cnt,
                int64_t *off);

/* Every rank's segment ids (B, count of its slice of a length-len axis)
 * in natural order into out (B, len); all (B len entries) is scratch.
 * Collective, watched. */
ra_status strat_ids_natural(strat_call *c, int64_t len, const int64_t *mine,
                            int64_t *all, int64_t *out);

/* One all-to-all among ranks first .. first + size - 1 of c's
 * communicator, as MPI_Alltoallv takes it (counts and displacements in
 * floats, indexed by member), by point-to-point transfers so that a stall
 * names the rank it waits for; counts the bytes sent. */
typedef struct {
    int first, size;
    const int *cnt_s, *dsp_s, *cnt_r, *dsp_r;
    const char *phase;
} strat_a2a;
ra_status strat_alltoall(strat_call *c, const strat_a2a *x, const float *send,
                         float *recv);

/* The kernel's view of n queries at global positions qpos (increasing)
 * against key blocks whose positions the caller sets in blk->mask.kpos
 * and whose size in blk->m; q_seg: the queries' segment ids (B, n) or
 * NULL. Tiles as params give them; ALiBi's slopes are those of heads
 * 0 .. H-1 (a caller folding a run of heads from h0 offsets blk->alibi
 * by h0). */
void strat_block_init(const strat_call *c, int64_t n, const int64_t *qpos,
                      const int64_t *q_seg, ra_block *blk);

/* Fills pos[0 .. count) with the global positions of rank j's slice of a
 * length-len axis; returns the count. */
int64_t strat_slice_pos(const strat_call *c, int64_t len, int j,
                        int64_t *pos);

ra_status ring_forward(strat_call *c);
ra_status ring_backward(strat_call *c);
ra_status allgather_forward(strat_call *c);

/* ---- head groups (ulysses.c), shared with hybrid.c ---- */

/* Heads of one rank of a head-parallel group: query heads [h0, h1), kv
 * heads [g0, g1) (those the query heads read). */
typedef struct {
    int64_t h0, h1, g0, g1;
} head_group;

/* Where local head hl of a group lives in the gathered arrays: in the run
 * of heads [start, start + width) (relative to h0) that read one kv head;
 * kv heads are runs of one. */
typedef struct {
    int64_t start, width;
} head_run;

/* Where a source rank's tokens land in gathered arrays of len tokens:
 * token i of its slice of the axis (of length axis) at idx[i], or at its
 * global position when idx is NULL. */
typedef struct {
    int64_t axis, len;
    const int64_t *idx;
} head_dest;

/* The tokens of one axis a head group holds: len of them; member p's
 * token i at idx[off[p] + i], or (idx NULL) at its global position. */
typedef struct {
    int64_t len;
    const int64_t *idx, *off;
} head_order;

/* The all-to-alls of a head group: ranks first .. first + size - 1 of
 * c's communicator, member p holding heads_of(p, size); counts and
 * displacements in floats per member, and the packing buffers. */
typedef struct {
    int first, size;
    int64_t floats;     /* the length of send and of recv */
    int *cnt_s, *dsp_s, *cnt_r, *dsp_r;
    float *send, *recv;
} head_xchg;

/* Query heads H/P each over P ranks (the first H % P one more). */
head_group heads_of(const ra_shape *s, int p, int P);

/* Fills x's counts for the inputs' all-to-all (back: the outputs'), when
 * x has its arrays; returns the larger of the floats sent and received,
 * -1 past INT_MAX. */
int64_t heads_counts(const strat_call *c, const head_xchg *x, int back);

/* Sets x up for the group first .. first + size - 1, with send and recv
 * sized for both all-to-alls and for at least most floats; RA_ERR_ARG
 * past INT_MAX floats. The arrays come from heads_xchg_carve, in the
 * fill of the strategy's block (strat_alloc). */
ra_status heads_xchg_init(const strat_call *c, head_xchg *x, int first,
                          int size, int64_t most);
void heads_xchg_carve(head_xchg *x, ra_carver *cv);

/* Sequence slices to head groups: this rank's q, k, v to each member;
 * from each, its tokens of this rank's heads into the runs of q
 * (B, qo->len, run width, D) and kv (K runs (B, ko->len, D) per kv head,
 * then V runs). Watched, counted. */
ra_status heads_scatter(strat_call *c, head_xchg *x, const head_order *qo,
                        const head_order *ko, float *q, float *kv);

/* Head groups back to sequence slices: each member's tokens of o and lse
 * (runs as heads_scatter's q) go home, this rank's into c->o, c->lse. */
ra_status heads_gather(strat_call *c, head_xchg *x, const head_order *qo,
                       const float *o, const float *lse);

/* Refuses a gather whose K/V (and ids with segs) do not fit
 * params->mem_limit, or by default this node's memory over its ranks (then
 * collective over comm). */
ra_status allgather_fits(MPI_Comm comm, const ra_shape *s,
                         const ra_params *p, int segs);
/* Bytes one rank allocates for the gathered K/V and their ids (segs);
 * -1 when the count overflows. Pure. */
int64_t allgather_bytes(const ra_shape *s, int segs);
/* Refuses more ranks than query heads, naming the counts that work. */
ra_status ulysses_fits(const ra_shape *s, int P);
ra_status tree_forward(strat_call *c);
ra_status ringq_forward(strat_call *c);
ra_status ulysses_forward(strat_call *c);
ra_status hybrid_forward(strat_call *c);

/* The group size u of hybrid (params->ulysses_size, or the ranks of one
 * node, which must be the same on every node), refused unless u divides
 * P and u <= H. Collective when ulysses_size is 0. */
ra_status hybrid_group_size(MPI_Comm comm, const ra_shape *s,
                            const ra_params *p, int *u);

/* Refuses groups of u ranks that do not divide P or outnumber the query
 * heads. Pure. */
ra_status hybrid_group_check(const ra_shape *s, int P, int u);

#endif /* RA_STRATEGY_H */
