/* ckpt.c: checkpoints of a call at its step boundaries (ringattn.h,
 * ra_checkpoint): which calls take them, the question every rank answers
 * at a boundary and the agreed answer, the save, the load and the
 * resumed step's block sent again by its owner. A strategy says what its
 * state is (ring_pass_ops.state, ringq.c, hybrid.c); the caller keeps it
 * where it likes: the library touches no file and no signal. */
#include <string.h>

#include "agree.h"
#include "ckpt.h"
#include "internal.h"
#include "strategy.h"

/* Whether the call's row (named c->name, call.c) runs its steps on the
 * ring loop with a state at each boundary: ring (forward and backward),
 * ring-q and hybrid (forward; their backward runs on the ring row). */
static int row_has_steps(const strat_call *c)
{
    static const ra_strategy stepped[] = {
        RA_STRATEGY_RING, RA_STRATEGY_RING_Q, RA_STRATEGY_HYBRID};
    for (size_t i = 0; i < sizeof stepped / sizeof *stepped; i++)
        if (strcmp(c->name, ra_strategy_name(stepped[i])) == 0)
            return 1;
    return 0;
}

ra_status strat_ckpt_takes(const strat_call *c)
{
    const ra_checkpoint *k = c->params->exec.checkpoint;
    if (!k)
        return RA_OK;
    if (!k->ask || !k->save)
        return ra_error_set(RA_ERR_ARG, "exec.checkpoint: ask and save are "
                            "required");
    if (!row_has_steps(c))
        return ra_error_set(RA_ERR_ARG, "strategy %s has no steps to "
                            "checkpoint (ring, ring-q and hybrid have; "
                            "docs/CHECKPOINT.md)", c->name);
    if (c->map)
        return ra_error_set(RA_ERR_ARG, "checkpoint: the attention map's "
                            "pass takes none; write the map without "
                            "checkpoints");
    if (c->grads && c->params->num.score == RA_SCORE_ADDITIVE)
        return ra_error_set(RA_ERR_ARG, "checkpoint: the additive score's "
                            "backward takes none (its weight gradients sum "
                            "inside the kernel's tiles)");
    return RA_OK;
}

/* The largest of each rank's v[0 .. n) over the call's ranks, in place,
 * under the stall watchdog. */
static ra_status ckpt_max(strat_call *c, int *v, int n, const char *phase)
{
    MPI_Request req;
    if (MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_INT, MPI_MAX, c->comm, &req) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "%s: %s failed", c->name, phase);
    const strat_watch w = {phase, NULL, 0, NULL, NULL};
    return strat_wait(c, 1, &req, &w);
}

ra_status strat_ckpt_boundary(strat_call *c, const ra_state *state)
{
    const ra_checkpoint *k = c->params->exec.checkpoint;
    int act = k->ask(k->ctx, state->step, state->steps);
    ra_status st = ckpt_max(c, &act, 1, "the checkpoint question");
    if (st != RA_OK || act == RA_CKPT_GO_ON)
        return st;
    st = ra_agree(c->comm, k->save(k->ctx, state));
    if (st == RA_OK && act >= RA_CKPT_STOP)
        st = ra_error_set(RA_STOPPED, "%s: stopped at the checkpoint before "
                          "step %d of %d, as asked", c->name, state->step + 1,
                          state->steps);
    return st;
}

ra_status strat_ckpt_load(strat_call *c, ra_state *state)
{
    const ra_checkpoint *k = c->params->exec.checkpoint;
    state->step = 0;
    if (!k || !k->load)
        return RA_OK;
    ra_status st = ra_agree(c->comm, k->load(k->ctx, state));
    int v[2] = {state->step, -state->step}; /* the most and the least */
    if (st == RA_OK)
        st = ckpt_max(c, v, 2, "the checkpoint's step");
    if (st == RA_OK && (v[0] != -v[1] || v[0] < 1 || v[0] >= state->steps))
        st = ra_error_set(RA_ERR_INPUT, "checkpoint: the ranks loaded steps "
                          "%d .. %d, want one step in 1 .. %d", -v[1], v[0],
                          state->steps - 1);
    return st;
}

ra_status strat_ckpt_fetch(strat_call *c, const strat_fetch *f, int n)
{
    MPI_Request req[2 * STRAT_FETCH_MAX];
    int peer[2 * STRAT_FETCH_MAX];
    ra_status st = RA_OK;
    for (int i = 0; i < 2 * n; i++)
        req[i] = MPI_REQUEST_NULL;
    for (int i = 0; i < n && st == RA_OK; i++) {
        peer[i] = f->from;
        peer[n + i] = f->to;
        if (MPI_Irecv(f->pair[i].recv, f->pair[i].nrecv, f->pair[i].type,
                      f->from, f->tag + i, c->comm, &req[i]) != MPI_SUCCESS ||
            MPI_Isend(f->pair[i].send, f->pair[i].nsend, f->pair[i].type,
                      f->to, f->tag + i, c->comm, &req[n + i]) != MPI_SUCCESS)
            st = ra_error_set(RA_ERR_MPI, "%s: resuming at step %d: posting "
                              "the held block's transfers failed", c->name,
                              f->step);
    }
    const strat_watch w = {"the resumed step's block", peer, n, NULL, NULL};
    return st == RA_OK ? strat_wait(c, 2 * n, req, &w) : st;
}
