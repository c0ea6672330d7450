/* model.h: the performance model (internal, pure arithmetic: no MPI calls,
 * no files). For a problem, an allocation and a machine profile it says,
 * per strategy, whether the strategy applies, how long a forward pass takes
 * (compute, exposed communication, load imbalance, I/O), how much memory a
 * rank holds and how many bytes it sends, inside a node and between nodes.
 *
 * The counts (visible pairs, bytes sent, model memory) are exact: they
 * restate what the strategies' files count in ra_timing.bytes_sent and what
 * bench counts, and bench calls the same functions. Only the times are
 * estimates: the profile's rates times per-strategy efficiency factors
 * (MODEL_EFF_*, calibrated in docs/PERFORMANCE.md). */
#ifndef RA_MODEL_H
#define RA_MODEL_H

#include <stdint.h>

#include "band.h"
#include "internal.h"
#include "profile.h"

/* Where the job runs. Ranks are numbered in ring order (the node-aware
 * order: node by node); node_of NULL means rank r sits on node
 * r / ceil(P / nodes). Threads per rank come from the params. cores: the
 * cores the job's ranks share in all (fake nodes on one machine share one
 * machine's cores); 0: as many as the ranks' threads. */
typedef struct {
    int P, nodes, cores;
    const int *node_of; /* P entries, or NULL */
    double core_rate;   /* the kernel's FLOP/s on one core for this shape
                           and score (profile_kernel_rate) */
} model_alloc;

/* The masks of the whole problem in natural token order (any NULL):
 * q_lens, kv_lens (B); q_seg (B, N), kv_seg (B, M). */
typedef struct {
    const int64_t *q_lens, *kv_lens, *q_seg, *kv_seg;
} model_masks;

/* One strategy's prediction. Times in seconds, bytes per forward pass. */
typedef struct {
    ra_strategy strategy;
    ra_layout layout;
    int applies;
    char why[256];         /* why not, when !applies */
    int u;                 /* hybrid: the group size */
    double pairs_total;    /* visible (query, key) pairs, one head */
    double pairs_ring_max; /* the busiest rank's query slice against all
                              keys (what bench counts per rank) */
    double flops;          /* useful FLOPs (ra_pair_flops times pairs) */
    double work_max, work_avg; /* pair-heads a rank computes */
    double t_compute, t_comm, t_imbalance, t_io, t_total;
    double bytes_max, bytes_avg;   /* bytes_sent: busiest rank, mean */
    double intra_max, inter_max;   /* the busiest rank's, by destination */
    double cross_max, cross_total; /* ring and ring-q: sent to another
                                      node, busiest rank and all ranks */
    double mem_max;        /* bytes per rank, the largest (bench model_MB) */
} model_result;

/* The model keeps its own row per strategy (model_costs in model.c, keyed
 * by ra_strategy), beside the strategy table that runs the calls
 * (strat_table, comm/call.c), which knows nothing of the model. Adding a
 * strategy: its file, its row there, and its row here; a strategy
 * without a row here is predicted as refused, by name. */

/* Visible pairs of one batch, one head: the queries of slice qs (q_seg:
 * their ids in slice order, or NULL) against the keys of ks (NULL: all
 * [0, M)); k_seg: the ids of all M keys of the batch in natural order, or
 * NULL. q_len, kv_len: the batch's padding lengths. */
double model_slice_pairs(ra_band band, const ra_slice *qs, const ra_slice *ks,
                         int64_t M, int64_t q_len, int64_t kv_len,
                         const int64_t *q_seg, const int64_t *k_seg);

/* The model memory of rank r (bench's model_MB): its slices, plus what the
 * strategy holds beside them. */
double model_rank_bytes(const ra_shape *s, const ra_params *p, ra_layout lay,
                        int P, int r);

/* p set to run strategy k, as a choice among strategies (plan, bench
 * --strategy all or auto) tries it: the ulysses size given is hybrid's,
 * so any other strategy runs without one (the library refuses it). */
void model_use_strategy(ra_params *p, ra_strategy k);

/* Predicts every strategy at once (res[k] for ra_strategy k) under layout
 * lay (resolved), sharing the counts that pair ranks with ranks
 * (model_steps.h). with_io: add reading q, k, v and writing o, lse at the
 * profile's rates. Returns 0, or -1 when out of memory. Time and memory
 * grow with P, not P^2. */
int model_predict_all(const ra_shape *s, const ra_params *p, ra_layout lay,
                      const model_masks *mk, const model_alloc *al,
                      const ra_profile *pf, int with_io,
                      model_result res[RA_STRATEGY_COUNT]);

/* The longest N (= M) at which strategy p->strategy fits the memory of a
 * rank (the profile's memory per node over the ranks on a node) at this
 * allocation; 0 when not even 1 fits. */
int64_t model_max_seq(const ra_shape *s, const ra_params *p, ra_layout lay,
                      const model_alloc *al, const ra_profile *pf);

/* The layouts the plan tries when the layout is auto. */
enum { MODEL_LAYOUTS = 4 };

/* Every strategy under every layout tried: RA_STRATEGY_COUNT * layouts
 * rows, and the fastest applicable one. */
typedef struct {
    model_result row[RA_STRATEGY_COUNT * MODEL_LAYOUTS];
    int nrows;
    int best;  /* index into row, -1 when nothing applies */
} model_table;

/* RA_OK when profile pf (read from path; NULL: the built-in one) holds
 * every rate a prediction for allocation al and kernel key needs (its
 * engine, precision and tile class among them; with_io: the I/O rates
 * too); else RA_ERR_INPUT, one line naming the file and the key. */
ra_status model_profile_check(const char *path, const ra_profile *pf,
                              const model_alloc *al,
                              const profile_kernel_key *key, int with_io);

/* Predicts every strategy for the problem under the layout of p (or, when
 * layout_auto, each of contiguous, zigzag, striped, and the one
 * ra_params_layout picks first). RA_ERR_NOMEM when out of memory. */
ra_status model_evaluate(const ra_shape *s, const ra_params *p,
                         int layout_auto, const model_masks *mk,
                         const model_alloc *al, const ra_profile *pf,
                         int with_io, model_table *t);

/* The model's median error, |measured / predicted - 1| over 85 measured
 * cases (docs/PERFORMANCE.md, "Accuracy"): strategies predicted closer
 * than this to the fastest are a tie, not a ranking. */
#define MODEL_ERROR 0.048

/* The row of strategy k in t at its best layout (the first when none
 * applies). */
const model_result *model_best_of(const model_table *t, ra_strategy k);

/* The strategies, each at its best layout, predicted within MODEL_ERROR
 * of t's best, into tie: the best first, then the others in enum order;
 * how many (0 when nothing applies). */
int model_ties(const model_table *t, ra_strategy tie[RA_STRATEGY_COUNT]);

#endif /* RA_MODEL_H */
