/* lse_check.c: a forward output's /lse against the masks of the backward
 * run. The kernel gives a query row that sees at least one key a finite
 * lse and a row that sees none -inf; a forward computed with other masks
 * breaks this somewhere, and its gradients would be wrong. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "align.h"
#include "band.h"
#include "h5io.h"
#include "internal.h"

/* Everything one check allocates: positions and verdicts of the local
 * queries, and with segments every key's id (B, M), gathered, and one
 * batch's keys sorted. */
typedef struct {
    int64_t *pos;          /* (n) global positions of the local queries */
    int64_t *aligned;      /* (B, n) their aligned positions, per-sequence
                              alignment only (else NULL) */
    unsigned char *seen;   /* (n) */
    int64_t *ids;          /* (B, M) or NULL */
    ra_key_id *keys;       /* (M) or NULL */
    int *counts, *displs;  /* (P) */
} lse_work;

/* The positions of slice's tokens in order into pos. */
static void slice_positions(const ra_slice *sl, int64_t *pos)
{
    int64_t t = 0;
    for (int r = 0; r < sl->nruns; r++)
        for (int64_t i = 0; i < sl->run[r].count; i++)
            pos[t++] = sl->run[r].start + i * sl->run[r].stride;
}

/* Every rank's key ids gathered into w->ids (B, M) at their positions,
 * batch by batch: the extra M ids after them receive a batch in rank
 * order, w->keys (unused until step 2) holds a rank's positions;
 * collective. */
static ra_status ids_gather(MPI_Comm comm, const ra_shape *s,
                            const ra_params *p, ra_layout layout,
                            const ra_masks *mk, int64_t m, lse_work *w)
{
    int P;
    MPI_Comm_size(comm, &P);
    int64_t *recv = w->ids + s->B * s->M, *pos = (int64_t *)w->keys;
    for (int r = 0, off = 0; r < P; r++) {
        w->counts[r] = (int)ra_params_slice(p, layout, s->M, r, P).count;
        w->displs[r] = off;
        off += w->counts[r];
    }
    for (int64_t b = 0; b < s->B; b++) {
        if (MPI_Allgatherv(mk->kv_segments + b * m, (int)m, MPI_INT64_T, recv,
                           w->counts, w->displs, MPI_INT64_T, comm) !=
            MPI_SUCCESS)
            return ra_error_set(RA_ERR_MPI, "lse check: MPI_Allgatherv of "
                                "the key segment ids failed");
        for (int r = 0; r < P; r++) {
            const ra_slice sl = ra_params_slice(p, layout, s->M, r, P);
            slice_positions(&sl, pos);
            for (int64_t t = 0; t < sl.count; t++)
                w->ids[b * s->M + pos[t]] = recv[w->displs[r] + t];
        }
    }
    return RA_OK;
}

/* The first local (b, h, i) whose lse contradicts w->seen of batch b. */
static ra_status batch_check(const char *fwd, const ra_shape *s, int64_t b,
                             int64_t n, const float *lse, const lse_work *w)
{
    for (int64_t h = 0; h < s->H; h++)
        for (int64_t i = 0; i < n; i++) {
            const float x = lse[(b * s->H + h) * n + i];
            if (w->seen[i] == (isfinite(x) != 0))
                continue;
            return ra_error_set(RA_ERR_INPUT, "%s: dataset /lse: (b, h, i) "
                                "= (%lld, %lld, %lld) is %g, but under this "
                                "run's masks that query sees %s: the forward "
                                "was computed with other masks", fwd,
                                (long long)b, (long long)h,
                                (long long)w->pos[i], (double)x,
                                w->seen[i] ? "at least one key" : "no key");
        }
    return RA_OK;
}

/* Steps 2 and 3 of h5io_lse_check: each batch's verdicts, then its rows. */
static ra_status batches_check(const char *fwd, const ra_shape *s,
                               const ra_params *p, const ra_masks *mk,
                               const float *lse, int64_t n, lse_work *w)
{
    ra_status st = RA_OK;
    for (int64_t b = 0; b < s->B && st == RA_OK; b++) {
        ra_visibility v = {ra_band_of(p, s),
                           mk && mk->q_lens ? mk->q_lens[b] : s->N,
                           mk && mk->kv_lens ? mk->kv_lens[b] : s->M,
                           NULL, s->M, w->aligned ? w->aligned + b * n : NULL};
        if (w->aligned)
            v.band = ra_band_make(p->num.causal, p->num.window,
                                  p->num.window_left, p->num.window_right, 0);
        if (w->ids) {
            for (int64_t j = 0; j < s->M; j++)
                w->keys[j] = (ra_key_id){w->ids[b * s->M + j], j};
            ra_key_ids_sort(w->keys, s->M);
            v.keys = w->keys;
        }
        ra_rows_see_keys(&v, w->pos, w->ids ? mk->q_segments + b * n : NULL,
                         n, w->seen);
        st = batch_check(fwd, s, b, n, lse, w);
    }
    return st;
}

ra_status h5io_lse_check(MPI_Comm comm, const char *fwd, const ra_shape *s,
                         const ra_params *p, const ra_masks *mk,
                         const float *lse)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    const ra_slice qs = ra_params_slice(p, p->exec.layout, s->N, rank, P);
    const ra_slice ks = ra_params_slice(p, p->exec.layout, s->M, rank, P);
    const int segs = mk && mk->q_segments;
    lse_work w = {0};
    ra_status st = RA_OK;
    /* step 1: allocate, and with segments gather every key's id */
    w.pos = malloc(sizeof(int64_t) * (size_t)(qs.count + 1));
    w.seen = malloc((size_t)qs.count + 1);
    w.counts = malloc(sizeof(int) * 2 * (size_t)P);
    w.displs = w.counts ? w.counts + P : NULL;
    if (p->num.align == RA_ALIGN_SEQUENCE)
        w.aligned = malloc(sizeof(int64_t) * (size_t)(s->B * qs.count + 1));
    if (segs) {
        w.ids = malloc(sizeof(int64_t) * (size_t)((s->B + 1) * s->M));
        w.keys = malloc(sizeof(ra_key_id) * (size_t)s->M);
    }
    if (!w.pos || !w.seen || !w.counts || (segs && (!w.ids || !w.keys)) ||
        (p->num.align == RA_ALIGN_SEQUENCE && !w.aligned))
        st = ra_error_set(RA_ERR_NOMEM, "%s: cannot allocate the check of "
                          "/lse against the masks", fwd);
    else if (segs && s->M > INT_MAX)
        st = ra_error_set(RA_ERR_ARG, "%s: the check of /lse against the "
                          "segments takes M up to %d keys", fwd, INT_MAX);
    if ((st = ra_agree(comm, st)) == RA_OK && segs)
        st = ra_agree(comm,
                      ids_gather(comm, s, p, p->exec.layout, mk, ks.count, &w));
    if (st == RA_OK && w.aligned) /* collective; agreed */
        st = ra_align_queries(comm, s, p->exec.layout, p, mk, w.aligned);
    /* steps 2 and 3: per batch, which local queries see a key; their lse */
    if (st == RA_OK) {
        slice_positions(&qs, w.pos);
        st = ra_agree(comm, batches_check(fwd, s, p, mk, lse, qs.count, &w));
    }
    free(w.pos);
    free(w.aligned);
    free(w.seen);
    free(w.ids);
    free(w.keys);
    free(w.counts);
    return st;
}
