#!/usr/bin/python3
"""sim_study.py: `scaling-study.py --launcher simgrid` (issue 40, part 4).

    sim_study.py RINGATTN_SIM

A tiny simulated study (P = 1, 4, 4 and 16: 1 and 4 simulated nodes of
the fat tree, 1 and 4 ranks per node, exact mode, strong and weak-memory
scaling): every point finishes, each row says it was simulated, in exact
mode, on fat-tree-1024, and passed the fp64 check; strong points keep N0
and the same useful FLOPs, weak-memory ones grow N with P; the bytes sent
across nodes are 0 on one node and not on four; the CSV has the same rows
and the simulation's columns. Then the refusals (exit 2, one line, no
study): an unknown platform, more nodes than it has, --threads 2. No
times are asserted: simulated seconds only have to be positive.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STUDY = os.path.join(HERE, "..", "launch", "scaling-study.py")
SHAPE = ["--heads", "2", "--kv-heads", "1", "--dim", "16", "--causal"]


def study(program, out, extra):
    build = os.path.dirname(program)
    return subprocess.run(
        [sys.executable, STUDY, "--launcher", "simgrid", "--build", build,
         "--repeats", "1", "--reps", "1", "--out-dir", out, *extra, "--",
         *SHAPE], capture_output=True, text=True, timeout=300)


def check_rows(points, n0):
    if len(points) != 8:
        sys.exit(f"FAIL: {len(points)} points, wanted 8")
    for p in points:
        want = {"status": "ok", "simulated": True, "sim_mode": "exact",
                "platform": "fat-tree-1024.xml", "verdict": "PASS",
                "launcher": "simgrid"}
        bad = {k: p.get(k) for k, v in want.items() if p.get(k) != v}
        if bad or not p["seconds"] > 0:
            sys.exit(f"FAIL: point {p['ranks']} {p['scaling']}: {bad}, "
                     f"seconds {p.get('seconds')}")
        seq = n0 if p["scaling"] == "strong" else n0 * p["ranks"]
        if p["seq"] != seq:
            sys.exit(f"FAIL: {p['scaling']} at P={p['ranks']}: N {p['seq']}"
                     f" != {seq}")
        cross = p["cross_node_bytes_total"]
        if (p["nodes"] == 1) != (cross == 0):
            sys.exit(f"FAIL: P={p['ranks']} on {p['nodes']} nodes sent "
                     f"{cross} bytes across nodes")
    flops = {p["flops"] for p in points if p["scaling"] == "strong"}
    if len(flops) != 1:
        sys.exit(f"FAIL: strong scaling's useful FLOPs differ: {flops}")


def refused(program, tmp, extra, want):
    r = study(program, f"{tmp}/refused", extra)
    lines = r.stderr.strip().splitlines()
    if r.returncode != 2 or len(lines) != 1 or want not in lines[0] or \
            os.path.exists(f"{tmp}/refused"):
        sys.exit(f"FAIL: {extra}: exit {r.returncode}, stderr {r.stderr!r},"
                 f" wanted one line with {want!r}")
    print(f"ok   refused: {lines[0]}")


def main():
    program = os.path.abspath(sys.argv[1])
    n0 = 96
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/study"
        r = study(program, out, ["--sim-mode", "exact", "--nodes", "1,4",
                                 "--ranks-per-node", "1,4", "--seq", str(n0),
                                 "--scaling", "strong,weak-memory"])
        if r.returncode != 0:
            sys.exit(f"FAIL: study exit {r.returncode}: {r.stderr.strip()}")
        with open(f"{out}/scaling.json") as f:
            doc = json.load(f)
        meta = doc["meta"]
        if not (meta["simulated"] and meta["sim_mode"] == "exact" and
                meta["platform"].endswith("fat-tree-1024.xml")):
            sys.exit(f"FAIL: meta {meta}")
        check_rows(doc["points"], n0)
        with open(f"{out}/scaling.csv") as f:
            rows = list(csv.DictReader(f))
        if len(rows) != 8 or {r["simulated"] for r in rows} != {"True"} or \
                {r["platform"] for r in rows} != {"fat-tree-1024.xml"}:
            sys.exit(f"FAIL: scaling.csv: {rows[:1]}")
        print("ok   8 simulated points, rows and CSV as a study's")
        refused(program, tmp, ["--platform", f"{tmp}/none.xml"], "none.xml")
        refused(program, tmp, ["--nodes", "2048"], "2048 nodes")
        refused(program, tmp, ["--threads", "2"], "--threads")
    print("PASS sim_study")


if __name__ == "__main__":
    main()
