#!/usr/bin/python3
"""scaling-plot.py: the charts of a scaling study (launch/scaling-study.py).

    launch/scaling-plot.py DIR/scaling.json [--out-dir DIR] [--plan PLAN.json]
                           [--force]

Writes next to the JSON (or into --out-dir):
  scaling-speedup.png     throughput (GFLOP/s) relative to each line's
                          smallest P, against the ideal P / P0
  scaling-efficiency.png  that speed-up over P / P0 (1 = ideal)
  scaling-breakdown.png   the slowest rank's time per point, stacked:
                          compute (fastest rank's kernel time), imbalance
                          (slowest minus fastest kernel time), exposed
                          communication (blocked on the ring), I/O (read +
                          write of `run`, when measured), other
  scaling-comm.png        bytes sent across nodes per pass and exposed wait
  scaling-predicted.png   with --plan (the JSON of `ringattn plan
                          --sweep-nodes LIST --json`): the measured seconds
                          per pass beside the plan's predicted ones, strong
                          and weak, for the study's strategy (ring unless
                          the study names another)
One line per (scaling, ranks per node, threads); P on a base-2 log axis
when it spans 32 times or more; a simulated study's platform and mode in
the titles of the first two. Markers are the median of
the repeats, bars their min and max; hollow red-edged markers are
oversubscribed points (more threads than cores), whose times say nothing
about compute scaling. A point whose every repeat failed is a red cross on
the speed-up and efficiency charts (its reason is in the JSON). Charts
that exist are refused (before any drawing) unless --force. Each PNG is
written under a temporary name and renamed when complete, with the
permissions the umask gives a new file.
Needs python3-matplotlib.
"""
import collections
import json
import os
import statistics
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ra_script import Failed, Parser, Refused, run, write_atomic  # noqa: E402

COLORS = {"compute": "#4c72b0", "imbalance": "#dd8452",
          "exposed comm": "#c44e52", "I/O": "#55a868", "other": "#bbbbbb"}


def save_fig(plt, fig, path):
    """The figure as a PNG at path, whole or not at all (write_atomic), and
    closed."""
    try:
        write_atomic(path, lambda f: fig.savefig(f, dpi=110, format="png"),
                     binary=True)
    finally:
        plt.close(fig)


def groups_of(points):
    """{(scaling, R, T): {P: [points]}} of the finished points; on one node
    count the lines run over ranks per node instead (R is then 0)."""
    ok = [p for p in points if p.get("status") == "ok"]
    one_k = len({p["nodes"] for p in ok}) == 1
    g = collections.defaultdict(lambda: collections.defaultdict(list))
    for p in ok:
        R = 0 if one_k else p["ranks_per_node"]
        g[(p["scaling"], R, p["threads"])][p["ranks"]].append(p)
    return g


def failed_keys(points):
    """The points (scaling, R, T, P) none of whose repeats finished."""
    key = lambda p: (p["scaling"], p["ranks_per_node"], p["threads"],
                     p["ranks"])
    return ({key(p) for p in points if p.get("status") != "ok"} -
            {key(p) for p in points if p.get("status") == "ok"})


def failed_count(points):
    """How many points failed in every repeat (marked on the charts)."""
    return len(failed_keys(points))


def failed_points(points):
    """{P: nodes} of the points that failed in every repeat."""
    keys = failed_keys(points)
    return {p["ranks"]: p["nodes"] for p in points
            if (p["scaling"], p["ranks_per_node"], p["threads"], p["ranks"])
            in keys}


def mark_failed(ax, xs):
    """A red cross on the axis at each failed point's x, labelled once."""
    for i, x in enumerate(sorted(xs)):
        ax.plot([x], [0], "x", color="red", ms=11, mew=2.5, clip_on=False,
                zorder=6, label="failed (reason in scaling.json)"
                if i == 0 else None)
        ax.annotate("failed", (x, 0), textcoords="offset points",
                    xytext=(0, 8), ha="center", fontsize=7, color="red")


def label(key):
    scaling, R, T = key
    where = f"{R} ranks/node" if R else "one node"
    return f"{scaling}, {where}, {T} thread{'s' if T > 1 else ''}"


def series(by_p, value):
    """Sorted P, and median, min, max of value over the repeats."""
    ps = sorted(by_p)
    vals = [[value(p) for p in by_p[P]] for P in ps]
    return (ps, [statistics.median(v) for v in vals],
            [min(v) for v in vals], [max(v) for v in vals])


def p_axis(ax, ps_all, nodes_of):
    """Ticks at the study's P; a base-2 log axis when P spans 32 times or
    more (1 to 1024 nodes would crowd the small P on a linear one)."""
    if max(ps_all) >= 32 * min(ps_all):
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    ax.set_xticks(ps_all)
    ax.set_xticklabels([f"{P}\n({nodes_of[P]} node{'s' if nodes_of[P] > 1 else ''})"
                        for P in ps_all])
    ax.set_xlabel("ranks P (nodes)")
    ax.grid(alpha=0.3)


def mark_oversubscribed(ax, xs, ys, over, color):
    for x, y, o in zip(xs, ys, over):
        if o:
            ax.plot([x], [y], "o", mfc="white", mec="red", mew=1.8, ms=9,
                    zorder=5)


def where_of(meta):
    """' (simulated: PLATFORM, MODE)' for a study of ringattn-sim, else ''."""
    if not meta.get("simulated"):
        return ""
    plat = os.path.basename(str(meta.get("platform")))
    return f" (simulated: {plat}, {meta.get('sim_mode')})"


def plot_lines(plt, groups, failed, nodes_of, ps_all, path, efficiency,
               where):
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, (key, by_p) in enumerate(sorted(groups.items())):
        ps, med, lo, hi = series(by_p, lambda p: p["gflops"])
        base, P0 = med[0], ps[0]
        norm = [(P / P0) if efficiency else 1.0 for P in ps]
        y = [m / base / n for m, n in zip(med, norm)]
        ylo = [yy - l / base / n for yy, l, n in zip(y, lo, norm)]
        yhi = [h / base / n - yy for yy, h, n in zip(y, hi, norm)]
        color = f"C{i}"
        ax.errorbar(ps, y, yerr=[ylo, yhi], marker="o", color=color,
                    capsize=4, label=label(key))
        over = [any(p["oversubscribed"] for p in by_p[P]) for P in ps]
        mark_oversubscribed(ax, ps, y, over, color)
    lo_p, hi_p = min(ps_all), max(ps_all)
    if efficiency:
        ax.axhline(1.0, color="k", ls="--", lw=1, label="ideal")
        ax.set_ylabel("efficiency (speed-up / (P / P0))")
        ax.set_ylim(bottom=0)
    else:
        ax.plot(ps_all, [P / lo_p for P in ps_all], "k--", lw=1,
                label="ideal (P / P0)")
        if hi_p >= 32 * lo_p:  # as the P axis (p_axis)
            ax.set_yscale("log", base=2)
        ax.set_ylabel("throughput speed-up over the line's smallest P")
    ax.plot([], [], "o", mfc="white", mec="red", mew=1.8,
            label="oversubscribed (more threads than cores)")
    mark_failed(ax, failed)
    p_axis(ax, ps_all, nodes_of)
    ax.set_title("scaling-study: " + ("efficiency" if efficiency
                                      else "speed-up") +
                 " (median of repeats, bars min-max)" + where,
                 fontsize=10 if where else None)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_fig(plt, fig, path)


def parts_of(p):
    io = (p.get("io_read_s") or 0.0) + (p.get("io_write_s") or 0.0)
    parts = {"compute": p["compute_s"], "imbalance": p["imbalance_s"],
             "exposed comm": p["exposed_comm_s"], "I/O": io}
    parts["other"] = max(0.0, p["seconds"] + io - sum(parts.values()))
    return parts


def plot_breakdown(plt, groups, path):
    keys = sorted(groups)
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 4.6),
                             squeeze=False)
    for ax, key in zip(axes[0], keys):
        by_p = groups[key]
        ps = sorted(by_p)
        # the repeat whose total is the median stands for the point
        reps = [sorted(by_p[P], key=lambda p: p["seconds"])[
            (len(by_p[P]) - 1) // 2] for P in ps]
        bottom = [0.0] * len(ps)
        for part, color in COLORS.items():
            h = [parts_of(p)[part] for p in reps]
            ax.bar(range(len(ps)), h, bottom=bottom, color=color, label=part)
            bottom = [b + x for b, x in zip(bottom, h)]
        for i, p in enumerate(reps):
            if p["oversubscribed"]:
                ax.text(i, bottom[i], "over-\nsubscribed", ha="center",
                        va="bottom", fontsize=7, color="red")
        ax.set_xticks(range(len(ps)))
        ax.set_xticklabels([f"P={p['ranks']}\nK={p['nodes']}\nN={p['seq']}"
                            for p in reps], fontsize=8)
        ax.set_ylim(top=max(bottom) * 1.25)
        ax.set_title(label(key), fontsize=9)
        ax.set_ylabel("seconds per pass (slowest rank) + I/O")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save_fig(plt, fig, path)


def plot_comm(plt, groups, nodes_of, ps_all, path):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.4))
    for i, (key, by_p) in enumerate(sorted(groups.items())):
        ps, med, lo, hi = series(
            by_p, lambda p: (p["cross_node_bytes_total"] or 0) / 1e6)
        a1.plot(ps, med, marker="o", color=f"C{i}", label=label(key))
        ps, med, lo, hi = series(by_p,
                                 lambda p: 100 * p["comm_wait_fraction"])
        a2.errorbar(ps, med, yerr=[[m - l for m, l in zip(med, lo)],
                                   [h - m for m, h in zip(med, hi)]],
                    marker="o", capsize=4, color=f"C{i}", label=label(key))
        over = [any(p["oversubscribed"] for p in by_p[P]) for P in ps]
        mark_oversubscribed(a2, ps, med, over, f"C{i}")
    a1.set_ylabel("MB sent across nodes per pass (all ranks)")
    a2.set_ylabel("exposed wait, % of the pass (worst rank)")
    a2.set_ylim(bottom=0)
    for ax in (a1, a2):
        p_axis(ax, ps_all, nodes_of)
        ax.legend(fontsize=8)
    a1.set_title("traffic over the network")
    a2.set_title("communication not hidden by compute")
    fig.tight_layout()
    save_fig(plt, fig, path)


def predicted_lines(plan, strategy):
    """{scaling: ([P], [seconds])}: the plan's sweep rows of a strategy, at
    each node count its fastest applicable layout."""
    best = {}
    for r in plan["sweep"]:
        if r["strategy"] != strategy or not r["applies"]:
            continue
        key = (r["scaling"], r["ranks"])
        if key not in best or r["time_s"] < best[key]:
            best[key] = r["time_s"]
    lines = collections.defaultdict(lambda: ([], []))
    for (scaling, P), t in sorted(best.items()):
        lines[scaling][0].append(P)
        lines[scaling][1].append(t)
    return lines


def plot_predicted(plt, groups, plan, strategy, path):
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    pred = predicted_lines(plan, strategy)
    ticks = set()
    for i, (key, by_p) in enumerate(sorted(groups.items())):
        ps, med, lo, hi = series(by_p, lambda p: p["seconds"])
        ax.errorbar(ps, med, yerr=[[m - l for m, l in zip(med, lo)],
                                   [h - m for m, h in zip(med, hi)]],
                    marker="o", capsize=4, color=f"C{i}",
                    label="measured: " + label(key))
        ticks.update(ps)
        kind = "strong" if key[0].startswith("strong") else "weak"
        if kind in pred:
            xs, ys = pred[kind]
            ax.plot(xs, ys, "x--", color=f"C{i}", ms=9,
                    label=f"predicted ({strategy}, {kind})")
            ticks.update(xs)
    ax.set_xticks(sorted(ticks))  # ranks are whole numbers
    ax.set_xlabel("ranks P")
    ax.set_ylabel("seconds per pass")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.set_title("scaling-study against `ringattn plan --sweep-nodes`")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_fig(plt, fig, path)


def chart_paths(out_dir, plan=None):
    """The charts draw() writes into out_dir (with a plan, one more)."""
    names = ["speedup", "efficiency", "breakdown", "comm"]
    names += ["predicted"] if plan is not None else []
    return [os.path.join(out_dir, f"scaling-{n}.png") for n in names]


def draw(meta, points, out_dir, plan=None):
    """Draws the four charts; returns their paths (none without points)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = groups_of(points)
    if not groups:
        return []
    failed = failed_points(points)
    nodes_of = {p["ranks"]: p["nodes"] for p in points
                if p.get("status") == "ok"}
    nodes_of.update(failed)
    ps_all = sorted(nodes_of)
    paths = chart_paths(out_dir, plan)
    where = where_of(meta)
    plot_lines(plt, groups, failed, nodes_of, ps_all, paths[0],
               efficiency=False, where=where)
    plot_lines(plt, groups, failed, nodes_of, ps_all, paths[1],
               efficiency=True, where=where)
    plot_breakdown(plt, groups, paths[2])
    plot_comm(plt, groups, nodes_of, ps_all, paths[3])
    if plan is not None:
        plot_predicted(plt, groups, plan, meta.get("strategy", "ring"),
                       paths[-1])
    return paths


def main(argv):
    ap = Parser(prog="scaling-plot", description=__doc__.split("\n")[0])
    ap.add_argument("json")
    ap.add_argument("--out-dir")
    ap.add_argument("--plan")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    plan = None
    if a.plan:
        try:
            with open(a.plan) as f:
                plan = json.load(f)
            plan["sweep"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise Refused(f"scaling-plot: {a.plan}: not a plan with "
                          f"--sweep-nodes: {e}")
    try:
        with open(a.json) as f:
            data = json.load(f)
        meta, points = data["meta"], data["points"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Refused(f"scaling-plot: {a.json}: not a scaling study: {e}")
    out_dir = a.out_dir or os.path.dirname(os.path.abspath(a.json))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK | os.X_OK):
        raise Refused(f"scaling-plot: --out-dir {out_dir}: not a writable "
                      "folder")
    for path in chart_paths(out_dir, plan):
        if os.path.lexists(path) and not a.force:
            raise Refused(f"scaling-plot: {path}: exists; add --force to "
                          "replace it")
    try:
        paths = draw(meta, points, out_dir, plan)
    except ImportError as e:
        raise Failed(f"scaling-plot: needs python3-matplotlib ({e})")
    except OSError as e:
        raise Failed(f"scaling-plot: writing a chart failed: {e}")
    for p in paths:
        print(f"scaling-plot.py: wrote {p}")
    return 0


if __name__ == "__main__":
    run(main, "scaling-plot")
