/* align.c: see align.h. With segments, query i of id s in batch b sits at
 * i + (kend - qend), qend and kend one past the last query and key of id s
 * in batch b over all ranks: the ends of every rank's runs of ids,
 * gathered, sorted by (batch, id, kind), looked up per local query. */
#include <limits.h>
#include <stdlib.h>

#include "agree.h"
#include "align.h"
#include "internal.h"

/* One run of equal ids in a rank's slice: batch, id, kind (0 queries,
 * 1 keys) and one past the run's last position. */
typedef struct {
    int64_t b, id, kind, end;
} align_run;

enum { RUN_WORDS = sizeof(align_run) / sizeof(int64_t) };

/* The runs of ids seg (B, sl->count) into out (NULL: only counted). */
static int64_t runs_of(const int64_t *seg, const ra_slice *sl, int64_t B,
                       int64_t kind, align_run *out)
{
    int64_t k = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t *row = seg + b * sl->count;
        for (int64_t i = 0; i < sl->count; i++) {
            if (i + 1 < sl->count && row[i + 1] == row[i])
                continue;
            if (out)
                out[k] = (align_run){b, row[i], kind, ra_slice_pos(sl, i) + 1};
            k++;
        }
    }
    return k;
}

static int run_order(const void *x, const void *y)
{
    const align_run *a = x, *c = y;
    if (a->b != c->b)
        return a->b < c->b ? -1 : 1;
    if (a->id != c->id)
        return a->id < c->id ? -1 : 1;
    if (a->kind != c->kind)
        return a->kind < c->kind ? -1 : 1;
    return (a->end > c->end) - (a->end < c->end);
}

/* One past the last position of (b, id, kind) among the n sorted runs, or
 * -1 when there is none. */
static int64_t run_end(const align_run *runs, int64_t n, int64_t b,
                       int64_t id, int64_t kind)
{
    const align_run key = {b, id, kind, INT64_MAX};
    int64_t lo = 0, hi = n;
    while (lo < hi) { /* the first run ordered after key */
        const int64_t mid = lo + (hi - lo) / 2;
        if (run_order(&runs[mid], &key) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    const align_run *r = lo > 0 ? &runs[lo - 1] : NULL;
    return r && r->b == b && r->id == id && r->kind == kind ? r->end : -1;
}

/* Without segments: i + (kv_len_b - q_len_b), or i + (M - N). */
static void align_lens(const ra_shape *s, const ra_slice *qs,
                       const ra_params *p, const ra_masks *mk,
                       int64_t *qalign)
{
    for (int64_t b = 0; b < s->B; b++) {
        int64_t diag = s->M - s->N;
        if (p->num.align == RA_ALIGN_SEQUENCE)
            diag = (mk && mk->kv_lens ? mk->kv_lens[b] : s->M) -
                   (mk && mk->q_lens ? mk->q_lens[b] : s->N);
        for (int64_t i = 0; i < qs->count; i++)
            qalign[b * qs->count + i] = ra_slice_pos(qs, i) + diag;
    }
}

/* The runs of every rank: this rank's in mine (nmine), all of them into
 * *all (*nall, sorted; the caller frees it). Collective; agreed. */
static ra_status runs_gather(MPI_Comm comm, const align_run *mine,
                             int64_t nmine, align_run **all, int64_t *nall)
{
    int P = 1, count = (int)(nmine * RUN_WORDS);
    int *counts = NULL;
    ra_status st = MPI_Comm_size(comm, &P) == MPI_SUCCESS
                       ? RA_OK
                       : ra_error_set(RA_ERR_MPI, "align: MPI_Comm_size "
                                                  "failed");
    if (st == RA_OK && !(counts = malloc(sizeof(int) * 2 * (size_t)P)))
        st = ra_error_set(RA_ERR_NOMEM, "align: cannot allocate the counts");
    if ((st = ra_agree(comm, st)) == RA_OK &&
        MPI_Allgather(&count, 1, MPI_INT, counts, 1, MPI_INT, comm) !=
            MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "align: MPI_Allgather of the run "
                                      "counts failed");
    int64_t total = 0;
    for (int r = 0; st == RA_OK && r < P; r++) {
        counts[P + r] = (int)total;
        total += counts[r];
    }
    if (st == RA_OK && total > INT_MAX)
        st = ra_error_set(RA_ERR_ARG, "align: %lld runs of segment ids are "
                          "more than one MPI message can hold",
                          (long long)(total / RUN_WORDS));
    if (st == RA_OK && !(*all = malloc(sizeof(int64_t) * (size_t)(total + 1))))
        st = ra_error_set(RA_ERR_NOMEM, "align: cannot allocate %lld runs "
                          "of segment ids", (long long)(total / RUN_WORDS));
    if ((st = ra_agree(comm, st)) == RA_OK &&
        MPI_Allgatherv(mine, count, MPI_INT64_T, *all, counts, counts + P,
                       MPI_INT64_T, comm) != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "align: MPI_Allgatherv of the runs of "
                                      "segment ids failed");
    *nall = total / RUN_WORDS;
    if (st == RA_OK)
        qsort(*all, (size_t)*nall, sizeof **all, run_order);
    free(counts);
    return st;
}

/* With segments: every rank's runs, then each local query's offset. */
static ra_status align_segments(MPI_Comm comm, const ra_shape *s,
                                const ra_slice *qs, const ra_slice *ks,
                                const ra_masks *mk, int64_t *qalign)
{
    const int64_t nq = runs_of(mk->q_segments, qs, s->B, 0, NULL);
    const int64_t nk = runs_of(mk->kv_segments, ks, s->B, 1, NULL);
    align_run *mine = malloc(sizeof *mine * (size_t)(nq + nk + 1));
    align_run *all = NULL;
    int64_t nall = 0;
    ra_status st = mine ? RA_OK
                        : ra_error_set(RA_ERR_NOMEM, "align: cannot "
                                       "allocate this rank's runs of ids");
    if (st == RA_OK && (nq + nk) * RUN_WORDS > INT_MAX)
        st = ra_error_set(RA_ERR_ARG, "align: %lld runs of segment ids on "
                          "one rank are more than one MPI message can hold",
                          (long long)(nq + nk));
    if (st == RA_OK) {
        runs_of(mk->q_segments, qs, s->B, 0, mine);
        runs_of(mk->kv_segments, ks, s->B, 1, mine + nq);
    }
    if ((st = ra_agree(comm, st)) == RA_OK)
        st = runs_gather(comm, mine, nq + nk, &all, &nall);
    for (int64_t b = 0; st == RA_OK && b < s->B; b++)
        for (int64_t i = 0; i < qs->count; i++) {
            const int64_t id = mk->q_segments[b * qs->count + i];
            const int64_t kend = run_end(all, nall, b, id, 1);
            const int64_t qend = run_end(all, nall, b, id, 0);
            /* a query whose id no key has sees nothing: any place will do */
            qalign[b * qs->count + i] = ra_slice_pos(qs, i) +
                                        (kend < 0 ? s->M - s->N : kend - qend);
        }
    free(mine);
    free(all);
    return st;
}

ra_status ra_align_queries(MPI_Comm comm, const ra_shape *s, ra_layout lay,
                           const ra_params *p, const ra_masks *mk,
                           int64_t *qalign)
{
    int rank, P;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &P) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "align: cannot query the "
                                        "communicator");
    const ra_slice qs = ra_params_slice(p, lay, s->N, rank, P);
    const ra_slice ks = ra_params_slice(p, lay, s->M, rank, P);
    if (p->num.align != RA_ALIGN_SEQUENCE || !mk || !mk->q_segments) {
        align_lens(s, &qs, p, mk, qalign);
        return RA_OK;
    }
    return align_segments(comm, s, &qs, &ks, mk, qalign);
}
