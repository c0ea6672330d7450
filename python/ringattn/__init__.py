"""ringattn: exact ring attention over MPI ranks, from NumPy and PyTorch.

Each rank of an mpi4py communicator passes its own slice of the sequence
(the tokens owned_positions() names, in that order); the library computes
softmax attention over the whole sequence with blockwise ring attention and
returns this rank's rows. Collective calls; every refusal or failure is a
ringattn.Error raised on every rank alike. The PyTorch API (an autograd
function and a layer) is ringattn.torch. See docs/PYTHON.md.

    from mpi4py import MPI
    import ringattn
    o, lse = ringattn.forward(q, k, v, MPI.COMM_WORLD, causal=True)
"""
from ._core import Error, version as __version__
from ._api import backward, forward
from ._layout import owned_positions, resolve_layout, shard, unshard
from ._plan import plan

__all__ = ["Error", "forward", "backward", "owned_positions",
           "resolve_layout", "shard", "unshard", "plan"]
