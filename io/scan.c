/* scan.c: the finiteness check of the input tensors after reading, so that
 * a NaN or an infinity in a file is reported by its place in the file
 * rather than found later as a NaN output. */
#include <math.h>
#include <stdint.h>

#include "h5io.h"
#include "internal.h"

/* The first non-finite value of a local (B, slice->count, row) tensor, as
 * its flat index in the file's (B, len, row) order, or INT64_MAX; *kind is
 * 1 for NaN, 2 for +inf, 3 for -inf. Positions rise with the local index,
 * so the first one met locally is this rank's smallest. */
static int64_t first_nonfinite(const float *x, int64_t B, int64_t len,
                               int64_t row, const ra_slice *slice, int *kind)
{
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < slice->count; t++) {
            const float *r = x + (b * slice->count + t) * row;
            for (int64_t j = 0; j < row; j++) {
                if (isfinite(r[j]))
                    continue;
                *kind = isnan(r[j]) ? 1 : r[j] > 0 ? 2 : 3;
                return (b * len + ra_slice_pos(slice, t)) * row + j;
            }
        }
    }
    *kind = 0;
    return INT64_MAX;
}

ra_status h5io_scan_nonfinite(MPI_Comm comm, const char *path,
                              const ra_shape *s, ra_layout layout,
                              const float *q, const float *k, const float *v,
                              h5io_nonfinite *bad)
{
    static const char *const names[3] = {"/q", "/k", "/v"};
    static const char *const legends[3] = {"(b, i, h, d)", "(b, j, g, d)",
                                           "(b, j, g, d)"};
    static const char *const kinds[4] = {"", "nan", "inf", "-inf"};
    int rank, nranks;

    bad->dataset = NULL;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &nranks) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Comm_rank/size failed", path);
    const ra_slice sq = ra_layout_slice(layout, s->N, rank, nranks);
    const ra_slice sk = ra_layout_slice(layout, s->M, rank, nranks);
    const struct {
        const float *x;
        int64_t len, heads, dim;
        const ra_slice *slice;
    } t[3] = {{q, s->N, s->H, s->D, &sq}, {k, s->M, s->G, ra_shape_dk(s), &sk},
              {v, s->M, s->G, s->Dv, &sk}};

    /* step 1: each rank's first offender per tensor; the smallest wins */
    int64_t first[3];
    int kind[3], owner_kind[3];
    for (int i = 0; i < 3; i++)
        first[i] = first_nonfinite(t[i].x, s->B, t[i].len,
                                   t[i].heads * t[i].dim, t[i].slice,
                                   &kind[i]);
    int64_t global[3];
    if (MPI_Allreduce(first, global, 3, MPI_INT64_T, MPI_MIN, comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Allreduce of the "
                            "non-finite scan failed", path);
    /* step 2: the owner of each winner tells what it is */
    for (int i = 0; i < 3; i++)
        kind[i] = global[i] != INT64_MAX && first[i] == global[i] ? kind[i]
                                                                  : 0;
    if (MPI_Allreduce(kind, owner_kind, 3, MPI_INT, MPI_MAX, comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Allreduce of the "
                            "non-finite scan failed", path);

    for (int i = 0; i < 3; i++) {
        if (global[i] == INT64_MAX)
            continue;
        int64_t f = global[i];
        bad->dataset = names[i];
        bad->index[3] = f % t[i].dim;
        f /= t[i].dim;
        bad->index[2] = f % t[i].heads;
        f /= t[i].heads;
        bad->index[1] = f % t[i].len;
        bad->index[0] = f / t[i].len;
        bad->kind = kinds[owner_kind[i]];
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: non-finite value "
                            "(%s) at index %s = (%lld, %lld, %lld, %lld)",
                            path, names[i], bad->kind, legends[i],
                            (long long)bad->index[0], (long long)bad->index[1],
                            (long long)bad->index[2],
                            (long long)bad->index[3]);
    }
    return RA_OK;
}
