/* h5probe.c: how fast parallel HDF5 writes and reads a directory, measured
 * through the same functions as run's output and input. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "h5probe.h"
#include "h5util.h"
#include "internal.h"

enum { PROBE_H = 8, PROBE_D = 128 };

/* Rank 0 reserves the scratch name (an owned temporary name in dir) and
 * every rank receives it; name is PATH_MAX bytes. */
static ra_status probe_name(MPI_Comm comm, int rank, const char *dir,
                            char *name)
{
    ra_status st = RA_OK;
    name[0] = '\0';
    if (rank == 0)
        st = h5io_tmp_name(dir, "ringattn-probe.h5", name);
    st = ra_agree(comm, st);
    if (st == RA_OK && MPI_Bcast(name, PATH_MAX, MPI_CHAR, 0, comm) !=
                           MPI_SUCCESS)
        st = ra_error_set(RA_ERR_MPI, "%s: MPI_Bcast of the scratch name "
                          "failed", dir);
    return ra_agree(comm, st);
}

/* Writes then reads the scratch file; its bytes and the slowest times. */
static ra_status probe_write_read(MPI_Comm comm, const char *name,
                                  const ra_shape *s, const ra_h5_tuning *tn,
                                  float *o, float *lse, double t[2])
{
    ra_exec exec;
    ra_exec_default(&exec);
    exec.layout = RA_LAYOUT_CONTIGUOUS;
    const ra_run_meta meta = {.exec = &exec, .scale = 1.0,
                              .command_line = "ringattn probe", .masks = "",
                              .tuning = tn};
    double mine[2] = {0, 0};
    /* the scratch file's name is this process's own: published before
     * the write renames the file into it, so that a signal removes it */
    h5io_tmp_publish(name);
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    ra_status st = ra_h5_write_outputs(comm, name, 0, s, &meta, o, lse);
    mine[0] = MPI_Wtime() - t0;
    if (st == RA_OK) {
        const ra_h5_source src = {.q = "/o", .k = "/o", .v = "/o",
                                  .axes = RA_AXES_BNHD, /* as written */
                                  .tuning = tn};
        MPI_Barrier(comm);
        t0 = MPI_Wtime();
        int rank, P;
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &P);
        const ra_slice rows[2] = {
            ra_layout_slice(exec.layout, NULL, s->N, rank, P),
            ra_layout_slice(exec.layout, NULL, s->M, rank, P)};
        st = ra_h5_read_inputs(comm, name, &src, s, rows, o, o, o);
        mine[1] = MPI_Wtime() - t0;
    }
    if (MPI_Allreduce(mine, t, 2, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS &&
        st == RA_OK)
        st = ra_error_set(RA_ERR_MPI, "%s: MPI_Allreduce of the I/O times "
                          "failed", name);
    return ra_agree(comm, st);
}

ra_status h5io_probe_rates(MPI_Comm comm, const char *dir, int64_t rows,
                           const ra_h5_tuning *tuning, double *written,
                           double *t_write, double *read, double *t_read)
{
    int rank, P;
    char name[PATH_MAX];
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    const ra_shape s = {.B = 1, .N = rows * P, .M = rows * P, .H = PROBE_H,
                        .G = PROBE_H, .D = PROBE_D, .Dv = PROBE_D};
    const size_t no = (size_t)rows * PROBE_H * PROBE_D;
    float *o = malloc(sizeof(float) * (no + (size_t)rows * PROBE_H));
    ra_status st = o ? RA_OK : ra_error_set(RA_ERR_NOMEM, "%s: cannot "
                                            "allocate %lld rows to write",
                                            dir, (long long)rows);
    if ((st = ra_agree(comm, st)) != RA_OK)
        goto done;
    if ((st = probe_name(comm, rank, dir, name)) != RA_OK)
        goto done;
    ra_random_normal((uint64_t)rank, RA_STREAM_PROBE, 0, (int64_t)no, o);
    for (size_t i = 0; i < (size_t)rows * PROBE_H; i++)
        o[no + i] = 1.0f;
    double t[2] = {0, 0};
    st = probe_write_read(comm, name, &s, tuning, o, o + no, t);
    if (rank == 0)
        unlink(name);
    h5io_tmp_unpublish(name);
    MPI_Barrier(comm);
    const double bytes = 4.0 * (double)s.B * (double)s.N * PROBE_H;
    *written = bytes * (PROBE_D + 1);
    *read = bytes * PROBE_D * 3;
    *t_write = t[0];
    *t_read = t[1];
done:
    free(o);
    return st;
}
