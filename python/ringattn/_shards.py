"""Rows moved between the cut a caller's shards have and the layout the
library computes in. A data loader cuts a sequence contiguously; causal
and windowed attention run balanced in another layout (zigzag, balanced,
striped: ra_exec_layout). A Move takes each rank's rows of one sequence
from one cut to the other (an Ialltoallv of whole rows, waited for within
the call's stall_timeout) and back, so that the caller's contiguous
shards are computed in the balanced layout and its results come back in
its own cut. Which positions a rank holds under a layout is the
library's rule (ra_layout_slice, through _layout.positions_of)."""
import numpy as np
from mpi4py import MPI

from . import _mpi
from ._layout import positions_of


class Move:
    """How this rank's rows of a sequence of `length` go from layout src
    to layout dst (each a resolved name; opts the _core options that
    weigh the balanced cut): which of its rows it sends to each rank,
    how many it receives from each, and where they land."""

    def __init__(self, comm, length, src, dst, opts):
        P, me = comm.Get_size(), comm.Get_rank()
        have = [positions_of(src, length, r, P, opts) for r in range(P)]
        want = [positions_of(dst, length, r, P, opts) for r in range(P)]
        out = [np.intersect1d(have[me], want[r], assume_unique=True)
               for r in range(P)]
        into = [np.intersect1d(have[r], want[me], assume_unique=True)
                for r in range(P)]
        self.comm = comm
        # Rows in src order taken to each rank, and rows in dst order
        # filled from each rank, both by increasing global position.
        self.src_rows = np.searchsorted(have[me], np.concatenate(out))
        self.src_counts = np.array([len(x) for x in out], np.int64)
        self.dst_rows = np.searchsorted(want[me], np.concatenate(into))
        self.dst_counts = np.array([len(x) for x in into], np.int64)

    def forward(self, x, axis, timeout):
        """x's rows along axis, from src's cut to dst's."""
        return self.exchange(x, axis, timeout, (self.src_rows,
                                                self.src_counts),
                             (self.dst_rows, self.dst_counts))

    def back(self, x, axis, timeout):
        """x's rows along axis, from dst's cut back to src's."""
        return self.exchange(x, axis, timeout, (self.dst_rows,
                                                self.dst_counts),
                             (self.src_rows, self.src_counts))

    def exchange(self, x, axis, timeout, send_plan, recv_plan):
        """A new C-contiguous array of x's rows moved by the plans: rows
        send_plan[0] go out, send_plan[1] to each rank; rows arrive,
        recv_plan[1] from each rank, into positions recv_plan[0]."""
        moved = np.moveaxis(x, axis, 0)
        send = np.ascontiguousarray(moved[send_plan[0]])
        recv = np.empty((len(recv_plan[0]),) + moved.shape[1:], x.dtype)
        row = x.dtype.itemsize * int(np.prod(moved.shape[1:]))
        kind = MPI.BYTE.Create_contiguous(row).Commit()
        try:
            req = self.comm.Ialltoallv(
                [send, (send_plan[1].tolist(), offsets(send_plan[1])), kind],
                [recv, (recv_plan[1].tolist(), offsets(recv_plan[1])), kind])
            _mpi.wait(req, timeout, "the rows' move between the shards' "
                      "cut and the call's layout", (send, recv))
        finally:
            kind.Free()
        out = np.empty_like(recv)
        out[recv_plan[0]] = recv
        return np.ascontiguousarray(np.moveaxis(out, 0, axis))


def offsets(counts):
    """The displacements of consecutive blocks of these counts."""
    return [0] + np.cumsum(counts)[:-1].tolist()
