"""Logit softcapping and attention sinks (issue 42) against PyTorch
float64 autograd references written here from their definitions, as the
models apply them: Gemma-2-style softcapping (the scaled score s becomes
cap * tanh(s / cap), the masks after it) and gpt-oss-style sinks (one
logit per head concatenated to each row's scores as an extra column,
softmax, the column dropped); ringattn.torch.attention (the sinks a
tensor that receives its gradient), ringattn.backward and
flash_attn_func, forward and backward, over strategies, causal and
sliding windows, GQA, segments."""
import numpy as np
import pytest
import torch

import ringattn
import ringattn.torch as rt

from conftest import COMM, agreed, close, normal


def mine(x, axis=1, **options):
    return ringattn.shard(x, "auto", COMM, axis, **options)


def gemma_reference(q, k, v, dout, cap, causal=False, window=None,
                    sinks=None, segments=None, slopes=None):
    """o and (dq, dk, dv[, d sinks]) in float64: softcapped scores (cap 0:
    none), then the mask (bottom-right aligned, as the library's), the
    sink column (gpt-oss: concatenated, softmax, dropped), P V."""
    B, N, H, D = q.shape
    M, G = k.shape[1], k.shape[2]
    t = [torch.tensor(x, dtype=torch.float64, requires_grad=True)
         for x in (q, k, v) + (() if sinks is None else (sinks,))]
    kk = t[1].repeat_interleave(H // G, dim=2)
    vv = t[2].repeat_interleave(H // G, dim=2)
    s = torch.einsum("bnhd,bmhd->bhnm", t[0], kk) / np.sqrt(D)
    s = cap * torch.tanh(s / cap) if cap else s
    i = torch.arange(N)[:, None] + (M - N)
    j = torch.arange(M)[None, :]
    if slopes is not None:  # ALiBi after the cap, as ringattn.h says
        s = s - torch.tensor(slopes).view(1, H, 1, 1) * (j - i).abs()
    seen = torch.ones(N, M, dtype=torch.bool)
    if causal:
        seen &= j <= i
    if window is not None:
        seen &= (j >= i - window[0]) & (j <= i + window[1])
    seen = seen.expand(B, 1, N, M)
    if segments is not None:
        seg = torch.tensor(segments)
        seen = seen & (seg[:, None, :, None] == seg[:, None, None, :])
    s = s.masked_fill(~seen, float("-inf"))
    if sinks is not None:
        col = t[3].view(1, H, 1, 1).expand(B, H, N, 1)
        p = torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(s, dim=-1)
    o = torch.einsum("bhnm,bmhd->bnhd", p, vv)
    (o * torch.tensor(dout, dtype=torch.float64)).sum().backward()
    return o.detach().numpy(), [x.grad.numpy() for x in t]


CASES = [
    ("ring", True, None, 1.5),
    ("allgather", False, (5, 2), 2.0),
    ("ulysses", True, (7, 0), 3.0),
    ("tree", False, None, 1.0),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_softcap_attention(rng, case):
    strategy, causal, window, cap = CASES[case]
    B, N, M, H, G, D = 2, 23, 23, 4, 2, 8
    q, k, v = normal(rng, (B, N, H, D)), normal(rng, (B, M, G, D)), \
        normal(rng, (B, M, G, D))
    dout = normal(rng, (B, N, H, D))
    o_ref, g_ref = gemma_reference(q, k, v, dout, cap, causal, window)
    rules = dict(causal=causal, window=window)
    ts = [torch.from_numpy(mine(x, **rules)).requires_grad_()
          for x in (q, k, v)]
    o = rt.attention(*ts, COMM, order="bnhd", softcap=cap,
                     strategy=strategy, **rules)
    (o * torch.from_numpy(mine(dout, **rules))).sum().backward()
    close(f"{strategy} o", o.detach().numpy(), mine(o_ref, **rules), 2e-5)
    for name, t, want in zip(("dq", "dk", "dv"), ts, g_ref):
        close(f"{strategy} {name}", t.grad.numpy(), mine(want, **rules),
              1e-4)


def test_flash_softcap(rng):
    """flash_attn_func's softcap argument, causal, GQA."""
    B, N, H, G, D = 1, 19, 4, 1, 16
    q, k, v = normal(rng, (B, N, H, D)), normal(rng, (B, N, G, D)), \
        normal(rng, (B, N, G, D))
    dout = normal(rng, (B, N, H, D))
    o_ref, g_ref = gemma_reference(q, k, v, dout, 5.0, causal=True)
    ts = [torch.from_numpy(mine(x)).requires_grad_() for x in (q, k, v)]
    o = rt.flash_attn_func(*ts, causal=True, softcap=5.0, comm=COMM)
    (o * torch.from_numpy(mine(dout))).sum().backward()
    close("flash o", o.detach().numpy(), mine(o_ref), 2e-5)
    for name, t, want in zip(("dq", "dk", "dv"), ts, g_ref):
        close(f"flash {name}", t.grad.numpy(), mine(want), 1e-4)


@pytest.mark.at_p(2)
def test_softcap_refused(rng):
    """The gaussian score has no cap: refused by name on every rank."""
    q = torch.from_numpy(mine(normal(rng, (1, 8, 2, 4))))
    try:
        rt.attention(q, q, q, COMM, order="bnhd", softcap=2.0,
                     score="gaussian")
        agreed(False, "softcap with the gaussian score not refused")
    except ringattn.Error as exc:
        agreed("softcap: the gaussian score" in str(exc), repr(exc))


SINK_CASES = [
    ("ring", True, None, 0.0, False),
    ("ring-q", True, (6, 0), 2.0, False),
    ("allgather", False, (4, 3), 0.0, False),
    ("ring", True, None, 1.5, True),
]


@pytest.mark.parametrize("case", range(len(SINK_CASES)))
def test_sinks_attention(rng, case):
    """sinks= a tensor: o and dq, dk, dv, d sinks against the gpt-oss-style
    reference (with softcap where cap > 0; segments where asked)."""
    strategy, causal, window, cap, segs = SINK_CASES[case]
    B, N, H, G, D = 2, 22, 4, 2, 8
    q, k, v = normal(rng, (B, N, H, D)), normal(rng, (B, N, G, D)), \
        normal(rng, (B, N, G, D))
    dout = normal(rng, (B, N, H, D))
    sinks = rng.uniform(-1.0, 4.0, H)
    seg = np.repeat(np.arange(4), 6)[:N][None].repeat(B, 0) if segs else None
    o_ref, g_ref = gemma_reference(q, k, v, dout, cap, causal, window,
                                   sinks, seg)
    rules = dict(causal=causal, window=window)
    extra = {"segments": mine(seg, **rules)} if segs else {}
    ts = [torch.from_numpy(mine(x, **rules)).requires_grad_()
          for x in (q, k, v)]
    ts_sink = torch.tensor(sinks, dtype=torch.float32, requires_grad=True)
    o = rt.attention(*ts, COMM, order="bnhd", softcap=cap, sinks=ts_sink,
                     strategy=strategy, **rules, **extra)
    (o * torch.from_numpy(mine(dout, **rules))).sum().backward()
    close(f"{strategy} o", o.detach().numpy(), mine(o_ref, **rules), 2e-5)
    for name, t, want in zip(("dq", "dk", "dv"), ts, g_ref):
        close(f"{strategy} {name}", t.grad.numpy(), mine(want, **rules),
              1e-4)
    close("d sinks", ts_sink.grad.numpy(), g_ref[3], 1e-4)


def test_sinks_numpy(rng):
    """ringattn.forward / backward with sinks=: lse includes the sink, the
    backward's last result is d sinks; a row that sees no key (N > M,
    causal) has o = 0 and lse = its sink."""
    B, N, M, H, D = 1, 20, 9, 2, 4
    q, k, v = normal(rng, (B, N, H, D)), normal(rng, (B, M, H, D)), \
        normal(rng, (B, M, H, D))
    dout = normal(rng, (B, N, H, D))
    sinks = np.array([0.5, 2.5], dtype=np.float32)
    o_ref, g_ref = gemma_reference(q, k, v, dout, 0.0, True, None, sinks)
    ql, kl, vl, dl = (mine(x, causal=True) for x in (q, k, v, dout))
    o, lse = ringattn.forward(ql, kl, vl, COMM, order="bnhd", causal=True,
                              sinks=sinks)
    close("o", o, mine(o_ref, causal=True), 2e-5)
    pos = ringattn.owned_positions("auto", N, COMM, causal=True)
    blind = pos < N - M  # these rows see no key
    agreed(bool(np.all(o[:, blind] == 0)) and
           bool(np.all(lse[:, :, blind] == sinks[None, :, None])),
           "rows that see no key: o = 0, lse = sink")
    dq, dk, dv, ds = ringattn.backward(ql, kl, vl, o, lse, dl, COMM,
                                       order="bnhd", causal=True,
                                       sinks=sinks)
    close("dq", dq, mine(g_ref[0], causal=True), 1e-4)
    close("d sinks", ds, g_ref[3], 1e-4)


def test_softcap_alibi(rng):
    """ALiBi's bias goes on after the cap (the bias is never capped)."""
    B, N, H, D = 1, 18, 2, 8
    q, k, v, dout = (normal(rng, (B, N, H, D)) for _ in range(4))
    slopes = np.array([0.3, 0.05])
    o_ref, g_ref = gemma_reference(q, k, v, dout, 1.2, True, None,
                                   slopes=slopes)
    ts = [torch.from_numpy(mine(x, causal=True)).requires_grad_()
          for x in (q, k, v)]
    o = rt.attention(*ts, COMM, order="bnhd", softcap=1.2, causal=True,
                     alibi=slopes)
    (o * torch.from_numpy(mine(dout, causal=True))).sum().backward()
    close("alibi o", o.detach().numpy(), mine(o_ref, causal=True), 2e-5)
    close("alibi dq", ts[0].grad.numpy(), mine(g_ref[0], causal=True), 1e-4)
