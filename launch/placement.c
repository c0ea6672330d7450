/* placement.c: a warning when a rank runs more threads than it has CPUs,
 * which otherwise shows only as a run at the speed of one core: mpirun
 * binds each rank to one core by default, and every OpenMP thread of the
 * rank inherits that binding; and one when a machine runs more ranks times
 * threads than it has cores (oversubscribed), whose times are shares of a
 * core. docs/PLACEMENT.md says how to place ranks and threads. */
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <omp.h>

#include "placement.h"

int cli_thread_cpus(int threads)
{
    cpu_set_t all;
    int unknown = 0;
    CPU_ZERO(&all);
#pragma omp parallel num_threads(threads)
    {
        cpu_set_t mine;
        CPU_ZERO(&mine);
        const int rc = sched_getaffinity(0, sizeof mine, &mine);
#pragma omp critical(cli_thread_cpus)
        {
            if (rc != 0)
                unknown = 1;
            else
                CPU_OR(&all, &all, &mine);
        }
    }
    return unknown ? 0 : CPU_COUNT(&all);
}

void cli_placement_warn(const cli_ctx *ctx, int threads)
{
    const int cpus = threads > 1 ? cli_thread_cpus(threads) : 1;
    const int crowded = cpus > 0 && cpus < threads;
    /* the first crowded rank and its CPU count, and how many are crowded */
    int mine[2] = {crowded ? ctx->rank : INT_MAX, cpus}, first[2];
    int count = 0;
    MPI_Allreduce(&crowded, &count, 1, MPI_INT, MPI_SUM, ctx->comm);
    MPI_Allreduce(mine, first, 1, MPI_2INT, MPI_MINLOC, ctx->comm);
    if (ctx->rank != 0 || count == 0)
        return;
    fprintf(stderr, "ringattn: warning: rank %d runs %d threads on %d CPU%s "
            "(%d of %d ranks so placed): the threads share cores; give each "
            "rank %d cores (mpirun --map-by ppr:1:node:PE=%d --bind-to core, "
            "or --bind-to none; Slurm --cpus-per-task=%d with OMP_PLACES=cores "
            "OMP_PROC_BIND=close)\n", first[0], threads, first[1],
            first[1] == 1 ? "" : "s", count, ctx->nranks, threads, threads,
            threads);
    fflush(stderr);
}

uint64_t cli_machine_id(void)
{
    char text[128] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(text, sizeof text, f))
        gethostname(text, sizeof text - 1);
    if (f)
        fclose(f);
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *c = text; *c; c++)
        h = (h ^ (uint64_t)(unsigned char)*c) * 1099511628211ull;
    return h;
}

int cli_oversubscribed(const cli_ctx *ctx, int threads, int *load,
                       int *cores)
{
    MPI_Comm machine;
    int here = 1, first = INT_MAX;
    const int color = (int)(cli_machine_id() & INT_MAX);
    if (MPI_Comm_split(ctx->comm, color, ctx->rank, &machine) ==
        MPI_SUCCESS) {
        MPI_Comm_size(machine, &here);
        MPI_Comm_free(&machine);
    }
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    int v[2] = {here * (threads > 0 ? threads : 1), n > 0 ? (int)n : 1};
    const int who = v[0] > v[1] ? ctx->rank : INT_MAX;
    MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, ctx->comm);
    if (first != INT_MAX)
        MPI_Bcast(v, 2, MPI_INT, first, ctx->comm);
    *load = v[0];
    *cores = v[1];
    return first != INT_MAX;
}

int cli_oversubscribed_warn(const cli_ctx *ctx, int threads, const char *what)
{
    int load, cores;
    const int over = cli_oversubscribed(ctx, threads, &load, &cores);
    if (over && ctx->rank == 0) {
        fprintf(stderr, "ringattn: warning: %d ranks x threads share a "
                "machine of %d cores (oversubscribed): %s\n", load, cores,
                what);
        fflush(stderr);
    }
    return over;
}
