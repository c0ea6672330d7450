"""Rows moved between the cut a caller's shards have and the layout the
library computes in. A data loader cuts a sequence contiguously; causal
and windowed attention run balanced in another layout (zigzag, balanced,
striped: ra_exec_layout). A Move takes each rank's rows of one sequence
from one cut to the other and back with the library's ra_shard_move (one
all-to-all of whole rows, watched by the call's stall_timeout, every
rank's row counts checked against both cuts), so that the caller's
contiguous shards are computed in the balanced layout and its results
come back in its own cut: the C API's way for shards cut otherwise
(include/ringattn.h), not a second one."""
import numpy as np

from . import _core
from ._layout import positions_of


class Move:
    """How this rank's rows of a sequence of `length` go from layout src
    to layout dst (each a resolved name; opts the _core options that
    weigh the balanced cut), and back."""

    def __init__(self, comm, length, src, dst, opts):
        P, me = comm.Get_size(), comm.Get_rank()
        self.comm, self.length, self.opts = comm, length, opts
        self.cuts = (src, dst)
        self.rows = tuple(len(positions_of(c, length, me, P, opts))
                          for c in self.cuts)

    def forward(self, x, axis, timeout):
        """x's rows along axis, from src's cut to dst's."""
        return self.exchange(x, axis, timeout, 0)

    def back(self, x, axis, timeout):
        """x's rows along axis, from dst's cut back to src's."""
        return self.exchange(x, axis, timeout, 1)

    def exchange(self, x, axis, timeout, way):
        """A new C-contiguous array of x's rows along axis moved from cut
        self.cuts[way] to the other."""
        x = np.ascontiguousarray(x)
        rows_in, rows_out = self.rows[way], self.rows[1 - way]
        shape = x.shape[:axis] + (rows_out,) + x.shape[axis + 1:]
        out = np.empty(shape, x.dtype)
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        row = x.dtype.itemsize * int(np.prod(x.shape[axis + 1:],
                                             dtype=np.int64))
        _core.shard_move(self.comm, self.cuts[way], self.cuts[1 - way],
                         self.opts, self.length,
                         (rows_in, rows_out, outer, row), x, out,
                         float(timeout))
        return out
