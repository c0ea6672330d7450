/* baseline.c: gather everything, materialise everything (see
 * bench_measure.h). */
#include <limits.h>
#include <stdlib.h>

#include "agree.h"
#include "bench_measure.h"
#include "internal.h"
#include "kernel.h"

/* Gathers the (B, m_r, heads, dim) slices of every rank into the full
 * (B, M, heads, dim) tensor, one batch at a time. */
static int gather_seq(MPI_Comm comm, const ra_shape *s, int64_t row,
                      const float *mine, float *full, int *counts, int *displs)
{
    int P, r;
    if (MPI_Comm_size(comm, &P) != MPI_SUCCESS ||
        MPI_Comm_rank(comm, &r) != MPI_SUCCESS)
        return -1;
    for (int i = 0; i < P; i++) {
        ra_range kr = ra_shard_range(s->M, i, P);
        counts[i] = (int)(kr.count * row);
        displs[i] = (int)(kr.start * row);
    }
    const int64_t m = ra_shard_range(s->M, r, P).count;
    for (int64_t b = 0; b < s->B; b++)
        if (MPI_Allgatherv(mine + b * m * row, counts[r], MPI_FLOAT,
                           full + b * s->M * row, counts, displs, MPI_FLOAT,
                           comm) != MPI_SUCCESS)
            return -1;
    return 0;
}

ra_status ra_baseline_forward(MPI_Comm comm, const ra_shape *s,
                              const ra_params *params,
                              const ra_baseline_operands *x,
                              ra_timing *timing)
{
    double t0 = MPI_Wtime();
    int P = 1, r = 0;
    ra_status st = RA_OK;
    if (MPI_Comm_size(comm, &P) != MPI_SUCCESS ||
        MPI_Comm_rank(comm, &r) != MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "baseline: cannot query the "
                                      "communicator");
    const ra_range qr = ra_shard_range(s->N, r, P);
    if (s->M * s->G * (s->D > s->Dv ? s->D : s->Dv) > INT_MAX ||
        qr.count * s->M > INT_MAX)
        st = ra_error_set(RA_ERR_ARG, "baseline: problem too large for one "
                                      "materialised score matrix");
    float *kf = NULL, *vf = NULL, *scores = NULL;
    int *counts = NULL, *displs = NULL;
    if (st == RA_OK) {
        kf = malloc(sizeof(float) * (size_t)(s->B * s->M * s->G * s->D));
        vf = malloc(sizeof(float) * (size_t)(s->B * s->M * s->G * s->Dv));
        scores = malloc(sizeof(float) * (size_t)(qr.count * s->M + 1));
        counts = malloc(sizeof(int) * (size_t)P);
        displs = malloc(sizeof(int) * (size_t)P);
        if (!kf || !vf || !scores || !counts || !displs)
            st = ra_error_set(RA_ERR_NOMEM, "baseline: cannot allocate the "
                                            "full K, V and score matrix");
    }
    st = ra_agree(comm, st);
    double t1 = MPI_Wtime(), t2 = t1;
    if (st == RA_OK) {
        if (gather_seq(comm, s, s->G * s->D, x->k, kf, counts, displs) ||
            gather_seq(comm, s, s->G * s->Dv, x->v, vf, counts, displs))
            st = ra_error_set(RA_ERR_MPI, "baseline: MPI_Allgatherv failed");
        t2 = MPI_Wtime();
        const int blas = ra_blas_enter(ra_params_threads(params));
        ra_naive_args a = {.B = s->B, .n = qr.count, .N = s->N, .M = s->M,
                           .H = s->H, .G = s->G, .D = s->D, .Dv = s->Dv,
                           .q_start = qr.start,
                           .causal = params->num.causal,
                           .scale = (float)ra_params_scale(params, s)};
        if (st == RA_OK && qr.count > 0)
            ra_naive_forward(&a, x->q, kf, vf, x->o, x->lse, scores);
        ra_blas_leave(blas);
    }
    free(kf);
    free(vf);
    free(scores);
    free(counts);
    free(displs);
    if (timing) {
        timing->total = MPI_Wtime() - t0;
        timing->comm_wait = t2 - t1;
        timing->compute = timing->total - timing->comm_wait;
        timing->bytes_sent = 0;
        timing->bytes_cross_node = 0;
    }
    return st;
}
