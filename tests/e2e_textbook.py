#!/usr/bin/env python3
"""e2e_textbook.py RINGATTN NP: the textbook's attention through the command
line on files at NP ranks, each checked by numpy in fp64:

1. Nadaraya-Watson regression with the Gaussian score (D = 1): the example
   script's estimate against numpy's, and its PNGs decode.
2. The additive score with keys of another dim than the queries (Dk != D),
   GQA, causal: `ringattn verify` and a numpy implementation.
3. An attention map (--attn-map) with padding: rows sum to 1 (0 for padded
   rows) and match numpy's softmax weights; `ringattn plot-map` writes a PNG
   of the expected size that decodes.
"""
import os
import sys
import tempfile

import h5py
import numpy as np
import matplotlib.image as mpimg

from e2e_util import mpi, run, softmax, visible

RINGATTN, NP = sys.argv[1], int(sys.argv[2])
HERE = os.path.dirname(os.path.abspath(__file__))
MPI = mpi(NP)


def check_png(path, width, height):
    img = mpimg.imread(path)
    assert img.shape[0] == height and img.shape[1] == width, (path, img.shape)
    assert np.ptp(img) > 0, f"{path} is blank"


def nadaraya_watson(tmp):
    run([sys.executable, os.path.join(HERE, "..", "bench", "nadaraya_watson.py"),
         "--ringattn", RINGATTN, "--ranks", str(NP), "--out-dir", tmp])
    check_png(os.path.join(tmp, "nadaraya-watson.png"), 700, 400)
    check_png(os.path.join(tmp, "nadaraya-watson-weights.png"), 500, 450)


def additive(tmp):
    rng = np.random.default_rng(5)
    B, N, M, H, G, D, Dk, Dv, A = 2, 97, 131, 4, 2, 6, 10, 5, 12
    q = rng.standard_normal((B, N, H, D))
    k = rng.standard_normal((B, M, G, Dk))
    v = rng.standard_normal((B, M, G, Dv))
    wq = rng.standard_normal((A, D)) * 0.4
    wk = rng.standard_normal((A, Dk)) * 0.4
    wv = rng.standard_normal(A)
    inp, out = os.path.join(tmp, "add-in.h5"), os.path.join(tmp, "add-out.h5")
    with h5py.File(inp, "w") as f:
        f["q"], f["k"], f["v"] = q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)
        for n in "qkv":
            f[n].attrs["axes"] = "B,N,H,D"
        f["additive/w_q"], f["additive/w_k"], f["additive/w_v"] = (
            wq.astype(np.float32), wk.astype(np.float32), wv.astype(np.float32))
    run(MPI + [RINGATTN, "run", "--in", inp, "--out", out, "--score", "additive", "--causal"])
    run(MPI + [RINGATTN, "verify", "--in", inp, "--out", out, "--all"])
    with h5py.File(inp, "r") as f:  # what the engine read, in fp64
        q, k, v = (f[n][...].astype(np.float64) for n in ("q", "k", "v"))
        wq, wk, wv = (f["additive/" + n][...].astype(np.float64) for n in ("w_q", "w_k", "w_v"))
    kh = np.repeat(k, H // G, axis=2)
    vh = np.repeat(v, H // G, axis=2)
    qp = np.einsum("bnhd,ad->bnha", q, wq)
    kp = np.einsum("bmhd,ad->bmha", kh, wk)
    s = np.einsum("bnhma,a->bhnm", np.tanh(qp[:, :, :, None, :] + kp.transpose(0, 2, 1, 3)[:, None]), wv)
    s = np.where(visible({}, 0, N, M, causal=True), s, -np.inf)
    p, lse_ref = softmax(s)
    o_ref = np.einsum("bhnm,bmhd->bnhd", p, vh)
    with h5py.File(out, "r") as f:
        o, lse = f["o"][...], f["lse"][...]
        assert f.attrs["score"] in (b"additive", "additive")
    rel = np.linalg.norm(o - o_ref) / np.linalg.norm(o_ref)
    fin = np.isfinite(lse_ref)
    assert np.array_equal(np.isfinite(lse), fin)
    lerr = np.max(np.abs(lse[fin] - lse_ref[fin]))
    print(f"additive vs numpy: rel err {rel:.2e}, lse err {lerr:.2e}")
    assert rel < 1e-5 and lerr < 1e-5


def attention_map(tmp):
    inp, out = os.path.join(tmp, "map-in.h5"), os.path.join(tmp, "map-out.h5")
    run(MPI + [RINGATTN, "gen", "--out", inp, "--batch", "2", "--seq", "333", "--seq-kv",
               "401", "--heads", "4", "--kv-heads", "2", "--dim", "16", "--lens", "random",
               "--seed", "9"])
    run(MPI + [RINGATTN, "run", "--in", inp, "--out", out, "--attn-map", "50:250",
               "--attn-map-heads", "1,3", "--layout", "striped"])
    with h5py.File(inp, "r") as f:
        q, k = f["q"][...].astype(np.float64), f["k"][...].astype(np.float64)
        q_lens, kv_lens = f["q_lens"][...], f["kv_lens"][...]
    with h5py.File(out, "r") as f:
        m = f["attn_map"][...]
    B, N, H, D = q.shape
    M, G = k.shape[1], k.shape[2]
    assert m.shape == (B, 2, 200, M), m.shape
    kh = np.repeat(k, H // G, axis=2)
    s = np.einsum("bnhd,bmhd->bhnm", q, kh) / np.sqrt(D)
    lens = {"q_lens": q_lens, "kv_lens": kv_lens}
    seen = np.stack([visible(lens, b, N, M) for b in range(B)])[:, None]
    p, _ = softmax(np.where(seen, s, -np.inf))
    ref = p[:, [1, 3], 50:250, :]
    err = np.max(np.abs(m - ref))
    sums = m.sum(axis=-1)
    want = np.broadcast_to((np.arange(50, 250)[None, None, :] < q_lens[:, None, None]) &
                           (kv_lens[:, None, None] > 0), sums.shape)
    print(f"attention map vs numpy: max |p - ref| {err:.2e}, row sums in "
          f"[{sums[want].min():.7f}, {sums[want].max():.7f}], "
          f"{int((~want).sum())} rows see nothing")
    assert err < 1e-5
    assert np.all(np.abs(sums[want] - 1) < 1e-5) and np.all(sums[~want] == 0)
    png = os.path.join(tmp, "map.png")
    run([RINGATTN, "plot-map", out, png, "--batch", "1", "--head", "3", "--width", "300"])
    check_png(png, 1000, 700)


def layer(tmp, cross):
    """run --mha against numpy's layer: projections, heads, scale
    1/sqrt(D), positional encoding, masks, output projection."""
    inp, out = os.path.join(tmp, "mha-in.h5"), os.path.join(tmp, "mha-out.h5")
    gen = [RINGATTN, "gen", "--mha", "--out", inp, "--force", "--batch", "2",
           "--seq", "211", "--heads", "4", "--kv-heads", "2", "--dim", "8",
           "--dim-v", "6", "--embed", "24", "--seed", "4"]
    if cross:
        gen += ["--seq-kv", "150"]
    run(MPI + gen)
    runargs = [RINGATTN, "run", "--mha", "--in", inp, "--out", out, "--force",
               "--pos-encoding", "sinusoidal"] + ([] if cross else ["--causal"])
    run(MPI + runargs)
    with h5py.File(inp, "r") as f:
        g = lambda n: f[n][...].astype(np.float64)
        xq = g("x_q") if cross else g("x")
        xkv = g("x_kv") if cross else xq
        wq, wk, wv, wo = g("w_q"), g("w_k"), g("w_v"), g("w_o")
        bq, bk, bv, bo = g("b_q"), g("b_k"), g("b_v"), g("b_o")
    with h5py.File(out, "r") as f:
        y = f["y"][...]

    def pe(x):
        n, e = x.shape[1], x.shape[2]
        i = np.arange(n)[:, None]
        c = np.arange(e)[None, :]
        ang = i / np.power(10000.0, (c - c % 2) / e)
        return x + np.where(c % 2 == 0, np.sin(ang), np.cos(ang))[None]

    H, G = 4, 2
    q = pe(xq) @ wq.T + bq
    k = pe(xkv) @ wk.T + bk
    v = pe(xkv) @ wv.T + bv
    B, N, M = xq.shape[0], xq.shape[1], xkv.shape[1]
    D, Dv = q.shape[2] // H, v.shape[2] // G
    q = q.reshape(B, N, H, D)
    k = np.repeat(k.reshape(B, M, G, D), H // G, axis=2)
    v = np.repeat(v.reshape(B, M, G, Dv), H // G, axis=2)
    s = np.einsum("bnhd,bmhd->bhnm", q, k) / np.sqrt(D)
    if not cross:
        s = np.where(visible({}, 0, N, M, causal=True), s, -np.inf)
    p, _ = softmax(s)
    o = np.einsum("bhnm,bmhd->bnhd", p, v).reshape(B, N, H * Dv)
    y_ref = o @ wo.T + bo
    rel = np.linalg.norm(y - y_ref) / np.linalg.norm(y_ref)
    print(f"layer ({'cross' if cross else 'self, causal'}) vs numpy: rel err {rel:.2e}")
    assert rel < 1e-5


with tempfile.TemporaryDirectory() as tmp:
    layer(tmp, False)
    layer(tmp, True)
    nadaraya_watson(tmp)
    additive(tmp)
    attention_map(tmp)
print(f"e2e_textbook PASS (P={NP})")
