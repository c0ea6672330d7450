"""The entry points users already call (issue 41, part 3):
ringattn.torch.flash_attn_func, flash_attn_varlen_func and
scaled_dot_product_attention, on contiguous shards, against float64
references from the definitions (forward, lse and gradients) and, with
PyTorch 2.x, torch's own scaled_dot_product_attention; what they cannot
express refused by name on every rank. Also float64 and bfloat16
(part 4): a gradcheck of the attention through a float64 wrapper, and
bfloat16 tensors computed in bfloat16."""
import math

import numpy as np
import pytest
import torch
from mpi4py import MPI

import ringattn
import ringattn.torch as rt

from conftest import COMM, P, agreed, close, lse_close, normal

RANK = COMM.Get_rank()


def flash_reference(q, k, v, scale=None, causal=False, window=(-1, -1),
                    slopes=None):
    """o (B, N, H, Dv) and lse (B, H, N), float64 and differentiable, of
    flash-attention's definition: queries aligned bottom-right, window
    sides of -1 unbounded, ALiBi bias -slope_h |j - i'|."""
    B, N, H, D = q.shape
    M, G = k.shape[1], k.shape[2]
    k, v = (x.repeat_interleave(H // G, dim=2) for x in (k, v))
    s = torch.einsum("bihd,bjhd->bhij", q, k)
    s = s * (1 / math.sqrt(D) if scale is None else scale)
    i = torch.arange(N)[:, None] + (M - N)
    j = torch.arange(M)[None, :]
    vis = torch.ones(N, M, dtype=torch.bool)
    if causal:
        vis &= j <= i
    if window[0] >= 0:
        vis &= j >= i - window[0]
    if window[1] >= 0:
        vis &= j <= i + window[1]
    if slopes is not None:
        s = s - torch.as_tensor(slopes, dtype=s.dtype)[:, None, None] * \
            (j - i).abs()
    s = s.masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, -1)
    o = torch.einsum("bhij,bjhd->bihd", torch.softmax(s, -1), v)
    return o, lse


def grads_of(fn, tensors, dout):
    """fn's outputs and the gradients of sum(out * dout), tensors float64
    leaves made here."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    out = fn(*leaves)
    o = out[0] if isinstance(out, tuple) else out
    (o * dout).sum().backward()
    return out, [t.grad for t in leaves]


def mine(x, axis=1):
    """This rank's contiguous shard of a full tensor (numpy or torch)."""
    return ringattn.shard(x, "auto", COMM, axis)


FLASH_CASES = [
    {"causal": True},
    {"window_size": (3, -1)},
    {"window_size": (-1, 2)},
    {"window_size": (2, 1), "causal": True},
    {"alibi_slopes": [0.5, 0.25, 0.125, 1.0], "causal": True},
    {"softmax_scale": 0.3},
]


@pytest.mark.parametrize("case", range(len(FLASH_CASES)))
def test_flash_attn_func_issue41_part3(rng, case):
    kw = FLASH_CASES[case]
    B, N, M, H, G, D = 2, 4 * P + 5, 5 * P + 6, 4, 2, 8
    full = [torch.from_numpy(normal(rng, s).astype(np.float64)) for s in
            ((B, N, H, D), (B, M, G, D), (B, M, G, D), (B, N, H, D))]
    ref = {"scale": kw.get("softmax_scale"), "causal": kw.get("causal",
                                                              False),
           "window": kw.get("window_size", (-1, -1)),
           "slopes": kw.get("alibi_slopes")}
    (o_ref, lse_ref), g_ref = grads_of(
        lambda q, k, v: flash_reference(q, k, v, **ref), full[:3], full[3])
    slopes = kw.get("alibi_slopes")
    call = dict(kw, alibi_slopes=None if slopes is None else
                torch.tensor(slopes, dtype=torch.float32))
    (o, lse, probs), g = grads_of(
        lambda q, k, v: rt.flash_attn_func(q.float(), k.float(), v.float(),
                                           return_attn_probs=True,
                                           **call),
        [mine(t) for t in full[:3]], mine(full[3]))
    close(f"{kw} out", o.detach().numpy(), mine(o_ref.detach()).numpy(),
          2e-5)
    lse_close(f"{kw} lse", lse.numpy(), mine(lse_ref.detach(), 2).numpy())
    agreed(probs is None, "no probabilities")
    for name, got, want in zip(("dq", "dk", "dv"), g, g_ref):
        close(f"{kw} {name}", got.numpy(), mine(want).numpy(), 1e-4)


def raised(fn, cls, text):
    """Agreed: fn raises cls (a ringattn.Error) with text on every rank."""
    try:
        fn()
        agreed(False, f"not refused: {text}")
    except ringattn.Error as exc:
        agreed(isinstance(exc, cls) and text in str(exc), f"{exc!r}")


FLASH_REFUSED = [
    ({"dropout_p": 0.1}, ValueError, "dropout_p=0.1: ringattn has no"),
    ({"softcap": -1.0}, ringattn.Error, "softcap: -1 is not a finite "
     "number >= 0"),
    ({"window_size": (2.5, 1)}, TypeError, "window_size=(2.5, 1)"),
    ({"window_size": (-2, 1)}, ValueError, "window_size=(-2, 1)"),
    ({"alibi_slopes": torch.ones(1, 2)}, ValueError, "alibi_slopes of "
     "shape (1, 2)"),
    ({"deterministic": "yes"}, TypeError, "deterministic='yes'"),
]


@pytest.mark.at_p(2)
@pytest.mark.parametrize("case", range(len(FLASH_REFUSED)))
def test_flash_attn_func_refused_issue41_part3(rng, case):
    kw, cls, text = FLASH_REFUSED[case]
    q, k, v = (torch.from_numpy(normal(rng, (1, 3, 2, 8))) for _ in range(3))
    raised(lambda: rt.flash_attn_func(q, k, v, **kw), cls, text)


def varlen_reference(q, k, v, cq, ck, **ref):
    """flash_reference of each packed sequence on its own: o (T, H, Dv),
    lse (H, T)."""
    outs, lses = [], []
    for s in range(len(cq) - 1):
        o, lse = flash_reference(q[None, cq[s]:cq[s + 1]],
                                 k[None, ck[s]:ck[s + 1]],
                                 v[None, ck[s]:ck[s + 1]], **ref)
        outs.append(o[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


@pytest.mark.parametrize("kw", [{}, {"causal": True},
                                {"window_size": (2, 0)},
                                {"causal": True, "softmax_scale": 0.2}])
def test_flash_attn_varlen_func_issue41_part3(rng, kw):
    q_lens = np.array([3, P + 2, 0, 2 * P + 1, 4])
    k_lens = q_lens + np.array([2, 0, 1, P, 3])
    cq, ck = (np.concatenate(([0], np.cumsum(x))) for x in (q_lens, k_lens))
    H, G, D = 2, 1, 8
    full = [torch.from_numpy(normal(rng, s).astype(np.float64)) for s in
            ((cq[-1], H, D), (ck[-1], G, D), (ck[-1], G, D),
             (cq[-1], H, D))]
    ref = {"scale": kw.get("softmax_scale"),
           "causal": kw.get("causal", False),
           "window": kw.get("window_size", (-1, -1))}
    (o_ref, lse_ref), g_ref = grads_of(
        lambda q, k, v: varlen_reference(q, k, v, cq, ck, **ref), full[:3],
        full[3])
    (o, lse, _), g = grads_of(
        lambda q, k, v: rt.flash_attn_varlen_func(
            q.float(), k.float(), v.float(),
            torch.tensor(cq, dtype=torch.int32),
            torch.tensor(ck, dtype=torch.int32), int(q_lens.max()),
            int(k_lens.max()), return_attn_probs=True, **kw),
        [mine(t, 0) for t in full[:3]], mine(full[3], 0))
    close(f"{kw} out", o.detach().numpy(), mine(o_ref.detach(), 0).numpy(),
          2e-5)
    lse_close(f"{kw} lse", lse.numpy(), mine(lse_ref.detach(), 1).numpy())
    for name, got, want in zip(("dq", "dk", "dv"), g, g_ref):
        close(f"{kw} {name}", got.numpy(), mine(want, 0).numpy(), 1e-4)


def test_flash_attn_varlen_refused_issue41_part3(rng):
    cu = torch.tensor([0, 2 * P, 4 * P], dtype=torch.int32)
    q, k, v = (torch.from_numpy(mine(normal(rng, (4 * P, 2, 8)), 0))
               for _ in range(3))
    raised(lambda: rt.flash_attn_varlen_func(q, k, v, cu, cu, 1, 2 * P),
           ValueError, f"max_seqlen_q=1 is not an integer >= the longest "
           f"sequence, {2 * P}")
    raised(lambda: rt.flash_attn_varlen_func(q, k, v, cu, cu, 2 * P, 2 * P,
                                             block_table=cu), ValueError,
           "block_table: ringattn has no paged KV cache")
    short = torch.tensor([0, 2 * P, 4 * P - 1], dtype=torch.int32)
    raised(lambda: rt.flash_attn_varlen_func(q, k, v, cu, short, 2 * P,
                                             2 * P), ValueError,
           f"of the {4 * P - 1} that cu_seqlens_k packs")


def sdpa_reference(q, k, v, is_causal=False, scale=None):
    """torch's SDPA on float64 (B, H, L, E) tensors: its own function in
    PyTorch 2.x, else the definition (top-left causal mask)."""
    own = getattr(torch.nn.functional, "scaled_dot_product_attention",
                  None)
    H, G = q.shape[1], k.shape[1]
    k, v = (x.repeat_interleave(H // G, dim=1) for x in (k, v))
    if own is not None:
        return own(q, k, v, is_causal=is_causal, scale=scale)
    s = q @ k.transpose(-1, -2) * (1 / math.sqrt(q.shape[-1])
                                   if scale is None else scale)
    if is_causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1),
                          -math.inf)
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("kw", [{}, {"is_causal": True},
                                {"scale": 0.25, "enable_gqa": True},
                                {"attn_mask": "bool"},
                                {"attn_mask": "float"}])
def test_scaled_dot_product_attention_issue41_part3(rng, kw):
    B, H, L, S, E = 2, 4, 4 * P + 3, 4 * P + 3, 8
    G = 2 if kw.get("enable_gqa") else H
    S = S if kw.get("is_causal") or "attn_mask" in kw else S + P
    full = [torch.from_numpy(normal(rng, s).astype(np.float64)) for s in
            ((B, H, L, E), (B, G, S, E), (B, G, S, E), (B, H, L, E))]
    if "attn_mask" in kw:  # the causal mask, whole, in torch's spellings
        above = torch.ones(L, S, dtype=torch.bool).triu(1)
        kw = {"attn_mask": above if kw["attn_mask"] == "bool" else
              torch.zeros(1, 1, L, S).masked_fill(above, -math.inf)}
    ref = {k: x for k, x in kw.items() if k not in ("enable_gqa",
                                                    "attn_mask")}
    ref["is_causal"] = ref.get("is_causal", False) or "attn_mask" in kw
    o_ref, g_ref = grads_of(lambda q, k, v: sdpa_reference(q, k, v, **ref),
                            full[:3], full[3])
    o, g = grads_of(lambda q, k, v: rt.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), **kw),
        [mine(t, 2) for t in full[:3]], mine(full[3], 2))
    close(f"{kw} out", o.detach().numpy(), mine(o_ref.detach(), 2).numpy(),
          2e-5)
    for name, got, want in zip(("dq", "dk", "dv"), g, g_ref):
        close(f"{kw} {name}", got.numpy(), mine(want, 2).numpy(), 1e-4)


def test_sdpa_refused_issue41_part3(rng):
    q = torch.from_numpy(mine(normal(rng, (1, 2, 4 * P, 8)), 2))
    kv = torch.from_numpy(mine(normal(rng, (1, 2, 5 * P, 8)), 2))
    gqa = torch.from_numpy(mine(normal(rng, (1, 1, 4 * P, 8)), 2))
    sdpa = rt.scaled_dot_product_attention
    mask = torch.ones(q.shape[2], 4 * P, dtype=torch.bool)
    raised(lambda: sdpa(q, q, q, attn_mask=mask), ValueError,
           "attn_mask: ringattn takes the whole (L, L) causal mask alone")
    raised(lambda: sdpa(q, q, q, dropout_p=0.5), ValueError, "dropout_p=0.5")
    raised(lambda: sdpa(q, kv, kv, is_causal=True), ValueError,
           f"a causal mask with L = {4 * P} queries and S = {5 * P} keys")
    small = torch.ones(3, 3, dtype=torch.bool).triu(1)
    if 4 * P != 3:
        raised(lambda: sdpa(q, q, q, attn_mask=small), ValueError,
               f"attn_mask is (3, 3) for L = {4 * P} queries")
    raised(lambda: sdpa(q, gqa, gqa), ValueError, "query has 2 heads and "
           "key 1: pass enable_gqa=True")


def test_gradcheck_float64_wrapper_issue41_part4(rng):
    """torch.autograd.gradcheck of ringattn's attention: float64 tensors
    are refused (no float64 path), so through a float64 wrapper around
    the float32 engine, with tolerances for float32 (eps 1e-3, atol 1e-3,
    rtol 1e-2); on COMM_SELF, as gradcheck perturbs one element at a
    time (each rank checks a whole problem of its own)."""
    q, k, v = (torch.from_numpy(normal(rng, (1, 5, 2, 4)).astype(
        np.float64)).requires_grad_() for _ in range(3))

    def wrapper(q, k, v):
        return rt.attention(q.float(), k.float(), v.float(), MPI.COMM_SELF,
                            order="bnhd", causal=True).double()

    ok = torch.autograd.gradcheck(wrapper, (q, k, v), eps=1e-3, atol=1e-3,
                                  rtol=1e-2, raise_exception=False)
    agreed(ok, "gradcheck failed")
    try:
        rt.attention(q, k, v, MPI.COMM_SELF, order="bnhd")
        agreed(False, "float64 not refused")
    except ringattn.ArgumentTypeError as exc:
        agreed("q is float64: ringattn computes in float32" in str(exc),
               str(exc))


def test_bfloat16_computed_in_bfloat16_issue41_part4(rng):
    """bfloat16 tensors are computed with precision="bf16" (the products
    in bfloat16), unless the call names another precision: the same
    numbers as ringattn.forward with that precision, rounded."""
    q, k, v = (mine(normal(rng, (1, 6 * P + 1, 2, 16))) for _ in range(3))
    ts = [torch.from_numpy(x).bfloat16() for x in (q, k, v)]
    wide = [t.float().numpy() for t in ts]
    for given, precision in ((None, "bf16"), ("fp32", "fp32")):
        kw = {} if given is None else {"precision": given}
        o = rt.attention(*ts, COMM, order="bnhd", causal=True, **kw)
        want, _ = ringattn.forward(*wide, COMM, order="bnhd", causal=True,
                                   precision=precision)
        same = torch.equal(o, torch.from_numpy(want).bfloat16())
        agreed(same, f"bf16 tensors with precision {given}: not the "
               f"{precision} result")
