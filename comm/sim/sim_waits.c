/* sim_waits.c: comm/'s polling, at scale in ringattn-sim. The linker sends
 * comm/'s MPI_Testall and strat_wait here (--wrap, sim.cmake). SMPI
 * charges each MPI_Test a simulated sleep (smpi/test) and a round of the
 * simulation, so MPI_Testall costs one per request: the all-gather's
 * progress hook, testing its 2(P - 1) transfers between tiles, cost a rank
 * up to 6P us of simulated time per kernel call, and the simulation P^3
 * sleeps. At scale, with smpi/test 0 (ringattn-sim.sh):
 *   MPI_Testall (statuses ignored) tests its requests in order up to the
 *     first still open (all of them are done only if that one is) and
 *     costs one test, SIM_TEST_NS, as Open MPI progresses once per call;
 *   strat_wait with a tick (the all-gather's, whose tick posts the chained
 *     sends and tests them with MPI_Testall) blocks in MPI_Waitany on the
 *     wait's open requests and those the tick's MPI_Testall left open,
 *     instead of polling: what the loop sees changes only when one of them
 *     completes, and then the tick runs at once, as a poll would within a
 *     microsecond.
 * In exact mode, with smpi/test set, and for waits without a tick:
 * comm/'s own. */
#include <mpi.h>
#include <simgrid/actor.h>
#include <stdlib.h>
#include <xbt/config.h>

#include "sim_hooks.h"
#include "strategy.h"

int __real_MPI_Testall(int count, MPI_Request req[], int *flag,
                       MPI_Status st[]);
ra_status __real_strat_wait(strat_call *c, int n, MPI_Request *req,
                            const strat_watch *w);

/* A rank's open requests in a wait (where their handles live), whether
 * its tick's tests add to them, and whether one could not be added. */
typedef struct {
    MPI_Request **open;
    int count, cap, recording, lost;
} waiter;
enum { SIM_TEST_NS = 1000 }; /* one MPI_Testall, as smpi/test in exact mode */
static waiter *waiters; /* by rank of MPI_COMM_WORLD (all ranks on one
                           thread at scale: thread-local would be shared) */

static waiter *mine(void)
{
    int r = 0, P = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (!waiters) {
        MPI_Comm_size(MPI_COMM_WORLD, &P);
        waiters = calloc((size_t)P, sizeof *waiters);
    }
    return waiters ? &waiters[r] : NULL;
}

/* Adds the handle at h once (sets me->lost when out of memory). */
static void watch(waiter *me, MPI_Request *h)
{
    for (int i = 0; me->recording && i < me->count; i++)
        if (me->open[i] == h)
            return;
    if (me->count == me->cap) {
        const int cap = me->cap ? 2 * me->cap : 16;
        MPI_Request **grown = realloc(me->open, (size_t)cap * sizeof *grown);
        if (!grown) {
            me->lost = 1;
            return;
        }
        me->open = grown;
        me->cap = cap;
    }
    me->open[me->count++] = h;
}

/* Whether polls run here: at scale, SMPI charging no test itself. */
static int polls_here(void)
{
    static int smpi_tests = -1;
    if (smpi_tests < 0)
        smpi_tests = sg_cfg_get_double("smpi/test") > 0;
    return sim_hooks_at_scale() && !smpi_tests;
}

int __wrap_MPI_Testall(int count, MPI_Request req[], int *flag,
                       MPI_Status st[])
{
    if (!polls_here() || st != MPI_STATUSES_IGNORE)
        return __real_MPI_Testall(count, req, flag, st);
    int rc = MPI_SUCCESS, done = 1;
    for (int i = 0; i < count && done && rc == MPI_SUCCESS; i++)
        if (req[i] != MPI_REQUEST_NULL)
            rc = MPI_Test(&req[i], &done, MPI_STATUS_IGNORE);
    sg_actor_sleep_for(SIM_TEST_NS * 1e-9);
    *flag = done;
    waiter *me = mine();
    for (int i = 0; me && me->recording && i < count; i++)
        if (req[i] != MPI_REQUEST_NULL)
            watch(me, &req[i]);
    return rc;
}

/* The rings' progress hook (ring_loop.c) tests the step's transfers,
 * which SMPI moves untested. A transfer a test completes stays in
 * SimGrid 3.32's list of the rank's activities, which every completion
 * searches end to end: a ring whose transfers finish under its compute
 * grew it by four a step (93% of the CPU of 1024 ranks). At scale the
 * hook costs its test and leaves completion to the step's wait. */
void __real_ring_poll(void *ctx);

void __wrap_ring_poll(void *ctx)
{
    if (polls_here())
        sg_actor_sleep_for(SIM_TEST_NS * 1e-9);
    else
        __real_ring_poll(ctx);
}

/* Blocks until one of me's open requests completes; 0, or -1 (me->lost
 * when out of memory). */
static int wait_one(waiter *me)
{
    MPI_Request *any = malloc((size_t)me->count * sizeof *any);
    if (!any) {
        me->lost = 1;
        return -1;
    }
    for (int i = 0; i < me->count; i++)
        any[i] = *me->open[i];
    int at = MPI_UNDEFINED;
    const int rc = MPI_Waitany(me->count, any, &at, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && at != MPI_UNDEFINED)
        *me->open[at] = MPI_REQUEST_NULL; /* completed and freed */
    free(any);
    return rc == MPI_SUCCESS ? 0 : -1;
}

ra_status __wrap_strat_wait(strat_call *c, int n, MPI_Request *req,
                            const strat_watch *w)
{
    waiter *me = polls_here() && w->tick ? mine() : NULL;
    if (!me)
        return __real_strat_wait(c, n, req, w);
    for (;;) {
        me->count = me->lost = 0;
        for (int i = 0; i < n; i++)
            if (req[i] != MPI_REQUEST_NULL)
                watch(me, &req[i]);
        if (me->count == 0 && !me->lost)
            return RA_OK;
        me->recording = 1;
        const int posted = w->tick(w->ctx);
        me->recording = 0;
        if (posted != 0)
            return ra_error_set(RA_ERR_MPI, "%s: %s: posting a transfer "
                                "failed", c->name, w->phase);
        if (me->lost || wait_one(me) != 0)
            return me->lost ? ra_error_set(RA_ERR_NOMEM, "%s: %s: the "
                                           "simulated wait's requests",
                                           c->name, w->phase)
                            : ra_error_set(RA_ERR_MPI, "%s: %s: a transfer "
                                           "failed", c->name, w->phase);
    }
}

void sim_waits_release(void)
{
    int P = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    for (int r = 0; waiters && r < P; r++)
        free(waiters[r].open);
    free(waiters);
    waiters = NULL;
}
