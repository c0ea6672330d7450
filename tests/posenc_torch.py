#!/usr/bin/env python3
"""posenc_torch.py RINGATTN NP: RoPE and ALiBi through `ringattn run` at NP
ranks, checked against PyTorch implementations written here in fp64 the
way PyTorch models write them:

- RoPE, half pairing: Hugging Face transformers' Llama (rotate_half,
  cos/sin of cat(freqs, freqs)).
- RoPE, interleaved pairing: Meta's original Llama (view_as_complex of
  adjacent pairs times polar(1, freqs)).
- ALiBi: the slopes of Press et al.'s get_slopes (also for H not a power of
  two) added as slope * (j - i') to the scores, and slopes from
  /alibi_slopes.
Each case also runs `ringattn verify`, which must pass, and fail once the
output's rope (or alibi) attribute is changed. Exit 0 when every
case matches to 1e-5 (relative error of o, LSE error), 1 otherwise; a
missing tool or module is reported in one line, never a traceback.
"""
import math
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:
    print(f"posenc_torch.py: {e}; install python3-torch (launch/setup.sh)")
    sys.exit(1)

from e2e_util import ENV, launch, mpi

TOL = 1e-5


def hf_rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_half(x, pos, base):
    """x (B, heads, L, D): transformers' apply_rotary_pos_emb."""
    D = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(pos.to(torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + hf_rotate_half(x) * emb.sin()


def rope_interleaved(x, pos, base):
    """x (B, heads, L, D): Meta Llama's apply_rotary_emb."""
    D = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64)[: D // 2] / D))
    freqs_cis = torch.polar(torch.ones(len(pos), D // 2, dtype=torch.float64),
                            torch.outer(pos.to(torch.float64), freqs))
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
    return torch.view_as_real(xc * freqs_cis).flatten(-2)


def get_slopes(n):
    """Press et al.'s reference code."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    p = 2 ** math.floor(math.log2(n))
    return power_of_2(p) + get_slopes(2 * p)[0::2][: n - p]


def attention(q, k, v, causal, rope, base, slopes):
    """q (B, N, H, D) k, v (B, M, G, *) as numpy; o (B, N, H, Dv), lse."""
    q, k, v = (torch.from_numpy(t).to(torch.float64).transpose(1, 2) for t in (q, k, v))
    B, H, N, D = q.shape
    M, G = k.shape[2], k.shape[1]
    qpos = torch.arange(N) + (M - N)
    kpos = torch.arange(M)
    if rope == "half":
        q, k = rope_half(q, qpos, base), rope_half(k, kpos, base)
    elif rope == "interleaved":
        q, k = rope_interleaved(q, qpos, base), rope_interleaved(k, kpos, base)
    k = k.repeat_interleave(H // G, dim=1)
    v = v.repeat_interleave(H // G, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
    if slopes is not None:
        # symmetric, as flash-attention's alibi_slopes: -slope * |j - i'|
        dist = (kpos[None, :] - qpos[:, None]).abs().to(torch.float64)
        s = s - torch.tensor(slopes, dtype=torch.float64)[:, None, None] * dist
    if causal:
        s = s.masked_fill(kpos[None, :] > qpos[:, None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.softmax(s, dim=-1), v)
    return o.transpose(1, 2).numpy(), lse.numpy()


def case(tmp, np_ranks, ringattn, name, shape, args, rope=None, base=10000.0,
         alibi=None, given=None):
    B, N, M, H, G, D = shape
    seed = int.from_bytes(os.urandom(4), "little")  # fresh inputs, printed
    rng = np.random.default_rng(seed)
    inp, out = os.path.join(tmp, name + "-in.h5"), os.path.join(tmp, name + "-out.h5")
    q = rng.standard_normal((B, N, H, D)).astype(np.float32)
    k = rng.standard_normal((B, M, G, D)).astype(np.float32)
    v = rng.standard_normal((B, M, G, D)).astype(np.float32)
    with h5py.File(inp, "w") as f:
        f["q"], f["k"], f["v"] = q, k, v
        for n in "qkv":
            f[n].attrs["axes"] = "B,N,H,D"
        if given is not None:
            f["alibi_slopes"] = np.asarray(given, dtype=np.float32)
    ra = mpi(np_ranks) + [ringattn]
    subprocess.run(ra + ["run", "--in", inp, "--out", out] + args,
                   check=True, env=ENV, stdout=subprocess.DEVNULL)
    with h5py.File(out, "r") as f:
        o, lse = f["o"][()], f["lse"][()]
    slopes = None
    if alibi:
        slopes = given if given is not None else get_slopes(H)
        slopes = [float(np.float32(x)) for x in slopes] if given is not None else slopes
    ro, rl = attention(q, k, v, "--causal" in args, rope, base, slopes)
    rel = np.linalg.norm(o - ro) / np.linalg.norm(ro)
    lerr = np.max(np.abs(lse - rl) / np.maximum(1, np.abs(rl)))
    ver = launch(ra + ["verify", "--in", inp, "--out", out])
    ok = rel < TOL and lerr < TOL and ver.returncode == 0
    if rope or alibi:  # verify follows the attributes: a wrong one fails it
        with h5py.File(out, "r+") as f:
            if rope:
                f.attrs["rope"] = "interleaved" if rope == "half" else "half"
            else:
                f.attrs["alibi"] = 0
        wrong = launch(ra + ["verify", "--in", inp, "--out", out])
        ok = ok and wrong.returncode == 1 and "FAIL" in wrong.stdout
    print(f"{name:24s} P={np_ranks} seed={seed:10d} rel_o={rel:.2e} lse={lerr:.2e} "
          f"verify={'PASS' if ver.returncode == 0 else 'FAIL'} "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def main():
    if len(sys.argv) != 3:
        print("usage: posenc_torch.py RINGATTN NP")
        return 2
    ringattn, nr = sys.argv[1], int(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        results = [
            case(tmp, nr, ringattn, "rope-half", (2, 150, 150, 4, 2, 16),
                 ["--rope", "half", "--causal"], rope="half"),
            case(tmp, nr, ringattn, "rope-interleaved-cross", (1, 90, 170, 2, 2, 32),
                 ["--rope", "interleaved", "--rope-base", "500", "--causal",
                  "--layout", "striped"], rope="interleaved", base=500.0),
            case(tmp, nr, ringattn, "rope-half-noncausal", (1, 130, 130, 2, 1, 8),
                 ["--rope", "half", "--layout", "zigzag"], rope="half"),
            case(tmp, nr, ringattn, "alibi-h6", (1, 140, 140, 6, 3, 16),
                 ["--alibi", "--causal"], alibi=True),
            case(tmp, nr, ringattn, "alibi-given-rope", (1, 120, 120, 4, 4, 8),
                 ["--alibi", "--rope", "half"], rope="half", alibi=True,
                 given=[0.5, 0.01, 0.25, 0.0]),
        ]
    return 0 if all(results) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"posenc_torch.py: {e}")
        sys.exit(1)
