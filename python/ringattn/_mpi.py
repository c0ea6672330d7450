"""The package's own MPI steps, and the end of the job when one rank dies.

No rank waits for ever: the package's collectives (the agreement before
each call, allreduce_grads, unshard) are non-blocking requests polled
against a deadline, the call's stall_timeout, as the library waits for
its own transfers. A rank that does not arrive (it raised, or was interrupted,
between calls) costs the others an Error naming the step; they must
then end the job (comm.Abort()): the request is still pending.

The standard remedy for the rank that raised is the abort hook
(install_abort_hook, installed on import): an uncaught exception on one
rank prints its traceback and aborts the job, as `python -m mpi4py`
does, so that the others end in seconds instead of waiting in a
collective or in MPI_Finalize."""
import sys
import time

import numpy as np
from mpi4py import MPI

from ._errors import error

# Requests given up at their deadline, with the buffers MPI may still
# write into: kept alive until the job ends.
ABANDONED = []
# How the wait polls: without a pause for its first SPIN seconds (most
# waits end within them, and a pause on a loaded machine costs a time
# slice), then with pauses doubling from PAUSE_FIRST to PAUSE_MAX, which
# yield the core to the ranks being waited for.
SPIN, PAUSE_FIRST, PAUSE_MAX = 5e-3, 1e-5, 1e-3


def wait(req, timeout, step, buffers):
    """Waits for the request req, at most `timeout` seconds (0: for
    ever), interruptible; at the deadline raises ringattn.Error (status
    "MPI error") naming the step. A request left pending (the deadline,
    or a KeyboardInterrupt) keeps itself and its buffers alive."""
    start = time.monotonic()
    pause = PAUSE_FIRST
    try:
        while not req.Test():
            now = time.monotonic()
            if timeout and now - start > timeout:
                raise error(f"{step}: not every rank arrived within "
                            f"stall_timeout = {timeout:g} s (a rank "
                            "stopped, or raised between calls); this rank "
                            "is now out of step with them: end the job "
                            "(comm.Abort())", "MPI error")
            if now - start > SPIN:
                time.sleep(pause)
                pause = min(2 * pause, PAUSE_MAX)
    except BaseException:  # MPI may still write into the buffers
        ABANDONED.append((req, buffers))
        raise


def allgather_slices(comm, local, axis, timeout):
    """Every rank's array `local` (a list, by rank), whose shapes may
    differ along `axis` alone: their shapes and dtypes are agreed first
    (a ValueError-kind Error on every rank when they differ), then their
    bytes gathered; each wait at most timeout seconds (0: for ever)."""
    moved = np.ascontiguousarray(np.moveaxis(local, axis, 0))
    head = np.zeros(2 + np.MAXDIMS, np.int64)
    head[:2 + moved.ndim] = [moved.ndim, moved.dtype.num] + list(moved.shape)
    heads = np.empty((comm.Get_size(), head.size), np.int64)
    wait(comm.Iallgather(head, heads), timeout, "unshard", (head, heads))
    rest = np.delete(heads, 2, axis=1)
    if (rest != rest[0]).any():
        r = int(np.flatnonzero((rest != rest[0]).any(axis=1))[0])
        raise error(f"unshard: rank {r} passes a slice of other dtype or "
                    f"shape than rank 0 beyond axis {axis}", kind="value")
    counts = heads[:, 2] * (moved.itemsize * int(np.prod(moved.shape[1:])))
    recv = np.empty(int(counts.sum()), np.uint8)
    send = moved.reshape(-1).view(np.uint8)
    wait(comm.Iallgatherv(send, [recv, counts]), timeout, "unshard",
         (send, recv))
    ends = np.cumsum(counts)
    return [np.moveaxis(recv[e - c:e].view(moved.dtype).reshape(
        (int(n),) + moved.shape[1:]), 0, axis)
        for e, c, n in zip(ends, counts, heads[:, 2])]


class AbortHook:
    """sys.excepthook that, after the previous hook has printed the
    exception, aborts comm when MPI runs with more than one rank."""

    def __init__(self, comm, previous):
        self.comm, self.previous = comm, previous

    def __call__(self, kind, value, tb):
        self.previous(kind, value, tb)
        comm = MPI.COMM_WORLD if self.comm is None else self.comm
        if MPI.Is_initialized() and not MPI.Is_finalized() and \
                comm.Get_size() > 1:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):  # closed: nothing to keep
                    pass
            comm.Abort(1)


def install_abort_hook(comm=None):
    """Makes an uncaught exception on this rank (KeyboardInterrupt
    included) print its traceback and then abort comm (default
    MPI.COMM_WORLD, the whole job), so that the other ranks do not wait
    for ever. `import ringattn` installs it, except in an interactive
    interpreter; calling it again replaces the communicator."""
    previous = sys.excepthook
    if isinstance(previous, AbortHook):
        previous = previous.previous
    sys.excepthook = AbortHook(comm, previous)


def remove_abort_hook():
    """Restores the exception hook that install_abort_hook replaced."""
    if isinstance(sys.excepthook, AbortHook):
        sys.excepthook = sys.excepthook.previous
