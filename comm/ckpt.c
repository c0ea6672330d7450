/* ckpt.c: checkpoints of a call at its step boundaries (ringattn.h,
 * ra_checkpoint): which calls take them, the question every rank answers
 * at a boundary and the agreed answer, the save and the load. A strategy
 * says what its state is (ring_pass_ops.state); the caller keeps it where
 * it likes: the library touches no file and no signal. */
#include "agree.h"
#include "internal.h"
#include "strategy.h"

ra_status strat_ckpt_takes(const strat_call *c)
{
    const ra_checkpoint *k = c->params->exec.checkpoint;
    if (!k)
        return RA_OK;
    if (!k->ask || !k->save)
        return ra_error_set(RA_ERR_ARG, "exec.checkpoint: ask and save are "
                            "required");
    if (c->params->exec.strategy != RA_STRATEGY_RING)
        return ra_error_set(RA_ERR_ARG, "strategy %s: checkpoints are taken "
                            "by strategy ring only (docs/CHECKPOINT.md)",
                            c->name);
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
