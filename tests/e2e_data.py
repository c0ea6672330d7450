#!/usr/bin/env python3
"""e2e_data.py RINGATTN NP: users' data as PyTorch and h5py leave it, through
the command line at NP ranks, each result checked against numpy in fp64:

1. (B, H, N, D) tensors: with an axes attribute, with --qkv-layout bhnd,
   under other dataset names (--q --k --v), outputs under --out-group;
   `ringattn verify` follows the recorded names, order and group; an axes attribute of another order, and a
   (B, H, N, D) file read as the default (B, N, H, D) whose shapes then
   disagree, are refused with one line; `info` lists the soft and external
   links it follows and the attributes that record the datasets.
2. Mask datasets under other names (--q-lens --kv-lens --segments), against
   numpy, verify following the recorded names; --scale with the gaussian
   score and --sigma with the dot score: refused.
3. run --out-axes B,H,N,D writes /o heads-first with its axes attribute
   (and /lse's), right against numpy; verify and info read it.
4. plot-map at M = 1500, width 1000: a known diagonal lands in the pixel
   columns of its keys (the padding is ceil(M / group) * group); --head
   names a model head, the error lists the heads the map holds; --log and
   --vmax draw, bad values are refused.
"""
import os
import re
import sys
import tempfile

import h5py
import numpy as np
import matplotlib.image as mpimg

from e2e_util import attention, mpi, refused, run

RINGATTN, NP = sys.argv[1], int(sys.argv[2])
MPI = mpi(NP)
TOL = 1e-5


def check_out(out, o_ref, lse_ref, what, group=""):
    with h5py.File(out, "r") as f:
        o = f[group + "/o"][()].astype(np.float64)
        lse = f[group + "/lse"][()].astype(np.float64)
    err = max(np.max(np.abs(o - o_ref)), np.max(np.abs(lse - lse_ref)))
    print(f"{what}: max |err| against numpy fp64 {err:.2e}")
    assert err < TOL, (what, err)


def layouts(tmp):
    rng = np.random.default_rng(12 + NP)
    B, H, G, N, M, D, Dv = 2, 4, 2, 67, 91, 8, 5  # H != N: a wrong order cannot pass
    q = rng.standard_normal((B, H, N, D)).astype(np.float32)
    k = rng.standard_normal((B, G, M, D)).astype(np.float32)
    v = rng.standard_normal((B, G, M, Dv)).astype(np.float32)
    o_ref, lse_ref = attention(q, k, v, causal=True, order="bhnd")

    tagged, plain, named = (os.path.join(tmp, n) for n in ("tagged.h5", "plain.h5", "named.h5"))
    with h5py.File(tagged, "w") as f:
        for n, t in (("q", q), ("k", k), ("v", v)):
            f[n] = t
            f[n].attrs["axes"] = "B,H,N,D"
    with h5py.File(plain, "w") as f:
        f["q"], f["k"], f["v"] = q, k, v
    with h5py.File(named, "w") as f:
        g = f.create_group("layer3/attn")
        g["query"], g["key"], g["value"] = q, k, v

    out = os.path.join(tmp, "o.h5")
    table = run(MPI + [RINGATTN, "run", "--in", tagged, "--out", out, "--causal"])
    assert "/q (B,H,N,D), /k (B,H,N,D), /v (B,H,N,D)" in table, table
    check_out(out, o_ref, lse_ref, "axes attribute B,H,N,D")
    run(MPI + [RINGATTN, "verify", "--in", tagged, "--out", out])

    run(MPI + [RINGATTN, "run", "--in", plain, "--out", out, "--force", "--causal",
               "--qkv-layout", "bhnd", "--layout", "striped"])
    check_out(out, o_ref, lse_ref, "--qkv-layout bhnd")
    with h5py.File(out, "r") as f:
        assert f.attrs["qkv_layout"] == "bhnd" and isinstance(f.attrs["q_dataset"], str)
    run(MPI + [RINGATTN, "verify", "--in", plain, "--out", out])

    run(MPI + [RINGATTN, "run", "--in", named, "--out", out, "--force", "--causal",
               "--qkv-layout", "bhnd", "--q", "/layer3/attn/query", "--k",
               "/layer3/attn/key", "--v", "/layer3/attn/value", "--out-group",
               "/layer3/result"])
    check_out(out, o_ref, lse_ref, "--q --k --v under /layer3/attn, --out-group",
              "/layer3/result")
    with h5py.File(out, "r") as f:
        assert f.attrs["k_dataset"] == "/layer3/attn/key", dict(f.attrs)
        assert f.attrs["out_group"] == "/layer3/result" and "o" not in f
    run(MPI + [RINGATTN, "verify", "--in", named, "--out", out])

    # info follows soft and external links and lists them
    links = os.path.join(tmp, "links.h5")
    with h5py.File(links, "w") as f:
        f["q"] = h5py.SoftLink("/inner/q")
        f["inner/q"] = q
        f["k"] = h5py.ExternalLink(os.path.basename(named), "/layer3/attn/key")
        f["gone"] = h5py.SoftLink("/nothing")
    info = run([RINGATTN, "info", links])
    assert re.search(r"/q -> /inner/q \(soft\), followed", info), info
    assert re.search(r"/k -> named\.h5:/layer3/attn/key \(external\), followed", info), info
    assert re.search(r"/gone -> /nothing \(soft\), not followed", info), info
    assert re.search(r"^  /k +\(2, 2, 91, 8\) +float32(  axes \S+)?$", info, re.M), info
    info = run([RINGATTN, "info", out])
    assert re.search(r'^  k_dataset += "/layer3/attn/key"$', info, re.M), info

    # without an axes attribute or --qkv-layout no order is assumed
    refused(MPI + [RINGATTN, "run", "--in", plain, "--out", out, "--force"],
            r"plain\.h5: dataset /q: no axes attribute, .* give --qkv-layout "
            r"bnhd or --qkv-layout bhnd")
    with h5py.File(plain, "a") as f:
        f["q"].attrs["axes"] = "B,N,D,H"
    refused(MPI + [RINGATTN, "run", "--in", plain, "--out", out, "--force"],
            r"plain\.h5: dataset /q: attribute axes 'B,N,D,H' is neither B,N,H,D nor B,H,N,D")
    refused([RINGATTN, "run", "--in", plain, "--out", out, "--qkv-layout", "nbhd"],
            r"--qkv-layout")
    refused([RINGATTN, "run", "--in", named, "--out", out, "--force", "--q", "/nope"],
            r"named\.h5: dataset /nope: not found")


def out_axes(tmp):
    """--out-axes B,H,N,D: /o stored (B, H, N, Dv) with axes "B,H,N,D", /lse
    with "B,H,N", values against numpy; verify and info read it; the
    default order says "B,N,H,D"."""
    rng = np.random.default_rng(40 + NP)
    B, H, N, D, Dv = 2, 3, 53, 8, 5
    q, k, v = (rng.standard_normal((B, H, N, d)).astype(np.float32)
               for d in (D, D, Dv))
    o_ref, lse_ref = attention(q, k, v, order="bhnd")
    inp, tok, heads = (os.path.join(tmp, n) for n in
                       ("ax.h5", "ax_tok.h5", "ax_heads.h5"))
    with h5py.File(inp, "w") as f:
        for n, t in (("q", q), ("k", k), ("v", v)):
            f[n] = t
            f[n].attrs["axes"] = "B,H,N,D"
    run(MPI + [RINGATTN, "run", "--in", inp, "--out", tok])
    run(MPI + [RINGATTN, "run", "--in", inp, "--out", heads, "--out-axes",
               "B,H,N,D", "--layout", "striped", "--out-chunk", "7"])
    with h5py.File(tok, "r") as f:
        assert f["o"].attrs["axes"] == "B,N,H,D", dict(f["o"].attrs)
        assert f["lse"].attrs["axes"] == "B,H,N", dict(f["lse"].attrs)
    with h5py.File(heads, "r") as f:
        assert f["o"].shape == (B, H, N, Dv), f["o"].shape
        assert f["o"].attrs["axes"] == "B,H,N,D", dict(f["o"].attrs)
        o = f["o"][()].transpose(0, 2, 1, 3).astype(np.float64)
        lse = f["lse"][()].astype(np.float64)
    err = max(np.max(np.abs(o - o_ref)), np.max(np.abs(lse - lse_ref)))
    print(f"--out-axes B,H,N,D: max |err| against numpy fp64 {err:.2e}")
    assert err < TOL, err
    run(MPI + [RINGATTN, "verify", "--in", inp, "--out", heads])
    info = run([RINGATTN, "info", heads])
    assert re.search(r"^  /o +\(2, 3, 53, 5\) +float32  axes B,H,N,D$", info,
                     re.M), info
    refused([RINGATTN, "run", "--in", inp, "--out", heads, "--force",
             "--out-axes", "B,H,D,N"], r"--out-axes")


def mask_datasets(tmp):
    """Padding and packed sequences under other names (--q-lens --kv-lens
    --segments), against numpy; verify follows the recorded names."""
    rng = np.random.default_rng(120 + NP)
    B, N, H, D = 2, 53, 2, 8
    q, k, v = (rng.standard_normal((B, N, H, D)).astype(np.float32) for _ in range(3))
    ql, kl = np.array([40, 53]), np.array([53, 31])
    seg = np.sort(rng.integers(0, 4, (B, N)), axis=1)
    inp, out = os.path.join(tmp, "masks.h5"), os.path.join(tmp, "m.h5")
    with h5py.File(inp, "w") as f:
        f["q"], f["k"], f["v"] = q, k, v
        f["meta/qlen"], f["meta/kvlen"], f["meta/seg"] = ql, kl, seg
        f["q_lens"] = np.zeros(B, np.int64)  # the default name: must be ignored
    run(MPI + [RINGATTN, "run", "--in", inp, "--out", out, "--qkv-layout", "bnhd", "--q-lens", "/meta/qlen",
               "--kv-lens", "/meta/kvlen", "--segments", "/meta/seg"])
    i, j = np.arange(N)[:, None], np.arange(N)[None, :]
    seen = ((i < ql[:, None, None]) & (j < kl[:, None, None]) &
            (seg[:, :, None] == seg[:, None, :]))[:, None]  # (B, 1, N, N)
    s = np.einsum("bnhd,bmhd->bhnm", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(D)
    s = np.where(seen, s, -np.inf)
    mx = np.max(s, axis=-1, keepdims=True)
    p = np.where(seen, np.exp(s - np.where(np.isfinite(mx), mx, 0)), 0.0)
    l = p.sum(axis=-1, keepdims=True)
    o_ref = np.einsum("bhnm,bmhd->bnhd", p / np.where(l > 0, l, 1), v.astype(np.float64))
    with h5py.File(out, "r") as f:
        o = f["o"][()].astype(np.float64)
        assert f.attrs["q_lens_dataset"] == "/meta/qlen" and f.attrs["segments_dataset"] == "/meta/seg"
    err = np.max(np.abs(o - o_ref))
    print(f"--q-lens --kv-lens --segments under /meta: max |err| against numpy fp64 {err:.2e}")
    assert err < TOL, err
    assert "PASS" in run(MPI + [RINGATTN, "verify", "--in", inp, "--out", out])
    refused(MPI + [RINGATTN, "run", "--in", inp, "--out", out, "--force", "--qkv-layout", "bnhd",
                   "--kv-lens", "/nope"],
            r"masks\.h5: dataset /nope: not found")


def score_options(tmp):
    inp, out = os.path.join(tmp, "g.h5"), os.path.join(tmp, "s.h5")
    run([RINGATTN, "gen", "--out", inp, "--seq", "16", "--heads", "1", "--dim", "4"])
    refused(MPI + [RINGATTN, "run", "--in", inp, "--out", out, "--score", "gaussian",
                   "--scale", "2"], r"scale: the gaussian score takes no scale")
    refused(MPI + [RINGATTN, "run", "--in", inp, "--out", out, "--sigma", "2"],
            r"sigma: the dot score takes no bandwidth")
    assert not os.path.exists(out)


def map_file(path, M, rows, heads):
    """An output file holding only a map: weight 1 on a known diagonal,
    query row r at keys [diag(r), diag(r) + 6) (a band some pixels wide,
    so that resampling to the screen keeps it), for each listed model
    head; returns the band's centres."""
    w = np.zeros((1, len(heads), rows, M), np.float32)
    diag = (np.arange(rows) * (M - 6)) // (rows - 1)
    for j in range(6):
        w[0, :, np.arange(rows), diag + j] = 1.0
    with h5py.File(path, "w") as f:
        f["attn_map"] = w
        f.attrs["attn_map_rows"] = f"0:{rows}"
        f.attrs["attn_map_heads"] = ",".join(map(str, heads))
    return diag + 3


def longest_run(idx):
    runs = np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1)
    return max(runs, key=len)


def plot_area(img):
    """The pixel box inside the axes frame, from its black spines: the
    longest horizontal black runs (the colour bar's frame is narrower),
    whatever the image shows inside."""
    black = np.all(img[..., :3] < 0.1, axis=-1)
    lines = np.flatnonzero(black.sum(axis=1) > 0.4 * black.shape[1])
    top, bottom = lines[0], lines[-1]
    xs = longest_run(np.flatnonzero(black[top]))
    return xs[0] + 1, xs[-1], top + 1, bottom


def plot(tmp):
    M, rows = 1500, 120
    h5, png = os.path.join(tmp, "map.h5"), os.path.join(tmp, "map.png")
    diag = map_file(h5, M, rows, [2, 5])
    run([RINGATTN, "plot-map", h5, png, "--width", "1000", "--head", "5"])
    img = mpimg.imread(png)
    x0, x1, y0, y1 = plot_area(img)
    bright = (img[..., 1] > 0.6) & (img[..., 2] < 0.5)  # viridis top: yellow, not white
    worst = 0.0
    for r in range(rows):
        y = y0 + int((r + 0.5) * (y1 - y0) / rows)
        xs = np.flatnonzero(bright[y, x0:x1])
        assert xs.size, f"query row {r}: no bright pixel"
        want = diag[r] / M * (x1 - x0)
        worst = max(worst, abs(xs.mean() - want) / (x1 - x0))
    print(f"plot-map M = {M}, width 1000: the diagonal lies within "
          f"{worst * 100:.2f}% of the plot width of its keys")
    assert worst < 0.01, worst
    run([RINGATTN, "plot-map", h5, png, "--force", "--log", "--vmax", "0.5"])
    assert np.ptp(mpimg.imread(png)) > 0
    refused([RINGATTN, "plot-map", h5, png, "--force", "--head", "3"],
            r"--head 3: the map holds model heads 2,5")
    refused([RINGATTN, "plot-map", h5, png, "--force", "--vmax", "0"], r"--vmax")
    refused([RINGATTN, "plot-map", h5, png, "--force", "--vmax", "nan"], r"--vmax")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        layouts(tmp)
        out_axes(tmp)
        mask_datasets(tmp)
        score_options(tmp)
        if NP == 1:  # plot-map runs on rank 0 alone: once is enough
            plot(tmp)
    print("e2e_data: PASS")


if __name__ == "__main__":
    main()
