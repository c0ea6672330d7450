/* watchdog.c: the phase watchdog's thread (watchdog.h). It only reads the
 * clock and the phase under a mutex; the main thread may be blocked inside
 * any MPI call, so the thread never calls MPI: it writes its line with
 * write(2) and ends the process with _exit, which mpirun reports as a
 * failed rank and answers by ending the job. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "h5io.h"
#include "signals.h"
#include "watchdog.h"

/* A derived stall timeout allows STALL_MARGIN predicted gaps between two
 * signs of progress: a machine loaded STALL_LOAD times over (6 busy loops
 * and 2 ranks on 2 cores is 4) times a prediction off by STALL_MODEL (the
 * built-in profile was not measured on this machine: on the 2-core test
 * machine, shared with other work, a forward ran 11 times its prediction
 * and a backward under 6 busy loops 27 times). */
#define STALL_LOAD 8.0
#define STALL_MODEL 5.0
#define STALL_MARGIN (STALL_LOAD * STALL_MODEL)
#define STALL_FLOOR 30.0  /* seconds: start-up costs the model omits */
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
    char how[400]; /* how the timeout was found, for the message */
    double limit, since; /* seconds allowed, the last sign of progress */
} wd = {.lock = PTHREAD_MUTEX_INITIALIZER};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double cli_stall_timeout(double given, const cli_stall_basis *b, char *how,
                         size_t len)
{
    if (!isnan(given)) {
        snprintf(how, len, "given (--stall-timeout %g)", given);
        return given;
    }
    const double gap = b->seconds / (b->beats > 0 ? b->beats : 1);
    const double t = STALL_MARGIN * gap;
    const double out = t < STALL_FLOOR ? STALL_FLOOR : t > STALL_CAP ? STALL_CAP
                                                                     : t;
    snprintf(how, len, "derived: %g x the %s's predicted step %.3g s (%d "
             "in %.3g s, %s), within [%g, %g] s; raise it with "
             "--stall-timeout", STALL_MARGIN, b->pass, gap,
             b->beats > 0 ? b->beats : 1, b->seconds,
             b->profile ? b->profile : "built-in profile", STALL_FLOOR,
             STALL_CAP);
    return out;
}

/* The end of the job from this rank: one line, the temporary outputs
 * removed, exit 1. */
static void watchdog_fire(const char *phase, double waited, int rank,
                          const char *how)
{
    char line[640];
    const int len = snprintf(line, sizeof line, "ringattn: rank %d stalled "
                             "at %s: no progress for %.3g s (a rank stopped, "
                             "frozen or lost?); ending the job%s%s\n", rank,
                             phase, waited, how[0] ? "; the timeout: " : "",
                             how);
    if (len > 0 && write(STDERR_FILENO, line,
                         (size_t)len < sizeof line ? (size_t)len
                                                   : sizeof line - 1) < 0)
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
        cli_streams_watch();
        const double t = now_s(), lost = t - last - 1e-9 * TICK_NS;
        last = t;
        pthread_mutex_lock(&wd.lock);
        if (lost > SELF_STOP)
            wd.since += lost;
        const char *phase = wd.phase;
        const double waited = now_s() - wd.since;
        const double limit = wd.limit + STAGGER * (wd.rank < 8 ? wd.rank : 8);
        const int rank = wd.rank;
        char how[sizeof wd.how];
        memcpy(how, wd.how, sizeof how);
        pthread_mutex_unlock(&wd.lock);
        if (phase && waited > limit)
            watchdog_fire(phase, waited, rank, how);
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

void cli_watchdog_explain(const char *how)
{
    pthread_mutex_lock(&wd.lock);
    snprintf(wd.how, sizeof wd.how, "%s", how ? how : "");
    pthread_mutex_unlock(&wd.lock);
}

void cli_watchdog_beat(void)
{
    pthread_mutex_lock(&wd.lock);
    wd.since = now_s();
    pthread_mutex_unlock(&wd.lock);
}
