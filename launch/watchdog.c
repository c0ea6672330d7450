/* watchdog.c: the phase watchdog's thread (watchdog.h). It only reads the
 * clock and the phase under a mutex; the main thread may be blocked inside
 * any MPI call, so the thread never calls MPI: it writes its line with
 * write(2) and ends the process with _exit, which mpirun reports as a
 * failed rank and answers by ending the job. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "h5io.h"
#include "watchdog.h"

#define STALL_FACTOR 5.0 /* gaps between beats a stall timeout allows */
#define STALL_FLOOR 10.0  /* seconds: scheduling noise, a loaded machine */
#define STALL_CAP 600.0   /* seconds: the library's default */
#define STALL_INIT 120.0  /* seconds MPI's start-up may take */
#define STAGGER 1.0       /* seconds per rank number, at most 8 of them:
                             the lowest live rank speaks first */
#define TICK_NS 100000000L
#define SELF_STOP 1.0     /* seconds a tick may be late before the lateness
                             counts as this process's own stop */

static struct {
    pthread_mutex_t lock;
    pthread_t thread;
    int started, rank;
    const char *phase;
    double limit, since; /* seconds allowed, the last sign of progress */
} wd = {.lock = PTHREAD_MUTEX_INITIALIZER};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double cli_stall_default(double predicted, int beats)
{
    const double gap = predicted / (beats > 0 ? beats : 1);
    const double t = STALL_FACTOR * gap;
    return t < STALL_FLOOR ? STALL_FLOOR : t > STALL_CAP ? STALL_CAP : t;
}

/* The end of the job from this rank: one line, the temporary outputs
 * removed, exit 1. */
static void watchdog_fire(const char *phase, double waited, int rank)
{
    char line[256];
    const int len = snprintf(line, sizeof line, "ringattn: rank %d stalled "
                             "at %s: no progress for %.3g s (a rank stopped, "
                             "frozen or lost?); ending the job\n", rank,
                             phase, waited);
    if (len > 0 && write(STDERR_FILENO, line, (size_t)len) < 0)
        line[0] = '\0'; /* nothing more can be said */
    for (int i = 0; i < H5IO_TMP_SLOTS; i++)
        if (h5io_tmp_active(i))
            unlink(h5io_tmp_active(i));
    _exit(CLI_EXIT_RUNTIME);
}

/* The thread's loop. A tick that comes far later than asked means this
 * process itself was stopped (SIGSTOP, a suspended job) or starved: that
 * time is not a peer's stall, so the phase's clock skips it. Without this,
 * a rank stopped and then continued (mpirun sends SIGCONT before it ends
 * a job) would report its own stop as the others'. */
static void *watchdog_loop(void *arg)
{
    (void)arg;
    const struct timespec tick = {0, TICK_NS};
    double last = now_s();
    for (;;) {
        nanosleep(&tick, NULL);
        const double t = now_s(), lost = t - last - 1e-9 * TICK_NS;
        last = t;
        pthread_mutex_lock(&wd.lock);
        if (lost > SELF_STOP)
            wd.since += lost;
        const char *phase = wd.phase;
        const double waited = now_s() - wd.since;
        const double limit = wd.limit + STAGGER * (wd.rank < 8 ? wd.rank : 8);
        const int rank = wd.rank;
        pthread_mutex_unlock(&wd.lock);
        if (phase && waited > limit)
            watchdog_fire(phase, waited, rank);
    }
    return NULL;
}

void cli_watchdog_phase(const cli_ctx *ctx, const char *phase,
                        double timeout, double extra)
{
    pthread_mutex_lock(&wd.lock);
    wd.phase = timeout > 0 ? phase : NULL;
    wd.limit = timeout + extra;
    wd.since = now_s();
    wd.rank = ctx->rank;
    if (wd.phase && !wd.started &&
        pthread_create(&wd.thread, NULL, watchdog_loop, NULL) == 0) {
        pthread_detach(wd.thread);
        wd.started = 1;
    }
    pthread_mutex_unlock(&wd.lock);
}

void cli_watchdog_start_mpi(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                 "PMI_RANK", "SLURM_PROCID"};
    cli_ctx ctx = {.rank = 0};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) {
            ctx.rank = atoi(getenv(vars[i]));
            break;
        }
    cli_watchdog_phase(&ctx, "MPI's start-up", STALL_INIT, 0.0);
}

void cli_watchdog_beat(void)
{
    pthread_mutex_lock(&wd.lock);
    wd.since = now_s();
    pthread_mutex_unlock(&wd.lock);
}
