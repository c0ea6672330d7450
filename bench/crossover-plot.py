#!/usr/bin/python3
"""crossover-plot.py DIR PNG: exposed ring wait against N/P, one line per
link rate, from DIR/crossover-RATE-nN.json (bench/multinode.sh)."""
import collections
import glob
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        print("usage: crossover-plot.py DIR PNG", file=sys.stderr)
        return 2
    lines = collections.defaultdict(list)
    for path in glob.glob(os.path.join(sys.argv[1], "crossover-*.json")):
        m = re.search(r"crossover-(\w+)-n(\d+)\.json$", path)
        try:
            with open(path) as f:
                r = json.load(f)[0]
        except (OSError, ValueError, IndexError) as e:
            print(f"crossover-plot.py: skipping {path}: {e}", file=sys.stderr)
            continue
        lines[m.group(1)].append((r["seq_q"] // r["ranks"],
                                  100 * r["comm_wait_fraction"]))
    if not lines:
        print("crossover-plot.py: no crossover-*.json", file=sys.stderr)
        return 1
    rate_bits = {"mbit": 1e6, "gbit": 1e9}
    order = sorted(lines, key=lambda k: float(k[:-4]) * rate_bits[k[-4:]])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for rate in order:
        pts = sorted(lines[rate])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                label=f"{rate} per node link")
    ax.axhline(5, color="k", ls="--", lw=1, label="5% target")
    ax.set_xscale("log", base=2)
    xs = sorted({p[0] for v in lines.values() for p in v})
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel("tokens per rank N/P (D = 64, H = 4, 2 fake nodes x 1 rank)")
    ax.set_ylabel("exposed ring wait, % of the pass (worst rank)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(ncol=2)
    ax.set_title("Where communication stops hiding behind compute")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"crossover-plot.py: wrote {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
