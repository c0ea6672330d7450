/* band.h: which keys a query may see, and what a visible pair costs: the one
 * statement of the causal and window rules (internal, pure).
 *
 * Positions are global token indices. With the bottom-right alignment of
 * ringattn.h (diag = M - N), a query at position p sees the keys in
 * [p + lo, p + hi]: causal sets hi = diag, a window sets
 * lo = diag - left and hi = min(hi, diag + right). Padding (kv_len) cuts
 * the band at the end; segments are applied elsewhere (they are ids, not
 * positions).
 */
#ifndef RA_BAND_H
#define RA_BAND_H

#include <stdint.h>

#include "internal.h"

/* "No bound" for band offsets and lengths: far from overflow when added to
 * any position. */
#define RA_UNBOUNDED (INT64_MAX / 4)

typedef struct {
    int64_t lo, hi; /* offsets from the query's position, inclusive */
} ra_band;

/* The band of the rules that are on (diag = M - N). */
ra_band ra_band_make(int causal, int window, int64_t left, int64_t right,
                     int64_t diag);

/* The band of a forward pass's options for a shape. */
ra_band ra_band_of(const ra_params *params, const ra_shape *shape);

/* The band the balanced layout weighs a token by: the causal and window
 * rules of a self-attention (diag 0), whatever N and M are; NULL: none. */
ra_band ra_cut_band(const ra_params *params);

/* Where rank r of P starts under the balanced layout of a length-len axis
 * weighed by the band cut (comm/shard.c; r = P: len). */
int64_t ra_balanced_start(ra_band cut, int64_t len, int r, int P);

/* ra_layout_slice with the balanced cut weighed by the band cut
 * (ra_cut_band; unbounded on both sides: the contiguous cut). */
ra_slice ra_band_slice(ra_layout layout, ra_band cut, int64_t len, int rank,
                       int nranks);

/* The keys [*first, *last] that a query at position p sees within
 * [0, kv_len), and their count (0, with *first > *last, when none). */
int64_t ra_band_keys(ra_band band, int64_t p, int64_t kv_len, int64_t *first,
                     int64_t *last);

/* The first index of the sorted pos[0..len) whose value is >= x (len when
 * none): how many lie below x. */
int64_t ra_lower_bound(const int64_t *pos, int64_t len, int64_t x);

/* Visible (query, key) pairs of the queries at positions pos[0..n) of one
 * (batch, head), those at or after q_len seeing nothing. pos NULL means
 * 0, 1, 2... */
double ra_band_pairs(ra_band band, const int64_t *pos, int64_t n,
                     int64_t q_len, int64_t kv_len);

/* A key's segment id and position; ra_key_ids_sort orders them by id,
 * then position. */
typedef struct {
    int64_t id, pos;
} ra_key_id;

void ra_key_ids_sort(ra_key_id *keys, int64_t m);

/* Per-sequence alignment (ringattn.h, ra_align) of one whole batch of N
 * queries and M keys: at[i] = i + (kend - qend) for query i's id, from the
 * batch's query ids q_ids (N) and key ids k_ids (M) (a query whose id no
 * key has: i + M - N, it sees nothing anyway); without ids (q_ids NULL)
 * at[i] = i + (kv_len - q_len). keys: scratch of N + M entries (unused
 * without ids). For the checks that hold a whole batch; the ring resolves
 * its slices collectively (comm/align.h). */
void ra_align_batch(const int64_t *q_ids, const int64_t *k_ids, int64_t N,
                    int64_t M, int64_t q_len, int64_t kv_len, ra_key_id *keys,
                    int64_t *at);

/* What decides whether a query of one batch sees any key: its band, the
 * batch's lengths, and with segments the batch's m keys sorted by
 * ra_key_ids_sort (keys NULL: no segments). With aligned (the queries'
 * aligned positions, ra_align) the band is made with diag 0 and measured
 * from them; NULL: from the positions. */
typedef struct {
    ra_band band;
    int64_t q_len, kv_len;
    const ra_key_id *keys;
    int64_t m;
    const int64_t *aligned;
} ra_visibility;

/* seen[i] = 1 when the query at position pos[i] (segment id q_seg[i] when
 * v->keys) sees at least one key, else 0: the rule of the kernel, which
 * gives such a row a finite lse and the others -inf. */
void ra_rows_see_keys(const ra_visibility *v, const int64_t *pos,
                      const int64_t *q_seg, int64_t n, unsigned char *seen);

/* Useful FLOPs of one visible pair for all H heads: the score (2 D for
 * q.k, 4 A for the additive score with a tanh as one operation) and 2 Dv
 * for the weighted values, times H. */
double ra_pair_flops(const ra_shape *shape, const ra_params *params);

#endif /* RA_BAND_H */
