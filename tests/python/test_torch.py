"""ringattn.torch against PyTorch float64 autograd: the autograd function in
both tensor orders, float32 and bfloat16; the multi-head layer with its
parameter gradients summed over the ranks; zero copy; errors on every
rank alike."""
import numpy as np
import pytest
import torch

import ringattn
import ringattn.torch as rt
from ringattn import _core

from conftest import (COMM, agreed, close, normal, reference,
                      reference_grads)

RANK = COMM.Get_rank()


def mine(x, axis=1, **options):
    return ringattn.shard(x, "auto", COMM, axis, **options)


@pytest.mark.parametrize("order", ["bnhd", "bhnd"])
def test_attention_grads(rng, order):
    B, N, M, H, G, D, Dv = 2, 21, 13, 4, 2, 8, 6
    q, k, v = normal(rng, (B, N, H, D)), normal(rng, (B, M, G, D)), \
        normal(rng, (B, M, G, Dv))
    dout = normal(rng, (B, N, H, Dv))
    o_ref, _, g_ref = reference_grads(q, k, v, dout, causal=True)

    def local(x):
        t = torch.from_numpy(mine(x, causal=True))
        return t.transpose(1, 2).contiguous() if order == "bhnd" else t

    ts = [local(x).requires_grad_() for x in (q, k, v)]
    o = rt.attention(*ts, COMM, order=order, causal=True)
    (o * local(dout)).sum().backward()

    def back(t):
        return (t.transpose(1, 2) if order == "bhnd" else t).detach().numpy()

    close("o", back(o), mine(o_ref, causal=True), 2e-5)
    for name, t, want in zip(("dq", "dk", "dv"), ts, g_ref):
        close(name, back(t.grad), mine(want, causal=True), 1e-4)


def test_attention_bfloat16(rng):
    """bfloat16 in, bfloat16 out and back; float32 inside, so the error is
    bfloat16's rounding of the inputs and outputs."""
    q, k, v, dout = (normal(rng, (1, 17, 2, 8)) for _ in range(4))
    ts = [torch.from_numpy(mine(x)).bfloat16().requires_grad_()
          for x in (q, k, v)]
    o = rt.attention(*ts, COMM, order="bnhd")
    (o.float() * torch.from_numpy(mine(dout))).sum().backward()
    wide = [t.detach().float().numpy().astype(np.float64) for t in ts]
    full = [ringattn.unshard(x, "auto", COMM) for x in wide]
    o_ref, _, g_ref = reference_grads(*full, dout)
    agreed(o.dtype == torch.bfloat16 and ts[0].grad.dtype == torch.bfloat16,
           f"dtypes {o.dtype} {ts[0].grad.dtype}")
    close("o bf16", o.detach().float().numpy(), mine(o_ref), 1e-2)
    for name, t, want in zip(("dq", "dk", "dv"), ts, g_ref):
        close(name + " bf16", t.grad.float().numpy(), mine(want), 3e-2)


def test_zero_copy_torch(rng):
    """Contiguous float32 (B, n, H, D) tensors reach the library in place,
    and o is the array the library wrote; so do (B, H, n, D) views of
    them with order="bhnd"."""
    ts = [torch.from_numpy(mine(normal(rng, (1, 12, 2, 8))))
          for _ in range(3)]
    o = rt.attention(*ts, COMM, order="bnhd")
    want = tuple(t.data_ptr() for t in ts + [o])
    agreed(_core.pointers()[:4] == want, f"{_core.pointers()} != {want}")
    o = rt.attention(*(t.transpose(1, 2) for t in ts), COMM, order="bhnd")
    want = tuple(t.data_ptr() for t in ts + [o])
    agreed(_core.pointers()[:4] == want, f"bhnd: {_core.pointers()} != "
           f"{want}")


def raised(fn, text):
    """fn raises ringattn.Error holding `text` on every rank alike."""
    try:
        fn()
        got = None
    except ringattn.Error as exc:
        got = str(exc)
    every = COMM.allgather(got)
    agreed(got is not None and text in got and len(set(every)) == 1,
           f"{text}: {every}")


def test_errors_on_every_rank(rng):
    """Each refusal reaches every rank, whichever rank holds the fault."""
    ts = [torch.from_numpy(mine(normal(rng, (1, 12, 2, 8))))
          for _ in range(3)]
    last = COMM.Get_size() - 1

    def on(rank, bad, good):
        return bad if RANK == rank else good

    nan = ts[1].clone()
    nan[0, -1, 0, 0] = float("nan")
    cases = [
        ([ts[0], on(0, ts[1].double(), ts[1]), ts[2]],
         "k is float64: ringattn computes in float32", {}),
        ([ts[0].transpose(1, 2)] + ts[1:], "q is not contiguous in order "
         "bnhd", {}),
        (ts, "order 'bnh'", {"order": "bnh"}),
        ([ts[0], on(0, nan, ts[1]), ts[2]], "rank 0: k[0, ", {}),
    ]
    if COMM.Get_size() > 1:
        cases.append(([on(last, t[..., :4].contiguous(), t) for t in ts],
                      f"rank {last} passes other head dim D", {}))
    for tensors, text, kw in cases:
        raised(lambda: rt.attention(*tensors, COMM, **{"order": "bnhd",
                                                       **kw}), text)


def test_bfloat16_strided_refused(rng):
    """A bfloat16 tensor contiguous in neither order is refused on every
    rank, as a float32 one is (before: widened into a contiguous copy
    first, it went through unrefused)."""
    bf = [torch.from_numpy(mine(normal(rng, (1, 12, 2, 8)))).bfloat16()
          for _ in range(3)]
    last = COMM.Get_size() - 1
    v = bf[2][..., ::2] if RANK == last else bf[2][..., :4].contiguous()
    raised(lambda: rt.attention(bf[0], bf[1], v, COMM, order="bnhd"),
           f"rank {last}: v is not contiguous in order bnhd")


def test_backward_error_on_every_rank(rng):
    """A NaN reaching one rank's dout is refused by the backward on every
    rank."""
    ts = [torch.from_numpy(mine(normal(rng, (1, 12, 2, 8))))
          .requires_grad_() for _ in range(3)]
    o = rt.attention(*ts, COMM, order="bnhd")
    w = torch.ones_like(o)
    if RANK == COMM.Get_size() - 1:
        w[0, 0, 1, 2] = float("nan")
    raised(lambda: (o * w).sum().backward(), "dout[0, 0, 1, 2]")


def layer_fp64(layer, x, w):
    """The layer in float64 on the whole sequence x, from a float64 copy
    of its weights and the definition of attention (conftest.reference):
    y, and the gradients of sum(y * w) for x and every parameter."""
    copy = {n: p.detach().double().requires_grad_()
            for n, p in layer.named_parameters()}
    B, N, _ = x.shape
    xd = torch.from_numpy(x.astype(np.float64)).requires_grad_()

    def proj(name, heads):
        y = xd @ copy[name + ".weight"].T + copy[name + ".bias"]
        return y.view(B, N, heads, layer.D)

    o, _ = reference(proj("q_proj", layer.H), proj("k_proj", layer.G),
                     proj("v_proj", layer.G), causal=True)
    y = o.reshape(B, N, -1) @ copy["out_proj.weight"].T + \
        copy["out_proj.bias"]
    (y * torch.from_numpy(w).double()).sum().backward()
    return (y.detach().numpy(), xd.grad.numpy(),
            [copy[n].grad.numpy() for n, _ in layer.named_parameters()])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_and_parameter_grads(rng, dtype):
    """RingSelfAttention (causal, GQA) on the ranks' slices against the
    same layer in float64 on the whole sequence: outputs, input gradients
    and, after allreduce_grads, every parameter's gradient. A float64
    layer attends in float32 (before: refused, q has dtype float64)."""
    B, N, E, H, G = 2, 19, 16, 4, 2
    torch.manual_seed(int(rng.integers(1 << 30)))
    layer = rt.RingSelfAttention(E, H, G, COMM, causal=True).to(dtype)
    x, w = normal(rng, (B, N, E)), normal(rng, (B, N, E))
    xl = torch.from_numpy(mine(x, causal=True)).to(dtype).requires_grad_()
    y = layer(xl)
    (y * torch.from_numpy(mine(w, causal=True))).sum().backward()
    rt.allreduce_grads(layer, COMM)
    y_ref, dx_ref, grads_ref = layer_fp64(layer, x, w)
    agreed(y.dtype == dtype and xl.grad.dtype == dtype,
           f"{y.dtype} {xl.grad.dtype}")
    close("y", y.detach().numpy(), mine(y_ref, causal=True), 2e-5)
    close("dx", xl.grad.numpy(), mine(dx_ref, causal=True), 1e-4)
    names = [n for n, _ in layer.named_parameters()]
    agreed(len(names) == 8, f"parameters {names}")
    # Each gradient against its own largest entry, or a thousandth of the
    # layer's largest when its own is smaller: k_proj.bias's gradient is 0
    # by definition (softmax ignores a shift shared by all keys).
    floor = 1e-3 * max(np.abs(g).max() for g in grads_ref)
    for (name, p), want in zip(layer.named_parameters(), grads_ref):
        err = np.abs(p.grad.numpy() - want).max() / max(np.abs(want).max(),
                                                        floor)
        agreed(err <= 1e-4, f"{name}: relative error {err:.3g}")
