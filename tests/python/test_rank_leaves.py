"""A rank that leaves between calls (issue 39, class 11): the others wait
for it in the package's own collectives (the agreement before a call,
allreduce_grads, unshard) no longer than stall_timeout, then raise
ringattn.Error naming the step (before: an Allgather with no timeout, for ever). That
they end is what the test shows; the ctest TIMEOUT of python_pN fails it
if they do not (no time is asserted). The calls run on a duplicate of
the communicator; afterwards the leaving rank completes the request the
others gave up, so that the rest of the suite finds the ranks in step (a
program would end the job instead: comm.Abort())."""
import signal

import numpy as np
import pytest
import torch
from mpi4py import MPI

import ringattn
import ringattn.torch as rt
from ringattn import _api, _mpi

from conftest import COMM, P, agreed, normal

RANK = COMM.Get_rank()
LAST = P - 1
# Seconds the others wait before they give up. The last rank never
# arrives, so the verdict is the same for any value: it is short, as the
# test waits it out once per step at each P = 2..4.
STALL = 0.5


def call_forward(comm, rng, stall=STALL):
    q, k, v = (ringattn.shard(normal(rng, (1, 4 * P + 1, 2, 8)),
                              "contiguous", comm) for _ in range(3))
    ringattn.forward(q, k, v, comm, order="bnhd",
                     layout="contiguous", stall_timeout=stall)


def join_forward(comm):
    """The leaving rank's late part of the agreement's Iallgather."""
    width = 1 + len(_api.FACTS)
    comm.Iallgather(np.zeros(width, np.int64),
                    np.empty((P, width), np.int64)).Wait()


def layer():
    lin = torch.nn.Linear(3, 1, bias=False)
    lin.weight.grad = torch.ones_like(lin.weight)
    return lin


def call_allreduce(comm, rng):
    rt.allreduce_grads(layer(), comm, stall_timeout=STALL)


def join_allreduce(comm):
    buf = layer().weight.grad.numpy()
    comm.Iallreduce(MPI.IN_PLACE, buf).Wait()


def call_unshard(comm, rng):
    ringattn.unshard(normal(rng, (1, 2, 3)), "contiguous", comm,
                     stall_timeout=STALL)


def join_unshard(comm):
    """The late part of unshard's first Iallgather (shapes and dtypes)."""
    width = 2 + np.MAXDIMS
    comm.Iallgather(np.zeros(width, np.int64),
                    np.empty((P, width), np.int64)).Wait()


def rejoin(side, join, got):
    """Every rank's verdict got (the last rank waits for the others'
    here), then the last rank's join of the requests they gave up; side
    is freed once they have completed."""
    every = COMM.allgather(got)
    if RANK == LAST:
        join(side)
    for req, _ in _mpi.ABANDONED:
        req.Wait()
    _mpi.ABANDONED.clear()
    side.Free()
    return every


STEPS = {"forward": (call_forward, join_forward,
                     "the agreement before the call"),
         "allreduce_grads": (call_allreduce, join_allreduce,
                             "allreduce_grads"),
         "unshard": (call_unshard, join_unshard, "unshard")}


@pytest.mark.skipif(P < 2, reason="needs two ranks")
@pytest.mark.parametrize("step", sorted(STEPS))
def test_rank_leaves_between_calls_class11(rng, step):
    """Every rank but the last calls; the last never arrives. The others
    raise ringattn.Error (status MPI error) naming the step and the
    timeout, then report to the last rank."""
    call, join, name = STEPS[step]
    side = COMM.Dup()
    got = "left"
    if RANK != LAST:
        try:
            call(side, rng)
            got = "returned"
        except ringattn.Error as exc:
            got = (exc.status, name in str(exc),
                   f"stall_timeout = {STALL} s" in str(exc))
    every = rejoin(side, join, got)
    want = ("MPI error", True, True)
    agreed(all(g == want for g in every[:LAST]), f"{step}: {every}")


def interrupt(signum, frame):
    """Ctrl-C's KeyboardInterrupt, once the rank waits in the agreement
    (before that, the timer is set again)."""
    while frame is not None and frame.f_code is not _mpi.wait.__code__:
        frame = frame.f_back
    if frame is None:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        return
    raise KeyboardInterrupt


@pytest.mark.skipif(P < 2, reason="needs two ranks")
def test_interrupt_while_waiting_class11(rng):
    """A KeyboardInterrupt (here from a timer) ends a wait for a rank that
    never arrives even with stall_timeout=0 (before: a blocking Allgather,
    deaf to Ctrl-C); the pending request is kept with its buffers."""
    side = COMM.Dup()
    got = "left"
    if RANK != LAST:
        old = signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        try:
            call_forward(side, rng, stall=0)
            got = "returned"
        except KeyboardInterrupt:
            got = len(_mpi.ABANDONED)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    every = rejoin(side, join_forward, got)
    agreed(all(g == 1 for g in every[:LAST]), f"{every}")
