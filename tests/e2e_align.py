"""End to end: `run --align-per-sequence` (each sequence aligned
bottom-right on its own lengths, as flash-attention's varlen functions do)
through the command line, forward (with its attention map) and `run --backward --fwd`, every row
against an fp64 numpy computation written here from the README's
definition; `verify` and `verify --backward` must pass the outputs, and
the tensor-aligned run of the same input must differ. One line per case;
exit 1 if any fails.

usage: e2e_align.py RINGATTN NP
"""
import os
import shutil
import sys
import tempfile

import h5py
import numpy as np

from e2e_util import launch, mpi, rope_half, run, softmax, visible

RINGATTN = os.path.abspath(sys.argv[1])
NP = sys.argv[2]
TOL = 1e-5


RA = mpi(NP) + [RINGATTN]  # the command line at NP ranks


def ids(f, b):
    """Query and key segment ids of batch b, or (None, None)."""
    if "segments" in f:
        return f["segments"][b], f["segments"][b]
    if "q_segments" in f:
        return f["q_segments"][b], f["kv_segments"][b]
    return None, None


def aligned(f, b, N, M):
    """Each query's aligned position i' (README, per-sequence alignment)."""
    i = np.arange(N)
    qs, ks = ids(f, b)
    if qs is None:
        ql = f["q_lens"][b] if "q_lens" in f else N
        kl = f["kv_lens"][b] if "kv_lens" in f else M
        return i + (kl - ql)
    at = i + (M - N)  # a query whose id no key has sees nothing anyway
    for s in np.unique(qs):
        keys = np.flatnonzero(ks == s)
        if keys.size:
            mine = qs == s
            at[mine] = i[mine] + (keys[-1] + 1) - (np.flatnonzero(mine)[-1] + 1)
    return at


def head(f, b, h, at, opt):
    """One head: q, k (rotated), v, do, the probabilities, o and lse."""
    q = f["q"][b, :, h].astype(np.float64)
    G, H = f["k"].shape[2], f["q"].shape[2]
    g = h // (H // G)
    k = f["k"][b, :, g].astype(np.float64)
    v = f["v"][b, :, g].astype(np.float64)
    kpos = np.arange(k.shape[0])
    if opt["rope"]:
        q, k = rope_half(q, at, opt["rope"]), rope_half(k, kpos, opt["rope"])
    sc = q @ k.T / np.sqrt(q.shape[1])
    if opt["alibi"]:
        sc -= 2.0 ** (-8.0 * (h + 1) / H) * np.abs(kpos[None, :] - at[:, None])
    vis = visible(f, b, at.size, k.shape[0], opt["causal"], opt["window"],
                  at)
    p, lse = softmax(np.where(vis, sc, -np.inf))
    return q, k, v, p, p @ v, lse


def grads(f, b, h, at, opt):
    """One head's dq, dk, dv of L = sum(do * o), back through RoPE."""
    q, k, v, p, o, _ = head(f, b, h, at, opt)
    do = f["do"][b, :, h].astype(np.float64)
    dp = do @ v.T
    ds = p * (dp - (do * o).sum(axis=1)[:, None])
    c = 1.0 / np.sqrt(q.shape[1])
    dq, dk = c * ds @ k, c * ds.T @ q
    if opt["rope"]:
        dq = rope_half(dq, -at, opt["rope"])
        dk = rope_half(dk, -np.arange(k.shape[0]), opt["rope"])
    return dq, dk, p.T @ do


def rel(got, want):
    den = np.linalg.norm(want)
    return np.linalg.norm(got - want) / (den if den > 0 else 1.0)


def check_forward(inp, out, opt):
    """Worst relative error of /o and of the finite lse, and whether the
    rows that see nothing are exactly those with lse = -inf."""
    worst, same = 0.0, True
    with h5py.File(inp, "r") as f, h5py.File(out, "r") as g:
        B, N, H, _ = f["q"].shape
        for b in range(B):
            at = aligned(f, b, N, f["k"].shape[1])
            for h in range(H):
                _, _, _, _, o, lse = head(f, b, h, at, opt)
                got = g["lse"][b, h].astype(np.float64)
                same &= bool(np.all(np.isinf(got) == np.isinf(lse)))
                fin = np.isfinite(lse)
                worst = max(worst, rel(g["o"][b, :, h], o),
                            float(np.max(np.abs(got[fin] - lse[fin]),
                                         initial=0.0)))
    return worst, same


def check_map(inp, out, opt):
    """Worst absolute error of /attn_map (all rows, heads 0 and 1)
    against the probabilities."""
    worst = 0.0
    with h5py.File(inp, "r") as f, h5py.File(out, "r") as g:
        B, N = f["q"].shape[:2]
        for b in range(B):
            at = aligned(f, b, N, f["k"].shape[1])
            for hi in range(2):
                p = head(f, b, hi, at, opt)[3]
                worst = max(worst, float(np.max(np.abs(g["attn_map"][b, hi] - p))))
    return worst


def check_backward(inp, out, opt):
    with h5py.File(inp, "r") as f, h5py.File(out, "r") as g:
        B, N, H, _ = f["q"].shape
        M, G = f["k"].shape[1], f["k"].shape[2]
        dq = np.zeros(f["q"].shape)
        dk, dv = np.zeros(f["k"].shape), np.zeros(f["v"].shape)
        for b in range(B):
            at = aligned(f, b, N, M)
            for h in range(H):
                gq, gk, gv = grads(f, b, h, at, opt)
                dq[b, :, h] = gq
                dk[b, :, h // (H // G)] += gk
                dv[b, :, h // (H // G)] += gv
        return max(rel(g["dq"][...], dq), rel(g["dk"][...], dk),
                   rel(g["dv"][...], dv))


def flags(opt):
    out = ["--causal"] if opt["causal"] else []
    if opt["window"]:
        out += ["--window", "%d,%d" % opt["window"]]
    if opt["rope"]:
        out += ["--rope", "half", "--rope-base", str(opt["rope"])]
    return out + (["--alibi"] if opt["alibi"] else [])


def case(name, inp, opt):
    """Forward, verify, backward from the forward; the tensor-aligned
    forward must differ."""
    base = ["--in", inp, "--layout", opt["layout"]] + flags(opt)
    with h5py.File(inp, "r") as f:
        n = f["q"].shape[1]
    run(RA + ["run", "--out", "a.h5", "--force", "--align-per-sequence",
              "--attn-map", f"0:{n}", "--attn-map-heads", "0,1"] + base)
    run(RA + ["run", "--out", "t.h5", "--force"] + base)
    err, same = check_forward(inp, "a.h5", opt)
    merr = check_map(inp, "a.h5", opt)
    v = launch(RA + ["verify", "--in", inp, "--out", "a.h5", "--all"])
    run(RA + ["run", "--backward", "--fwd", "a.h5", "--out", "g.h5",
              "--force", "--align-per-sequence"] + base)
    gerr = check_backward(inp, "g.h5", opt)
    vb = launch(RA + ["verify", "--backward", "--in", inp, "--out", "g.h5",
                      "--all"])
    # the same outputs read as tensor-aligned runs must fail verification
    for out in ("a.h5", "g.h5"):
        shutil.copy(out, "x" + out)
        with h5py.File("x" + out, "r+") as x:
            x.attrs["align"] = "tensor"
    wrong = [launch(RA + ["verify"] + extra + ["--in", inp, "--out",
                                               "x" + out, "--all"]).returncode
             for out, extra in (("a.h5", []), ("g.h5", ["--backward"]))]
    with h5py.File("a.h5", "r") as x, h5py.File("t.h5", "r") as y:
        differ = float(np.max(np.abs(x["o"][...] - y["o"][...])))
        align = x.attrs["align"]
    ok = (err < TOL and same and merr < TOL and v.returncode == 0 and
          gerr < TOL and vb.returncode == 0 and differ > 1e-2 and
          align == "sequence" and wrong == [1, 1])
    print(f"{'PASS' if ok else 'FAIL'} {name}: forward {err:.1e}, empty rows "
          f"{'match' if same else 'DIFFER'}, map {merr:.1e}, verify exit "
          f"{v.returncode}, gradients {gerr:.1e} (limits {TOL:g}), verify "
          f"--backward exit {vb.returncode}; tensor alignment differs by "
          f"{differ:.2g}; attribute align {align}; verify exits {wrong} (want "
          f"[1, 1]) when told the run was tensor-aligned")
    return ok


def main():
    work = tempfile.mkdtemp(prefix="ra_e2e_align_")
    try:
        os.chdir(work)
        shape = ["--batch", "2", "--heads", "4", "--kv-heads", "2", "--dim",
                 "16", "--backward", "--seed", "7"]
        run([RINGATTN, "gen", "--out", "lens.h5", "--seq", "97", "--seq-kv",
             "131", "--lens", "random"] + shape)
        run([RINGATTN, "gen", "--out", "seg.h5", "--seq", "150", "--seq-kv",
             "113", "--segments", "25"] + shape)
        plain = {"causal": 0, "window": None, "rope": 0, "alibi": 0,
                 "layout": "contiguous"}
        ok = case("lens, causal+window 9,3, zigzag", "lens.h5",
                  dict(plain, causal=1, window=(9, 3), layout="zigzag"))
        ok &= case("lens, causal, RoPE half (base 500) + ALiBi", "lens.h5",
                   dict(plain, causal=1, rope=500, alibi=1))
        ok &= case("segments (N > M), causal, RoPE half, striped", "seg.h5",
                   dict(plain, causal=1, rope=10000, layout="striped"))
        ok &= case("segments (N > M), window 6,2, ALiBi", "seg.h5",
                   dict(plain, window=(6, 2), alibi=1))
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
