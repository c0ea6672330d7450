#!/usr/bin/env python3
"""Nadaraya-Watson kernel regression as Gaussian-score attention on a ring.

The textbook's toy problem: y = 2 sin(x) + x^0.8 + noise, 50 sorted random
training points in [0, 5). Queries are test inputs x_test, keys the training
inputs x_train, values the training targets y_train (D = Dv = 1), and the
score is the Gaussian kernel a(q, k) = -(q - k)^2 / (2 sigma^2), so the
attention output is the kernel-weighted average of y_train: the
Nadaraya-Watson estimate. ringattn computes it on RANKS MPI ranks and also
writes the attention weights (--attn-map), drawn as a heatmap.

    /usr/bin/python3 bench/nadaraya_watson.py [--ringattn build/ringattn]
        [--ranks 2] [--sigma 1.0] [--out-dir docs]

Writes nadaraya-watson.png (fit) and nadaraya-watson-weights.png (weights).
Needs python3-h5py, python3-numpy, python3-matplotlib.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def f(x):
    return 2 * np.sin(x) + x ** 0.8


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ringattn", default="build/ringattn")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--out-dir", default="docs")
    a = ap.parse_args()

    rng = np.random.default_rng(0)
    n_train = 50
    x_train = np.sort(rng.random(n_train) * 5)
    y_train = f(x_train) + rng.normal(0.0, 0.5, n_train)
    x_test = np.arange(0, 5, 0.1)

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "nw-in.h5"), os.path.join(tmp, "nw-out.h5")
        with h5py.File(inp, "w") as h:
            h["q"] = x_test.reshape(1, -1, 1, 1).astype(np.float32)
            h["k"] = x_train.reshape(1, -1, 1, 1).astype(np.float32)
            h["v"] = y_train.reshape(1, -1, 1, 1).astype(np.float32)
            for n in "qkv":  # (B, N, H, D): a 4-D shape alone cannot say
                h[n].attrs["axes"] = "B,N,H,D"
        cmd = ["mpirun", "-np", str(a.ranks), "--oversubscribe", a.ringattn,
               "run", "--in", inp, "--out", out, "--score", "gaussian",
               "--sigma", str(a.sigma), "--attn-map", f"0:{len(x_test)}"]
        print("+", " ".join(cmd))
        subprocess.run(cmd, check=True, env=env)
        subprocess.run([a.ringattn, "verify", "--in", inp, "--out", out],
                       check=True, env=env)
        with h5py.File(out, "r") as h:
            y_hat = h["o"][0, :, 0, 0]
            weights = h["attn_map"][0, 0]

    # the same estimate in numpy, as a check of the picture
    w = np.exp(-((x_test[:, None] - x_train[None, :]) ** 2) / (2 * a.sigma ** 2))
    w /= w.sum(axis=1, keepdims=True)
    err = np.max(np.abs(w @ y_train - y_hat))
    print(f"max |ringattn - numpy| = {err:.2e}")
    if err > 1e-4:
        sys.exit("nadaraya_watson.py: the estimate disagrees with numpy")

    os.makedirs(a.out_dir, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x_test, f(x_test), label="truth")
    ax.plot(x_test, y_hat, label=f"prediction (Gaussian score, sigma={a.sigma})")
    ax.plot(x_train, y_train, "o", alpha=0.5, label="training data")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(f"Nadaraya-Watson regression as ring attention on {a.ranks} ranks")
    ax.legend()
    fig.tight_layout()
    fit = os.path.join(a.out_dir, "nadaraya-watson.png")
    fig.savefig(fit, dpi=100)

    fig, ax = plt.subplots(figsize=(5, 4.5))
    im = ax.imshow(weights, cmap="Reds", aspect="auto")
    ax.set_xlabel("sorted training inputs (keys)")
    ax.set_ylabel("sorted testing inputs (queries)")
    ax.set_title("attention weights")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    heat = os.path.join(a.out_dir, "nadaraya-watson-weights.png")
    fig.savefig(heat, dpi=100)
    print(f"wrote {fit} and {heat}")


if __name__ == "__main__":
    main()
