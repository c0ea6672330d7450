/* tally.c: see tally.h. */
#include <math.h>

#include "internal.h"
#include "tally.h"

ra_status ra_tally_allreduce(MPI_Comm comm, const ra_tally *mine,
                             ra_tally *all)
{
    double sums[3] = {mine->err2, mine->ref2, mine->abs2}, gs[3];
    double maxs[3] = {mine->max_abs_o, mine->max_lse, mine->p_unit}, gm[3];
    int64_t counts[2] = {mine->bad_inf, mine->rows}, gc[2];
    if (MPI_Allreduce(sums, gs, 3, MPI_DOUBLE, MPI_SUM, comm) != MPI_SUCCESS ||
        MPI_Allreduce(maxs, gm, 3, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS ||
        MPI_Allreduce(counts, gc, 2, MPI_INT64_T, MPI_SUM, comm) !=
            MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "tally: MPI_Allreduce failed");
    *all = (ra_tally){.max_abs_o = gm[0], .max_lse = gm[1]};
    const ra_tally sum = {.err2 = gs[0], .ref2 = gs[1], .bad_inf = gc[0],
                          .rows = gc[1], .abs2 = gs[2], .p_unit = gm[2]};
    ra_tally_merge(all, &sum);
    return RA_OK;
}
