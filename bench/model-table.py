#!/usr/bin/python3
"""model-table.py DIR: the accuracy table of the performance model from the
files bench/model.sh leaves in DIR (NAME.bench.json, NAME.plan.json,
NAME.pick.json): one row per measured (configuration, strategy) with the
predicted and measured seconds and their ratio, and the two parts apart
(compute with imbalance against the slowest rank's busy time, exposed
communication against the worst rank's wait), the median and worst
|measured/predicted - 1|, and per configuration whether the plan's pick
(over every layout) measured within 10% of the fastest strategy measured.
Markdown on stdout."""
import glob
import json
import os
import statistics
import sys

sys.dont_write_bytecode = True


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    if len(sys.argv) != 2:
        print("usage: model-table.py DIR", file=sys.stderr)
        return 2
    d = sys.argv[1]
    try:
        names = sorted(os.path.basename(p)[:-len(".bench.json")]
                       for p in glob.glob(os.path.join(d, "*.bench.json")))
        errs, picks, lines = [], [], []
        lines.append("| case | P | nodes | causal | N | strategy | predicted s "
                     "| measured s | measured/predicted | compute + imbalance "
                     "s, predicted / measured | exposed comm s, predicted / "
                     "measured |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for name in names:
            bench = load(os.path.join(d, name + ".bench.json"))
            plan = {r["strategy"]: r for r in
                    load(os.path.join(d, name + ".plan.json"))["rows"]}
            meas = {}
            for b in bench:
                p = plan[b["mode"]]
                ratio = b["seconds_median"] / p["time_s"]
                errs.append((abs(ratio - 1), name, b["mode"]))
                meas[b["mode"]] = b["seconds_median"]
                lines.append(
                    f"| {name} | {b['ranks']} | {p['nodes']} | "
                    f"{'yes' if b['causal'] else 'no'} | {b['seq_q']} | "
                    f"{b['mode']} | {p['time_s']:.4f} | "
                    f"{b['seconds_median']:.4f} | {ratio:.2f} | "
                    f"{p['compute_s'] + p['imbalance_s']:.3f} / "
                    f"{b['busy_seconds_max']:.3f} | {p['comm_s']:.3f} / "
                    f"{b['comm_wait_fraction'] * b['seconds_median']:.3f} |")
            pick = load(os.path.join(d, name + ".pick.json"))["best"]
            if len(meas) > 1 and pick and pick["strategy"] in meas:
                fastest = min(meas, key=meas.get)
                ok = meas[pick["strategy"]] <= 1.10 * meas[fastest]
                picks.append((name, pick["strategy"], fastest, ok,
                              meas[pick["strategy"]] / meas[fastest]))
        e = [x[0] for x in errs]
        worst = max(errs)
        print("\n".join(lines))
        print()
        print(f"cases: {len(e)}; median |measured/predicted - 1| = "
              f"{statistics.median(e):.1%}; worst = {worst[0]:.1%} "
              f"({worst[1]}, {worst[2]})")
        print()
        print("| configuration | plan's pick | fastest measured | pick / "
              "fastest | within 10% |")
        print("|---|---|---|---|---|")
        for name, pk, fa, ok, r in picks:
            print(f"| {name} | {pk} | {fa} | {r:.2f} | "
                  f"{'yes' if ok else 'no'} |")
        n_ok = sum(1 for p in picks if p[3])
        print()
        print(f"pick within 10% of the fastest: {n_ok} of {len(picks)}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"model-table.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
