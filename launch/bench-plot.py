#!/usr/bin/env python3
"""bench-plot.py: charts from `ringattn bench --json` rows (or a sweep).

    /usr/bin/python3 launch/bench-plot.py rows.json [--out-dir DIR]
                                         [--stem STEM] [--force]

Writes, for whatever the rows contain, into DIR (default .):
  STEM-gflops.png   GFLOP/s and fraction of sgemm against N, one line per
                    (ranks, threads, mode, causal, D)
  STEM-scaling.png  strong scaling efficiency against P at each fixed N
                    (rate at P / (P * rate at the smallest P)), and weak
                    scaling efficiency for rows where N/P is constant
STEM is "bench" by default. A chart that exists is refused (before any
drawing) unless --force. Each PNG is written under a temporary name and
renamed when complete, with the permissions the umask gives a new file.
Exit 0 on success, 2 with one "ringattn:" line for bad input (a missing or
malformed rows file), 1 with one line for a failure while drawing or
writing. Needs python3-matplotlib (Debian package).
"""
import collections
import json
import math
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ra_script import Failed, Parser, Refused, run, write_atomic  # noqa: E402

plt = None  # matplotlib.pyplot, imported in main()

# The fields every row needs, with their types.
FIELDS = {"ranks": int, "threads": int, "mode": str, "causal": bool,
          "dim": int, "seq_q": int, "gflops": float, "sgemm_gflops": float}



def series_key(r):
    return (r["ranks"], r["threads"], r["mode"], r["causal"], r["dim"])


def label(key):
    ranks, threads, mode, causal, dim = key
    return f"P={ranks} T={threads} {mode} D={dim}{' causal' if causal else ''}"


def plot_gflops(rows, out):
    groups = collections.defaultdict(list)
    for r in rows:
        groups[series_key(r)].append(r)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, rs in sorted(groups.items()):
        rs.sort(key=lambda r: r["seq_q"])
        n = [r["seq_q"] for r in rs]
        ax1.plot(n, [r["gflops"] for r in rs], marker="o", label=label(key))
        ax2.plot(n, [r["gflops"] / r["sgemm_gflops"] for r in rs], marker="o",
                 label=label(key))
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N (= M)")
        ax.grid(True, alpha=0.3)
    ax1.set_ylabel("useful GFLOP/s")
    ax1.set_title("ring attention forward")
    ax2.set_ylabel("fraction of same-run sgemm GFLOP/s")
    ax2.set_ylim(0, 1.05)
    ax2.set_title("efficiency against the BLAS yardstick")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110, format="png")
    plt.close(fig)


def plot_efficiency(ax, groups, marker, label):
    """One line per group ({ranks: row}) of two ranks counts or more: the
    rate per rank against the smallest P's (under weak scaling the work
    grows as N^2, so the rate, not the time, is what stays flat)."""
    for key, byp in sorted(groups.items()):
        ps = sorted(byp)
        if len(ps) < 2:
            continue
        base = byp[ps[0]]["gflops"] / ps[0]
        ax.plot(ps, [byp[p]["gflops"] / (p * base) for p in ps],
                marker=marker, label=label(*key))


def plot_scaling(rows, out):
    ring = [r for r in rows if r["mode"] == "ring"]
    by_n = collections.defaultdict(dict)
    weak = collections.defaultdict(dict)
    for r in ring:
        by_n[(r["seq_q"], r["dim"], r["causal"], r["threads"])][r["ranks"]] = r
        weak[(r["seq_q"] // r["ranks"], r["dim"], r["causal"])][r["ranks"]] = r
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    plot_efficiency(ax1, by_n, "o", lambda n, dim, causal, threads:
                    f"N={n} D={dim}{' causal' if causal else ''}")
    plot_efficiency(ax2, weak, "s", lambda npp, dim, causal:
                    f"N/P={npp} D={dim}{' causal' if causal else ''}")
    for ax, title in ((ax1, "strong scaling (fixed N)"),
                      (ax2, "weak scaling (fixed N/P)")):
        ax.set_xlabel("ranks P")
        ax.set_ylabel("parallel efficiency")
        ax.set_ylim(0, 1.15)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        if any(not line.get_label().startswith("_") for line in ax.lines):
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110, format="png")
    plt.close(fig)


def read_rows(path):
    """The rows of a `ringattn bench --json` file, checked field by field."""
    try:
        with open(path) as f:
            rows = json.load(f)
    except OSError as e:
        raise Refused(f"{path}: cannot open: {e.strerror}")
    except (ValueError, UnicodeDecodeError) as e:
        raise Refused(f"{path}: not JSON: {e}")
    if not isinstance(rows, list) or not rows:
        raise Refused(f"{path}: expected a non-empty list of bench rows")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise Refused(f"{path}: row {i}: not an object")
        for name, kind in FIELDS.items():
            v = r.get(name)
            ok = isinstance(v, kind) or (kind is float and isinstance(v, int))
            if not ok or isinstance(v, bool) != (kind is bool):
                raise Refused(f"{path}: row {i}: field {name}: missing or "
                              f"not {kind.__name__}")
        if r["ranks"] < 1 or r["seq_q"] < 1 or not math.isfinite(r["gflops"]) \
                or not r["sgemm_gflops"] > 0:
            raise Refused(f"{path}: row {i}: ranks, seq_q, gflops or "
                          f"sgemm_gflops out of range")
    return rows


def save(draw, rows, path):
    """draw(rows, f) into path, whole or not at all (write_atomic)."""
    write_atomic(path, lambda f: draw(rows, f), binary=True)


def main(argv):
    global plt
    ap = Parser(prog="bench-plot", description=__doc__.splitlines()[0])
    ap.add_argument("json")
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--stem", default="bench")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    rows = read_rows(a.json)
    if not os.path.isdir(a.out_dir):
        raise Refused(f"{a.out_dir}: output directory: No such directory")
    if not os.access(a.out_dir, os.W_OK | os.X_OK):
        raise Refused(f"{a.out_dir}: output directory is not writable")
    if not a.stem or "/" in a.stem:
        raise Refused(f"--stem '{a.stem}': not a file name")
    g = os.path.join(a.out_dir, f"{a.stem}-gflops.png")
    s = os.path.join(a.out_dir, f"{a.stem}-scaling.png")
    for path in (g, s):
        if os.path.lexists(path) and not a.force:
            raise Refused(f"{path}: exists; add --force to replace it")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot
        plt = matplotlib.pyplot
    except ImportError as e:
        raise Failed(f"bench-plot: {e.name or e} is not installed (Debian: "
                     f"python3-matplotlib)")
    try:
        save(plot_gflops, rows, g)
        save(plot_scaling, rows, s)
    except OSError as e:
        raise Failed(f"{a.out_dir}: writing a chart failed: {e.strerror or e}")
    print(f"bench-plot.py: wrote {g} and {s}")


if __name__ == "__main__":
    run(main, "bench-plot")
