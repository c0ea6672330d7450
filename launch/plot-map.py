#!/usr/bin/env python3
"""plot-map.py: render /attn_map of a ringattn output file as a PNG heatmap.

    python3 launch/plot-map.py OUT.h5 MAP.png [--batch B] [--head I]
                               [--width W] [--reduce max|mean]

Keys run along x, queries along y. When M is wider than W pixels, each pixel
column stands for a run of consecutive keys, reduced by max (default: no
peak disappears) or mean (the weight mass); the reduction is written on the
image. Needs python3-h5py and python3-matplotlib (Debian packages).
"""
import argparse
import sys

import h5py
import numpy as np

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def downsample(a, width, how):
    """Columns of a (rows x M) reduced to at most width columns."""
    m = a.shape[1]
    if m <= width:
        return a, 1
    group = -(-m // width)  # ceil
    pad = group * width - m
    if pad:
        fill = -np.inf if how == "max" else np.nan
        a = np.concatenate([a, np.full((a.shape[0], pad), fill)], axis=1)
    a = a.reshape(a.shape[0], -1, group)
    return (np.max(a, axis=2) if how == "max" else np.nanmean(a, axis=2)), group


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("h5")
    ap.add_argument("png")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--head", type=int, default=0,
                    help="index into the map's heads (not the model head)")
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--reduce", choices=("max", "mean"), default="max")
    a = ap.parse_args()
    with h5py.File(a.h5, "r") as f:
        if "attn_map" not in f:
            sys.exit(f"plot-map.py: {a.h5}: no dataset /attn_map (run with --attn-map)")
        d = f["attn_map"]
        if not (0 <= a.batch < d.shape[0] and 0 <= a.head < d.shape[1]):
            sys.exit(f"plot-map.py: {a.h5}: /attn_map has shape {d.shape}; "
                     f"batch {a.batch} or head {a.head} is outside it")
        w = d[a.batch, a.head].astype(np.float64)

        def text(name, default):
            v = f.attrs.get(name, default)
            return v.decode() if isinstance(v, bytes) else str(v)

        i0 = int(text("attn_map_rows", "0:0").split(":")[0])
        head = int(text("attn_map_heads", "0").split(",")[a.head])
    rows, m = w.shape
    img, group = downsample(w, a.width, a.reduce)
    fig, ax = plt.subplots(figsize=(10, max(3.0, min(8.0, 2 + rows / 40))))
    im = ax.imshow(img, aspect="auto", interpolation="nearest", cmap="viridis",
                   extent=(0, m, i0 + rows, i0), vmin=0)
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position i")
    note = f"{group} keys per pixel column, {a.reduce}" if group > 1 else "one key per column"
    ax.set_title(f"attention weights, batch {a.batch}, head {head} ({note})")
    fig.colorbar(im, ax=ax, label="softmax weight")
    fig.tight_layout()
    fig.savefig(a.png, dpi=100)
    print(f"plot-map.py: wrote {a.png} ({rows} queries x {m} keys, {note})")


if __name__ == "__main__":
    main()
