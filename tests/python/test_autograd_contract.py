"""ringattn.torch.attention keeps autograd's contract (issue 39, classes 3
and 4): a tensor the backward reads (q, k, v, o, lse) changed in place
after the forward makes the backward raise autograd's own "modified by an
inplace operation" error, on every rank alike (before: the gradients of
the changed values, dq off by up to 70, and no error); a second
derivative raises the "differentiate twice" error (before: create_graph
gave gradients without a graph, so a gradient penalty added nothing).
Without such changes the gradients are float64 autograd's."""
import numpy as np
import pytest
import torch

import ringattn
import ringattn.torch as rt

from conftest import COMM, agreed, close, normal, reference_grads

RANK = COMM.Get_rank()


def mine(x):
    return ringattn.shard(x, "auto", COMM, 1, causal=True)


def leaves(rng, order, dtype=torch.float32, B=1, N=13, H=2, D=8):
    """This rank's q, k, v as tensors requiring grad, in `order`, and the
    full float32 arrays they were cut from."""
    full = [normal(rng, (B, N, H, D)) for _ in range(3)]
    ts = []
    for x in full:
        t = torch.from_numpy(mine(x)).to(dtype)
        t = t.transpose(1, 2).contiguous() if order == "bhnd" else t
        ts.append(t.requires_grad_())
    return ts, full


# Autograd's errors for a tensor changed in place: at the backward, or at
# once for o in order bhnd (a view made inside the function).
INPLACE = ("modified by an inplace operation",
           "is a view and is being modified inplace")


def raised_inplace(fn):
    """fn raises one of autograd's in-place errors on every rank."""
    try:
        fn()
        got = None
    except RuntimeError as exc:
        got = [text for text in INPLACE if text in str(exc)]
    every = COMM.allgather(got)
    agreed(got and len(set(map(tuple, every))) == 1,
           f"expected autograd's in-place error; {every}")


@pytest.mark.parametrize("order", ["bnhd", "bhnd"])
@pytest.mark.parametrize("which", ["o", "lse", "q", "k", "v"])
def test_inplace_after_forward_class3(rng, order, which):
    """o.mul_(2) (the issue's case), lse, or q, k or v changed in place
    between the forward and the backward."""
    ts, _ = leaves(rng, order)
    o, lse = rt.attention(*ts, COMM, order=order, causal=True,
                          return_lse=True)

    def change_then_backward():
        if which == "o":
            o.mul_(2)
        elif which == "lse":
            lse.add_(1)
        else:
            with torch.no_grad():
                ts["qkv".index(which)].mul_(2)
        o.sum().backward()

    raised_inplace(change_then_backward)


def test_inplace_bfloat16_class3(rng):
    """bfloat16 tensors (widened into copies inside) keep the contract."""
    ts, _ = leaves(rng, "bnhd", torch.bfloat16)
    o = rt.attention(*ts, COMM, order="bnhd", causal=True)
    with torch.no_grad():
        ts[0].add_(1)
    raised_inplace(lambda: o.float().sum().backward())


def test_inplace_on_a_copy_right_class3(rng):
    """In place on a copy of o is allowed: the gradients are float64
    autograd's of the forward's values."""
    ts, full = leaves(rng, "bnhd")
    o = rt.attention(*ts, COMM, order="bnhd", causal=True)
    o2 = o.clone()
    o2.mul_(2)
    o2.sum().backward()
    dout = np.full(full[0].shape, 2.0)
    _, _, g_ref = reference_grads(*full, dout, causal=True)
    for name, t, want in zip(("dq", "dk", "dv"), ts, g_ref):
        close(name, t.grad.numpy(), mine(want), 1e-4)


def test_masks_changed_after_forward_class3(rng):
    """Segment ids, lens and ALiBi slopes changed in place between the
    forward and the backward: the backward uses the forward's (copies
    kept by the forward; before: the changed arrays, silently)."""
    B, N, H, D = 2, 13, 2, 8
    full = [normal(rng, (B, N, H, D)) for _ in range(3)]
    ids = np.repeat(np.arange(3), 5)[None, :N].repeat(B, 0)
    opts = {"layout": "contiguous", "q_lens": [11, 13],
            "alibi": np.array([0.5, 0.25])}
    grads = []
    for change in (False, True):
        seg = ringattn.shard(ids, "contiguous", COMM)
        options = dict(opts, segments=seg, q_lens=np.array(opts["q_lens"]),
                       alibi=opts["alibi"].copy())
        ts = [torch.from_numpy(ringattn.shard(x, "contiguous", COMM))
              .requires_grad_() for x in full]
        o = rt.attention(*ts, COMM, order="bnhd", **options)
        if change:
            seg[:] = 0
            options["q_lens"][:] = 1
            options["alibi"][:] = 4.0
        o.square().sum().backward()
        grads.append([t.grad.numpy() for t in ts])
    for name, got, want in zip(("dq", "dk", "dv"), grads[1], grads[0]):
        close(name, got, want, 1e-6)


def test_second_backward_refused_class3(rng):
    """The saved tensors are freed after a backward: a second backward
    raises autograd's error (before: it ran again from kept arrays)."""
    ts, _ = leaves(rng, "bnhd")
    o = rt.attention(*ts, COMM, order="bnhd", causal=True)
    o.sum().backward()
    try:
        o.sum().backward()
        got = None
    except RuntimeError as exc:
        got = "backward through the graph a second time" in str(exc)
    agreed(got is True, f"second backward: {got}")


@pytest.mark.parametrize("loss", ["sum", "square"])
def test_create_graph_class4(rng, loss):
    """create_graph=True: the first derivatives are right, and a penalty
    on them raises the once-differentiable error when its backward
    reaches the attention, whether the gradient of the loss is a constant
    (sum) or depends on o (square)."""
    ts, full = leaves(rng, "bnhd")
    o = rt.attention(*ts, COMM, order="bnhd", causal=True)
    value = o.sum() if loss == "sum" else o.square().sum()
    grads = torch.autograd.grad(value, ts, create_graph=True)
    plain = torch.autograd.grad(
        (lambda x: x.sum() if loss == "sum" else x.square().sum())(
            rt.attention(*ts, COMM, order="bnhd", causal=True)), ts)
    agreed(all(g.requires_grad for g in grads), "gradients without graph")
    for name, g, want in zip(("dq", "dk", "dv"), grads, plain):
        close(name, g.detach().numpy(), want.numpy(), 1e-6)
    penalty = sum((g ** 2).sum() for g in grads)
    try:
        penalty.backward()
        got = None
    except RuntimeError as exc:
        got = "differentiate twice" in str(exc)
    agreed(got is True, f"penalty backward: {got}")
    if loss == "sum":
        _, _, g_ref = reference_grads(*full, np.ones(full[0].shape),
                                      causal=True)
        close("dq", grads[0].detach().numpy(), mine(g_ref[0]), 1e-4)
