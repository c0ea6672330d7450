#!/usr/bin/env python3
"""plot-map.py: render /attn_map of a ringattn output file as a PNG heatmap.

    /usr/bin/python3 launch/plot-map.py OUT.h5 MAP.png [--batch B] [--head H]
                    [--width W] [--reduce max|mean] [--log] [--vmax V] [--force]

Keys run along x, queries along y; --head names a model head the map holds
(run --attn-map-heads). When M is wider than W pixels, each pixel column
stands for a run of consecutive keys, reduced by max (default: no
peak disappears) or mean (the weight mass); the reduction is written on the
image. The PNG is written under a temporary name in its directory and
renamed when complete, with the permissions the umask gives a new file; an
existing MAP.png is replaced only with --force.
Exit 0 on success, 2 with one "ringattn:" line for bad input, 1 with one
line for a failure during the work. Needs python3-h5py and
python3-matplotlib (Debian packages).
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ra_script import Failed, Parser, Refused, run, write_atomic  # noqa: E402



def downsample(np, a, width, how):
    """Columns of a (rows x M) reduced to at most width columns of group
    consecutive keys each: column c holds keys [c * group, (c + 1) * group),
    the last one padded past M (ceil(M / group) * group keys in all)."""
    m = a.shape[1]
    if m <= width:
        return a, 1
    group = -(-m // width)  # ceil
    pad = -(-m // group) * group - m
    if pad:
        fill = -np.inf if how == "max" else np.nan
        a = np.concatenate([a, np.full((a.shape[0], pad), fill)], axis=1)
    a = a.reshape(a.shape[0], -1, group)
    return (np.max(a, axis=2) if how == "max" else np.nanmean(a, axis=2)), group


def check_output(a):
    """The output path: an existing writable directory, not the input, not
    an existing file unless --force."""
    d = os.path.dirname(a.png) or "."
    if not a.png or a.png.endswith("/"):
        raise Refused(f"{a.png}: output path must name a file")
    if not os.path.isdir(d):
        raise Refused(f"{a.png}: output directory {d}: No such directory")
    if not os.access(d, os.W_OK | os.X_OK):
        raise Refused(f"{a.png}: output directory {d} is not writable")
    if os.path.exists(a.png) and os.path.exists(a.h5) and os.path.samefile(a.png, a.h5):
        raise Refused(f"{a.png}: the output is the input file {a.h5}")
    if os.path.isdir(a.png):
        raise Refused(f"{a.png}: output is a directory")
    if os.path.lexists(a.png) and not a.force:
        raise Refused(f"{a.png}: output exists; pass --force to replace it")


def text_attr(f, name, default):
    v = f.attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def read_map(h5py, np, a):
    """The (rows, M) weights of the chosen batch and head, the first query
    row and the model head they belong to."""
    if not os.path.isfile(a.h5):
        raise Refused(f"{a.h5}: cannot open: no such regular file")
    try:
        f = h5py.File(a.h5, "r")
    except OSError as e:
        raise Refused(f"{a.h5}: cannot open as HDF5: {e}")
    with f:
        where = text_attr(f, "out_group", "").rstrip("/") + "/attn_map"
        d = f.get(where)
        if not isinstance(d, h5py.Dataset):
            raise Refused(f"{a.h5}: dataset {where}: not found (run with --attn-map)")
        if d.ndim != 4 or d.dtype.kind != "f":
            raise Refused(f"{a.h5}: dataset /attn_map: expected float (B, heads, rows, M), "
                          f"found {d.dtype} {d.shape}")
        try:
            i0 = int(text_attr(f, "attn_map_rows", "0:0").split(":")[0])
            heads = [int(h) for h in text_attr(f, "attn_map_heads", "0").split(",")]
        except ValueError:
            heads = []
        if len(heads) != d.shape[1]:
            raise Refused(f"{a.h5}: attribute attn_map_rows or attn_map_heads: "
                          f"does not describe /attn_map")
        if a.batch >= d.shape[0]:
            raise Refused(f"{a.h5}: --batch {a.batch}: the map holds batches "
                          f"0..{d.shape[0] - 1}")
        head = heads[0] if a.head is None else a.head
        if head not in heads:
            raise Refused(f"{a.h5}: --head {head}: the map holds model heads "
                          f"{','.join(map(str, heads))} (run --attn-map-heads)")
        try:
            w = d[a.batch, heads.index(head)].astype(np.float64)
        except OSError as e:
            raise Failed(f"{a.h5}: dataset /attn_map: reading failed: {e}")
    if w.size == 0 or not np.all(np.isfinite(w)):
        raise Refused(f"{a.h5}: dataset /attn_map: empty or not finite")
    return w, i0, head


def draw(plt, np, a, w, i0, head):
    """Writes the figure to MAP.png (write_atomic: whole or not at all)."""
    rows, m = w.shape
    img, group = downsample(np, w, a.width, a.reduce)
    vmax = a.vmax if a.vmax is not None else max(float(np.max(w)), 1e-30)
    if a.log:
        # zeros (masked keys) show at the floor instead of vanishing
        from matplotlib.colors import LogNorm
        norm = LogNorm(vmin=vmax * 1e-6, vmax=vmax, clip=True)
        img = np.maximum(img, vmax * 1e-6)
    else:
        from matplotlib.colors import Normalize
        norm = Normalize(vmin=0, vmax=vmax, clip=True)
    fig, ax = plt.subplots(figsize=(10, max(3.0, min(8.0, 2 + rows / 40))))
    # pixel column c covers keys [c * group, (c + 1) * group); the padding
    # past M lies outside the x range
    im = ax.imshow(img, aspect="auto", interpolation="nearest", cmap="viridis",
                   extent=(0, img.shape[1] * group, i0 + rows, i0), norm=norm)
    ax.set_xlim(0, m)
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position i")
    note = f"{group} keys per pixel column, {a.reduce}" if group > 1 else "one key per column"
    ax.set_title(f"attention weights, batch {a.batch}, head {head} ({note})")
    label = "softmax weight" + (" (log scale)" if a.log else "")
    if a.vmax is not None:
        label += f", clipped at {a.vmax:g}"
    fig.colorbar(im, ax=ax, label=label)
    fig.tight_layout()
    try:
        write_atomic(a.png, lambda out: fig.savefig(out, dpi=100, format="png"),
                     binary=True)
    finally:
        plt.close(fig)
    return rows, m, note


def main(argv):
    ap = Parser(prog="plot-map", description=__doc__.splitlines()[0])
    ap.add_argument("h5")
    ap.add_argument("png")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--head", type=int, default=None,
                    help="model head number (default: the map's first head)")
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--reduce", choices=("max", "mean"), default="max")
    ap.add_argument("--log", action="store_true",
                    help="logarithmic colour scale (six decades below the top)")
    ap.add_argument("--vmax", type=float, default=None,
                    help="top of the colour scale (default: the largest weight)")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    if a.batch < 0 or (a.head is not None and a.head < 0) or a.width < 1:
        raise Refused("plot-map: --batch and --head must be >= 0, --width >= 1")
    if a.vmax is not None and not (a.vmax > 0 and a.vmax < float("inf")):
        raise Refused(f"plot-map: --vmax {a.vmax:g} is not a finite number > 0")
    check_output(a)
    # the map is read and checked before matplotlib, the heavy import, so
    # that a bad file or --head is refused at once
    try:
        import h5py
        import numpy as np
    except ImportError as e:
        raise Failed(f"plot-map: {e.name or e} is not installed (Debian: "
                     f"python3-h5py, python3-numpy)")
    w, i0, head = read_map(h5py, np, a)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise Failed(f"plot-map: {e.name or e} is not installed (Debian: "
                     f"python3-matplotlib)")
    try:
        rows, m, note = draw(plt, np, a, w, i0, head)
    except OSError as e:
        raise Failed(f"{a.png}: writing failed: {e.strerror or e}")
    print(f"plot-map.py: wrote {a.png} ({rows} queries x {m} keys, {note})")


if __name__ == "__main__":
    run(main, "plot-map")
