/* test_bigmsg_mpi.c: one ring message over 2 GiB, at P = 2.
 *
 * B=1, N=2, M=140000, H=G=1, D=Dv=4096: each rank's K/V block is 70000 rows
 * of 8192 floats = 2.29 GB, sent in one message described by a datatype of
 * rows (counts in rows, displacements in bytes). About 6.5 GB per rank. The
 * two query rows are checked against the fp64 reference. A block that MPI
 * cannot describe (more than 2^31 - 1 rows) is refused before anything is
 * allocated, with a message saying why. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "call.h"
#include "internal.h"
#include "support.h"

static int rank, nranks;

/* A cheap deterministic fill: unit-scale values from a hash of the index. */
static float value_at(uint64_t stream, uint64_t i)
{
    return (float)((double)(ra_random_u64(7, stream, i) >> 11) * 0x1.0p-53 -
                   0.5) * 3.4f;
}

static void test_message_over_2gib(void **state)
{
    (void)state;
    if (nranks != 2)
        skip(); /* sized for two ranks */
    const ra_shape s = {1, 2, 140000, 1, 1, 4096, 4096};
    ra_params prm;
    ra_params_default(&prm);
    prm.exec.layout = RA_LAYOUT_CONTIGUOUS;
    const ra_slice qs =
        ra_params_slice(&prm, prm.exec.layout, s.N, rank, nranks);
    const ra_slice ks =
        ra_params_slice(&prm, prm.exec.layout, s.M, rank, nranks);
    const size_t row = (size_t)s.D;
    float *q = malloc(sizeof(float) * row * (size_t)(qs.count + 1));
    float *k = malloc(sizeof(float) * row * (size_t)ks.count);
    float *v = malloc(sizeof(float) * row * (size_t)ks.count);
    float *o = malloc(sizeof(float) * row * (size_t)(qs.count + 1));
    float lse[2];
    int bad = !q || !k || !v || !o, any_bad;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_bad) { /* not enough memory here: say so, do not pretend */
        if (rank == 0)
            printf("# skipped: cannot allocate 6.5 GB per rank\n");
        free(q);
        free(k);
        free(v);
        free(o);
        skip();
    }
    for (size_t i = 0; i < row * (size_t)qs.count; i++)
        q[i] = value_at(0, qs.run[0].start * row + i) * 0.05f;
    for (size_t i = 0; i < row * (size_t)ks.count; i++) {
        k[i] = value_at(1, ks.run[0].start * row + i);
        v[i] = value_at(2, ks.run[0].start * row + i);
    }
    ra_timing tm = {0};
    ra_status st = ra_call_forward(MPI_COMM_WORLD, &s, &prm, NULL,
                                   &(ra_qkv){q, k, v}, &(ra_out){o, lse, NULL},
                                   &tm);
    /* fp64 reference of the local query row over all keys, regenerated */
    double err2 = 0, ref2 = 0, lerr = 0;
    if (st == RA_OK && qs.count == 1) {
        double *sc = malloc(sizeof(double) * (size_t)s.M);
        double *acc = calloc(row, sizeof(double));
        double mx = -INFINITY, sum = 0;
        const double scale = 1.0 / sqrt((double)s.D);
        for (int64_t j = 0; j < s.M; j++) {
            double dot = 0;
            for (size_t d = 0; d < row; d++)
                dot += (double)q[d] * value_at(1, (uint64_t)j * row + d);
            sc[j] = dot * scale;
            mx = sc[j] > mx ? sc[j] : mx;
        }
        for (int64_t j = 0; j < s.M; j++) {
            double p = exp(sc[j] - mx);
            sum += p;
            for (size_t d = 0; d < row; d++)
                acc[d] += p * value_at(2, (uint64_t)j * row + d);
        }
        for (size_t d = 0; d < row; d++) {
            double e = o[d] - acc[d] / sum;
            err2 += e * e;
            ref2 += (acc[d] / sum) * (acc[d] / sum);
        }
        lerr = fabs(lse[0] - (mx + log(sum))) / fmax(1.0, fabs(mx + log(sum)));
        free(sc);
        free(acc);
    }
    double mine[3] = {st == RA_OK ? 0.0 : 1.0, err2, ref2}, all[3];
    MPI_Allreduce(mine, all, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double worst_lse;
    MPI_Allreduce(&lerr, &worst_lse, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int64_t sent = 0;
    MPI_Allreduce(&tm.bytes_sent, &sent, 1, MPI_INT64_T, MPI_MAX,
                  MPI_COMM_WORLD);
    const double rel = sqrt(all[1] / all[2]);
    if (rank == 0)
        printf("# P=%d largest message %.2f GiB, rel err %.2e, lse err %.2e\n",
               nranks, (double)sent / 1073741824.0, rel, worst_lse);
    free(q);
    free(k);
    free(v);
    free(o);
    assert_true(all[0] == 0);
    assert_true(nranks < 2 || sent > ((int64_t)1 << 31));
    assert_true(rel < RA_TOLERANCE && worst_lse < RA_TOLERANCE);
}

static void test_block_too_large_is_refused(void **state)
{
    (void)state;
    /* 2^32 key rows on one rank: no int row count can describe the block.
     * Refused before any allocation or access to the (absent) tensors. */
    const ra_shape s = {1, 1, (int64_t)1 << 32, 1, 1, 1, 1};
    ra_params prm;
    ra_params_default(&prm);
    float q = 0, o = 0, lse = 0;
    ra_status st = nranks == 1 ? ra_call_forward(MPI_COMM_WORLD, &s, &prm,
                                                 NULL,
                                                 &(ra_qkv){&q, NULL, NULL},
                                                 &(ra_out){&o, &lse, NULL},
                                                 NULL)
                               : RA_ERR_ARG;
    if (nranks == 1) {
        if (rank == 0)
            printf("# refused: %s\n", ra_error_message());
        assert_int_equal(st, RA_ERR_ARG);
        assert_non_null(strstr(ra_error_message(), "counts are int"));
    }
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv, &rank, &nranks);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message_over_2gib),
        cmocka_unit_test(test_block_too_large_is_refused),
    };
    return mpi_test_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
