"""ringattn.torch.MultiheadAttention, the drop-in for
torch.nn.MultiheadAttention (issue 41, the drop-in layer): a trained torch
module's state_dict loads into it and back; on contiguous shards its
outputs and the gradients (inputs' and parameters', summed over the
ranks) match the torch module's on the whole sequence, in float64;
what it cannot express is refused by name on every rank."""
import numpy as np
import pytest
import torch

import ringattn
import ringattn.torch as rt

from conftest import COMM, P, agreed, close

E, HEADS = 16, 4


def trained(rng, batch_first, kdim=None):
    """A torch module trained a few steps on random data (float64), the
    same on every rank; a small step, so that its weights stay of the
    order of their initial ones (large ones make the float32 attention's
    rounding the test's subject)."""
    torch.manual_seed(int(rng.integers(2**31)))
    m = torch.nn.MultiheadAttention(E, HEADS, batch_first=batch_first,
                                    kdim=kdim, vdim=kdim).double()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for _ in range(3):
        x = torch.randn(5, 2, E, dtype=torch.float64)
        kv = x if kdim is None else torch.randn(5, 2, kdim,
                                                dtype=torch.float64)
        if batch_first:
            x, kv = x.transpose(0, 1), kv.transpose(0, 1)
        opt.zero_grad()
        m(x, kv, kv, need_weights=False)[0].square().mean().backward()
        opt.step()
    return m


def seq_axis(batch_first):
    return 1 if batch_first else 0


@pytest.mark.parametrize("batch_first,kdim,causal,padded", [
    (True, None, True, False), (False, None, True, True),
    (False, 12, False, True), (True, None, False, False),
    (False, 12, True, False)])
def test_multihead_attention_drop_in_issue41(rng, batch_first, kdim, causal,
                                             padded):
    ref = trained(rng, batch_first, kdim)
    ours = rt.MultiheadAttention(E, HEADS, batch_first=batch_first,
                                 kdim=kdim, vdim=kdim).double()
    ours.load_state_dict(ref.state_dict())
    back = torch.nn.MultiheadAttention(E, HEADS, batch_first=batch_first,
                                       kdim=kdim, vdim=kdim).double()
    back.load_state_dict(ours.state_dict())
    L, B = 3 * P + 4, 2
    ax = seq_axis(batch_first)
    shape = (B, L) if batch_first else (L, B)
    x = torch.from_numpy(rng.standard_normal(shape + (E,)))
    kv = x if kdim is None else torch.from_numpy(
        rng.standard_normal(shape + (kdim,)))
    dout = torch.from_numpy(rng.standard_normal(shape + (E,)))
    # The causal mask in both of torch's spellings (bool beside a bool
    # key_padding_mask, as torch 2.x wants them alike).
    mask = None if not causal else \
        torch.ones(L, L, dtype=torch.bool).triu(1) if padded else \
        torch.nn.Transformer.generate_square_subsequent_mask(L).double()
    pad = torch.zeros(B, L, dtype=torch.bool)
    if padded:
        pad[1, L - 3:] = True
    kpm = pad if padded else None

    def run(module, x, kv, dout, kpm):
        xs = [t.detach().clone().requires_grad_() for t in (x, kv)]
        kvs = xs[0] if kdim is None else xs[1]
        y, w = module(xs[0], kvs, kvs, key_padding_mask=kpm,
                      need_weights=False, attn_mask=mask)
        module.zero_grad()
        (y * dout).sum().backward()
        return y.detach(), [t.grad for t in xs], w

    y_ref, gx_ref, _ = run(back, x, kv, dout, kpm)
    mine = [ringattn.shard(t, "auto", COMM, ax) for t in (x, kv, dout)]
    y, gx, w = run(ours, *mine, None if kpm is None else
                   ringattn.shard(kpm, "auto", COMM, 1))
    rt.allreduce_grads(ours, COMM)
    agreed(w is None, "weights returned")
    close("y", y.numpy(), ringattn.shard(y_ref, "auto", COMM, ax).numpy(),
          1e-5)
    close("dx", gx[0].numpy(), ringattn.shard(gx_ref[0], "auto", COMM,
                                              ax).numpy(), 1e-4)
    theirs = dict(back.named_parameters())
    for name, p in ours.named_parameters():
        close(f"grad {name}", p.grad.numpy(), theirs[name].grad.numpy(),
              1e-4)


def raised(fn, text):
    try:
        fn()
        agreed(False, f"not refused: {text}")
    except ringattn.ArgumentError as exc:
        agreed(text in str(exc), str(exc))


def test_multihead_attention_refused_issue41(rng):
    m = rt.MultiheadAttention(E, HEADS, batch_first=True)
    x = torch.from_numpy(ringattn.shard(
        rng.standard_normal((1, 4 * P, E)).astype(np.float32), "auto",
        COMM))
    raised(lambda: m(x, x, x), "need_weights=True: ringattn never forms")
    band = torch.ones(4 * P, 4 * P, dtype=torch.bool).triu(2)
    raised(lambda: m(x, x, x, need_weights=False, attn_mask=band),
           "attn_mask: ringattn takes the causal mask alone")
    holes = torch.zeros(1, x.shape[1], dtype=torch.bool)
    holes[0, 0] = True
    raised(lambda: m(x, x, x, need_weights=False, key_padding_mask=holes),
           "key_padding_mask pads other keys than a suffix")
    for kw in ({"dropout": 0.1}, {"add_bias_kv": True}):
        try:
            rt.MultiheadAttention(E, HEADS, **kw)
            agreed(False, f"{kw} not refused")
        except ValueError as exc:
            agreed(list(kw)[0] in str(exc), str(exc))
