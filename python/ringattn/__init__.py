"""ringattn: exact ring attention over MPI ranks, from NumPy and PyTorch.

Each rank of an mpi4py communicator passes its own slice of the sequence
(its contiguous shard by default; the tokens owned_positions() names, in
that order, for the layout= it names); the library computes
softmax attention over the whole sequence with blockwise ring attention and
returns this rank's rows. Collective calls; every refusal or failure is a
ringattn.Error raised on every rank alike (ArgumentTypeError, also a
TypeError, for an argument of the wrong type; ArgumentError, also a
ValueError, for a bad value). The PyTorch API (an autograd function and
a layer) is ringattn.torch. See docs/PYTHON.md.

Importing the package installs install_abort_hook() (not in an
interactive interpreter): an uncaught exception on one rank then aborts
the job instead of leaving the other ranks waiting for it.

    from mpi4py import MPI
    import ringattn
    o, lse = ringattn.forward(q, k, v, MPI.COMM_WORLD, order="bnhd",
                              causal=True)
"""
import sys

from ._needs import check_interpreter

check_interpreter()

from ._core import ArgumentError, ArgumentTypeError, Error, \
    version as __version__  # noqa: E402
from ._api import backward, forward
from ._layout import owned_positions, resolve_layout, shard, unshard
from ._mpi import install_abort_hook, remove_abort_hook
from ._plan import plan

__all__ = ["Error", "ArgumentError", "ArgumentTypeError", "forward",
           "backward", "owned_positions", "resolve_layout", "shard",
           "unshard", "plan", "install_abort_hook", "remove_abort_hook"]

if not sys.flags.interactive:
    install_abort_hook()
