"""ringattn.torch: ring attention inside PyTorch programs, with autograd.

attention() is an autograd function: its forward runs ringattn.forward on
this rank's slices, its backward ringattn.backward (the ring's gradients).
Tensors are CPU tensors whose order the caller states: (B, n, H, D)
with order="bnhd", (B, H, n, D) with order="bhnd"; no order is assumed
(the two cannot be told apart when n == H, and SDPA's users hold the
second, flash-attention's the first). Contiguous float32 tensors in
(B, n, H, D) order (and (B, H, n, D) views of them) are read in place;
bfloat16 tensors are computed in bfloat16 (precision="bf16" unless the
call names another; the library reads them widened into a float32 copy)
and outputs and gradients come back in bfloat16; tensors contiguous in
(B, H, n, D) order are transposed into a copy; tensors contiguous in
neither order, and float64 tensors (no float64 path: see "gradcheck" in
docs/PYTHON.md), are refused. RingSelfAttention is a multi-head
self-attention layer whose sequence is split over the ranks; the
entry points of flash-attention and PyTorch (flash_attn_func,
flash_attn_varlen_func, scaled_dot_product_attention,
MultiheadAttention) are in _compat and _mha.

Autograd's contract holds: every tensor the backward reads (q, k, v, o
and lse) is a saved tensor, so that changing one in place after the
forward makes the backward raise autograd's own "modified by an inplace
operation" error (the masks, slopes and weights it reads are copies made
at the forward); the backward is once differentiable: with
create_graph=True its gradients carry a node that raises autograd's
"differentiate twice" error when a second derivative goes through it.
"""
import functools
from collections import namedtuple

import torch
from mpi4py import MPI

from . import _api, _mpi, _options
from ._errors import refusal_of


# A call of the autograd function: its communicator, the tensors' order,
# the options, a rule on the global lengths (_api.prepare's fix) and a
# refusal found before (message, status, kind), agreed like the others.
Spec = namedtuple("Spec", "comm order options fix refusal")

FLOAT64 = ("{name} is float64: ringattn computes in float32 or bfloat16 and "
           "has no float64 path; pass {name}.float() (for "
           "torch.autograd.gradcheck: a float64 wrapper around float32 with "
           "eps=1e-3, atol=1e-3, docs/PYTHON.md 'gradcheck')")


def _numpy(name, t, order):
    """A numpy view of t in (B, n, H, D) order: t's own memory when t is
    a contiguous float32 (B, n, H, D) tensor, or a (B, H, n, D) view of
    one with order="bhnd". A tensor contiguous in its declared order
    (B, H, n, D) is transposed into a copy, and bfloat16 widened into one;
    a tensor contiguous in neither order is refused whatever its dtype.
    Other dtypes pass unchanged, for the agreed checks to refuse."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} is a {type(t).__name__}, not a "
                        "torch.Tensor")
    if t.dtype == torch.float64:
        raise TypeError(FLOAT64.format(name=name))
    declared = t.is_contiguous()
    if order == "bhnd" and t.dim() == 4:
        t = t.transpose(1, 2)
    if not (declared or t.is_contiguous()):
        raise ValueError(f"{name} is not contiguous in order {order} "
                         f"(strides {tuple(t.stride())} in (B, n, H, D)); "
                         f"pass {name}.contiguous()")
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.to(torch.float32, memory_format=torch.contiguous_format)
    return t.contiguous().numpy()


def _arrays(tensors, order):
    """numpy views of a dict of tensors, and a refusal (message, status,
    kind) or None: a failure here is agreed over the ranks, never raised
    alone."""
    try:
        _api.check_order(order, "tensors")
        return {k: _numpy(k, t, order) for k, t in tensors.items()}, None
    except Exception as exc:  # agreed by the caller
        return {}, refusal_of(exc)


def _tensor(a, order, dtype):
    """A result array as a tensor of the caller's order and dtype."""
    t = torch.from_numpy(a)
    t = t.transpose(1, 2) if order == "bhnd" else t
    return t if dtype == torch.float32 else t.to(dtype)


TWICE = ("trying to differentiate twice a function that was marked with "
         "@once_differentiable (ringattn.torch.attention: the ring's "
         "backward has no derivative)")


class NoSecondDerivative(torch.autograd.Function):
    """Copies of the first n tensors, tied to the others (the inputs they
    were computed from); differentiating them raises."""

    @staticmethod
    def forward(ctx, n, *tensors):
        return tuple(t.clone() for t in tensors[:n])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(TWICE)


def once_differentiable(backward):
    """A backward(ctx, dout, dlse) run without a graph, as
    torch.autograd.function.once_differentiable does; but when a graph is
    asked for (create_graph=True) the gradients are tied to every input
    they depend on, q, k and v as well as dout (torch's ties them to the
    grad outputs alone: a gradient penalty on dq would silently add
    nothing)."""
    @functools.wraps(backward)
    def wrapper(ctx, *grad_outputs):
        with torch.no_grad():
            grads = backward(ctx, *grad_outputs)
        sources = [t for t in ctx.saved_tensors[:3] + grad_outputs
                   if t is not None and t.requires_grad]
        if not (torch.is_grad_enabled() and sources):
            return grads
        present = [g for g in grads if g is not None]
        tied = iter(NoSecondDerivative.apply(len(present), *present,
                                             *sources))
        return tuple(None if g is None else next(tied) for g in grads)
    return wrapper


class RingAttentionFunction(torch.autograd.Function):
    """The autograd function behind attention(): forward and backward
    through the ring."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, spec):
        comm, order, options = spec.comm, spec.order, spec.options
        t, refusal = _arrays({"q": q, "k": k, "v": v}, order)
        if sinks is not None:  # a tensor: its gradient is the backward's
            options = dict(options, sinks=sinks.detach().float().numpy())
        ctx.sinks_dtype = None if sinks is None else sinks.dtype
        if q.dtype == torch.bfloat16 and "precision" not in options:
            options = dict(options, precision="bf16")
        keep = {}
        o, lse, _ = _api.run_forward(comm, t, options,
                                     spec.refusal or refusal, spec.fix, keep)
        out, lse_t = _tensor(o, order, q.dtype), torch.from_numpy(lse)
        # The library's arrays: views of the tensors saved beside them
        # (or private copies), which autograd's version check guards.
        ctx.arrays = (t["q"], t["k"], t["v"], o, lse)
        # Moved rows (a forward that moved them): the backward's own.
        ctx.kept = keep.get("kept")
        ctx.save_for_backward(q, k, v, out, lse_t)
        ctx.comm, ctx.order, ctx.fix = comm, order, spec.fix
        ctx.options = _options.frozen(options)
        ctx.dtypes = (q.dtype, k.dtype, v.dtype)
        ctx.mark_non_differentiable(lse_t)
        return out, lse_t

    @staticmethod
    @once_differentiable
    def backward(ctx, dout, dlse):
        # Raises autograd's error when a saved tensor changed in place.
        ctx.saved_tensors  # pylint: disable=pointless-statement
        q, k, v, o, lse = ctx.arrays
        d = dout.float()
        d = (d.transpose(1, 2) if ctx.order == "bhnd" else d).contiguous()
        if ctx.kept is not None:
            grads, dsinks = _api.run_backward_kept(ctx.kept, d.numpy(),
                                                   ctx.options, ctx.fix)
        else:
            t = {"q": q, "k": k, "v": v, "o": o, "lse": lse,
                 "dout": d.numpy()}
            grads, _, _, dsinks = _api.run_backward(ctx.comm, t, ctx.options,
                                                    fix=ctx.fix)
        dq, dk, dv = (_tensor(g, ctx.order, dt)
                      for g, dt in zip(grads, ctx.dtypes))
        ds = None if ctx.sinks_dtype is None else \
            torch.from_numpy(dsinks).to(ctx.sinks_dtype)
        return dq, dk, dv, ds, None


def attention(q, k, v, comm=None, *, order=None, return_lse=False,
              **options):
    """Exact attention of this rank's slices with gradients; collective
    over comm (default MPI.COMM_WORLD). q (B, n, H, D), k (B, m, G, D),
    v (B, m, G, Dv) with order="bnhd", or (B, H, n, D) ... with
    order="bhnd" (no default: an order not given is refused); float32 or
    bfloat16 CPU tensors. Returns o in q's order and dtype (and lse
    (B, H, n) float32 with return_lse=True). Options, masks, shards and
    errors as ringattn.forward; sinks= may be a tensor (H,) that receives
    its gradient (summed over the ranks). The backward runs the ring
    strategy."""
    return attend(q, k, v, Spec(comm, order, options, None, None),
                  return_lse)


def attend(q, k, v, spec, return_lse=False):
    """attention() of a Spec (the entry points' way in: a rule on the
    global lengths, a refusal of their own)."""
    comm = MPI.COMM_WORLD if spec.comm is None else spec.comm
    sinks = spec.options.get("sinks")
    sinks = sinks if isinstance(sinks, torch.Tensor) else None
    o, lse = RingAttentionFunction.apply(q, k, v, sinks,
                                         spec._replace(comm=comm))
    return (o, lse) if return_lse else o


def allreduce_grads(module, comm=None, stall_timeout=None):
    """Sums the gradients of module's parameters over the ranks of comm, in
    place: each rank's backward gives a parameter only its own tokens'
    share (collective; float32 or float64 parameters, summed in their
    own precision). Each sum waits at most stall_timeout seconds (None:
    the library's default; 0: for ever) for every rank to arrive."""
    comm = MPI.COMM_WORLD if comm is None else comm
    timeout = _options.stall_timeout({"stall_timeout": stall_timeout})
    for p in module.parameters():
        if p.grad is not None:
            buf = p.grad.numpy()
            _mpi.wait(comm.Iallreduce(MPI.IN_PLACE, buf), timeout,
                      "allreduce_grads", buf)


class RingSelfAttention(torch.nn.Module):
    """Multi-head self-attention whose sequence is split over the ranks of
    comm: forward(x) takes this rank's tokens x (B, n, E), in the order
    ringattn.owned_positions gives (shard() cuts a full tensor so), and
    returns y (B, n, E) for the same tokens. Projections as
    torch.nn.MultiheadAttention's (q, k, v and out Linear layers),
    num_kv_heads < num_heads for grouped-query attention; options
    (causal, window, rope, alibi, strategy, layout, threads, ...) as
    ringattn.forward's. Parameter gradients are each rank's share: sum
    them over the ranks (allreduce_grads) before the optimizer steps.
    float32 or float64 (projections in float64, attention in float32)."""

    def __init__(self, embed_dim, num_heads, num_kv_heads=None, comm=None,
                 bias=True, **options):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not a multiple of "
                             f"num_heads {num_heads}")
        self.H = num_heads
        self.G = num_kv_heads or num_heads
        self.D = embed_dim // num_heads
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.options = options
        self.q_proj = torch.nn.Linear(embed_dim, self.H * self.D, bias=bias)
        self.k_proj = torch.nn.Linear(embed_dim, self.G * self.D, bias=bias)
        self.v_proj = torch.nn.Linear(embed_dim, self.G * self.D, bias=bias)
        self.out_proj = torch.nn.Linear(self.H * self.D, embed_dim, bias=bias)

    def forward(self, x):
        """y (B, n, E) for this rank's tokens x (B, n, E). A float64 layer
        (module.double()) projects in float64 and attends in float32, the
        library's precision: q, k and v are rounded to float32 at the
        attention's boundary, and o and the gradients widened back."""
        B, n, _ = x.shape
        q = self.q_proj(x).view(B, n, self.H, self.D)
        k = self.k_proj(x).view(B, n, self.G, self.D)
        v = self.v_proj(x).view(B, n, self.G, self.D)
        wide = q.dtype == torch.float64
        if wide:
            q, k, v = q.float(), k.float(), v.float()
        o = attention(q, k, v, self.comm, order="bnhd", **self.options)
        o = o.double() if wide else o
        return self.out_proj(o.reshape(B, n, self.H * self.D))


# The entry points of flash-attention and PyTorch, on attend().
from ._compat import (flash_attn_func, flash_attn_varlen_func,  # noqa: E402
                      scaled_dot_product_attention)
from ._mha import MultiheadAttention  # noqa: E402

__all__ = ["attention", "allreduce_grads", "RingAttentionFunction",
           "RingSelfAttention", "flash_attn_func", "flash_attn_varlen_func",
           "scaled_dot_product_attention", "MultiheadAttention"]
