"""Which global tokens a rank holds, and tensors cut into and put back from
those slices (numpy arrays or torch tensors). The rule is the library's
own (ra_layout_slice, ra_exec_layout); nothing here restates it.

A call's `layout` keyword names the cut of the caller's shards: "auto"
(the default) means contiguous shards, the natural cut of a data loader,
which the call moves into the layout the library chooses (zigzag when
causal, balanced with a window, striped with segments: resolve_layout)
and back; any other name means shards already cut that way, computed in
that layout as they are."""
import numpy as np
from mpi4py import MPI

from . import _core, _mpi, _options


def _cut_options(layout, options):
    """The _core options that decide a layout and its cut: causal, window
    and segments (the same keywords as forward; others are ignored)."""
    keep = {k: v for k, v in options.items()
            if k in ("causal", "window", "segments")}
    return _options.params(dict(keep, layout=layout))


def resolve_layout(layout="auto", **options):
    """The layout forward() computes in with these options: `layout`
    itself, or for 'auto' the library's choice from causal, window and
    segments (into which the call moves contiguous shards)."""
    return _core.layout_resolve(_cut_options(layout, options),
                                options.get("segments") is not None)


def held_layout(layout, resolved):
    """The cut of the caller's shards: contiguous for 'auto', else the
    layout named (resolved: its checked name)."""
    return "contiguous" if layout == "auto" else resolved


def positions_of(layout, length, rank, nranks, opts):
    """The global positions (int64, increasing) rank holds of a sequence
    of `length` under a resolved layout; the balanced one weighs tokens by
    the causal and window fields of the _core options opts."""
    runs = _core.layout_slice(layout, length, rank, nranks, opts)
    parts = [start + stride * np.arange(count, dtype=np.int64)
             for start, count, stride in runs]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def positions(layout, length, rank, nranks, **options):
    """positions_of with the keywords of forward()."""
    return positions_of(layout, length, rank, nranks,
                        _cut_options(layout, options))


def owned_positions(layout, length, comm=None, **options):
    """The global positions (int64 array, increasing) of the tokens this
    rank of comm holds of a sequence of `length`: the order of the rows of
    its slices. layout 'auto' (a call's default) means contiguous shards;
    another name, that layout's cut (weighed by the options causal and
    window for 'balanced')."""
    comm = MPI.COMM_WORLD if comm is None else comm
    return positions(held_layout(layout, resolve_layout(layout, **options)),
                     length, comm.Get_rank(), comm.Get_size(), **options)


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def shard(x, layout="auto", comm=None, axis=1, **options):
    """This rank's slice of the full tensor x along `axis` (the sequence
    axis, 1 in (B, N, H, D)): a new contiguous array (or tensor) of the
    tokens owned_positions gives, in that order."""
    pos = owned_positions(layout, x.shape[axis], comm, **options)
    if _is_torch(x):
        import torch
        return x.index_select(axis, torch.from_numpy(pos)).contiguous()
    return np.ascontiguousarray(np.take(x, pos, axis=axis))


def unshard(x, layout="auto", comm=None, axis=1, **options):
    """The full tensor from every rank's slice x along `axis`; collective
    (an allgather of the slices: for tests and small tensors, not for the
    sequences ringattn exists to split), waiting at most the options'
    stall_timeout for every rank. Returns what x is: a numpy array or a
    torch tensor."""
    comm = MPI.COMM_WORLD if comm is None else comm
    torch_in = _is_torch(x)
    local = x.detach().cpu().numpy() if torch_in else np.asarray(x)
    parts = _mpi.allgather_slices(comm, local, axis,
                                  _options.stall_timeout(options))
    length = sum(p.shape[axis] for p in parts)
    name = held_layout(layout, resolve_layout(layout, **options))
    full_shape = list(local.shape)
    full_shape[axis] = length
    full = np.empty(full_shape, dtype=local.dtype)
    for r, part in enumerate(parts):
        idx = [slice(None)] * full.ndim
        idx[axis] = positions(name, length, r, comm.Get_size(), **options)
        full[tuple(idx)] = part
    if torch_in:
        import torch
        return torch.from_numpy(full)
    return full
