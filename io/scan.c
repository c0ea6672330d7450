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

static const char *const kinds[4] = {"", "nan", "inf", "-inf"};

/* One sliced tensor (B, len, row) of which this rank holds slice. */
typedef struct {
    const float *x;
    int64_t len, row;
    const ra_slice *slice;
} scan_part;

/* Collective: for each of the n parts, the smallest flat file index of a
 * non-finite value over all ranks (INT64_MAX when none) and its kind. */
static ra_status scan_parts(MPI_Comm comm, const char *path, int64_t B,
                            int n, const scan_part *t, int64_t *global,
                            int *kind)
{
    int64_t first[3];
    int mine[3];

    /* step 1: each rank's first offender per tensor; the smallest wins */
    for (int i = 0; i < n; i++)
        first[i] = first_nonfinite(t[i].x, B, t[i].len, t[i].row, t[i].slice,
                                   &mine[i]);
    if (MPI_Allreduce(first, global, n, MPI_INT64_T, MPI_MIN, comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Allreduce of the "
                            "non-finite scan failed", path);
    /* step 2: the owner of each winner tells what it is */
    for (int i = 0; i < n; i++)
        mine[i] = global[i] != INT64_MAX && first[i] == global[i] ? mine[i]
                                                                  : 0;
    if (MPI_Allreduce(mine, kind, n, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: MPI_Allreduce of the "
                            "non-finite scan failed", path);
    return RA_OK;
}

/* The refusal of a non-finite value at flat index f of dataset name of the
 * given dims; legend names the axes, e.g. "(b, i, h, d)". */
static ra_status nonfinite_error(const char *path, const char *name,
                                 const char *legend, int rank,
                                 const int64_t *dims, int64_t f, int kind,
                                 int64_t *index)
{
    char at[128] = "";
    size_t used = 0;

    for (int i = rank - 1; i >= 0; i--) {
        index[i] = f % dims[i];
        f /= dims[i];
    }
    for (int i = 0; i < rank && used < sizeof at; i++)
        used += (size_t)snprintf(at + used, sizeof at - used, "%s%lld",
                                 i ? ", " : "", (long long)index[i]);
    return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: non-finite value (%s) "
                        "at index %s = (%s)", path, name, kinds[kind], legend,
                        at);
}

ra_status h5io_scan_nonfinite(MPI_Comm comm, const char *path,
                              const h5io_inputs *in, h5io_nonfinite *bad)
{
    const ra_h5_source *src = in->src;
    const ra_shape *s = in->shape;
    const char *const names[3] = {src && src->q ? src->q : "/q",
                                  src && src->k ? src->k : "/k",
                                  src && src->v ? src->v : "/v"};
    static const char *const legends[3] = {"(b, i, h, d)", "(b, j, g, d)",
                                           "(b, j, g, d)"};
    int64_t global[3];
    int kind[3];
    ra_slice sq, sk;

    bad->dataset = NULL;
    ra_status st = h5io_rank_slices(comm, path, in->layout, in->cut, s, &sq,
                                    &sk);
    if (st != RA_OK)
        return st;
    const int64_t Dk = ra_shape_dk(s);
    const scan_part t[3] = {{in->q, s->N, s->H * s->D, &sq},
                            {in->k, s->M, s->G * Dk, &sk},
                            {in->v, s->M, s->G * s->Dv, &sk}};
    const int64_t dims[3][4] = {{s->B, s->N, s->H, s->D},
                                {s->B, s->M, s->G, Dk},
                                {s->B, s->M, s->G, s->Dv}};

    if ((st = scan_parts(comm, path, s->B, 3, t, global, kind)) != RA_OK)
        return st;
    for (int i = 0; i < 3; i++) {
        if (global[i] == INT64_MAX)
            continue;
        bad->dataset = names[i];
        bad->kind = kinds[kind[i]];
        return nonfinite_error(path, names[i], legends[i], 4, dims[i],
                               global[i], kind[i], bad->index);
    }
    return RA_OK;
}

ra_status h5io_scan_tokens(MPI_Comm comm, const char *path, const char *name,
                           const int64_t dims[3], const ra_slice *slice,
                           const float *x)
{
    const scan_part t = {x, dims[1], dims[2], slice};
    int64_t global, index[3];
    int kind;
    ra_status st;

    if ((st = scan_parts(comm, path, dims[0], 1, &t, &global, &kind)) != RA_OK)
        return st;
    if (global == INT64_MAX)
        return RA_OK;
    return nonfinite_error(path, name, "(b, i, e)", 3, dims, global, kind,
                           index);
}

ra_status h5io_scan_array(const char *path, const char *name, int rank,
                          const int64_t *dims, const float *x)
{
    static const char *const legends[5] = {"()", "(i)", "(i, j)",
                                           "(i, j, k)", "(i, j, k, l)"};
    const int64_t count = ra_count_checked(rank, dims);
    int64_t index[4];

    for (int64_t f = 0; f < count; f++) {
        if (isfinite(x[f]))
            continue;
        const int kind = isnan(x[f]) ? 1 : x[f] > 0 ? 2 : 3;
        return nonfinite_error(path, name, legends[rank], rank, dims, f, kind,
                               index);
    }
    return RA_OK;
}
