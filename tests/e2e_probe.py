#!/usr/bin/python3
"""e2e_probe.py: `ringattn probe` and `run --progress` through the command
line.

    e2e_probe.py RINGATTN NP probe|progress
    e2e_probe.py RINGATTN 4 multinode FAKE_CLUSTER_SH

  probe      probe at NP ranks writes a profile of this allocation: every
             rate that can be measured here is positive, those that cannot
             (between nodes; within a node at NP = 1) are 0, the memory is
             this machine's, no scratch file is left; `probe --show` reads
             it back and writes it again byte for byte (the round trip).
  progress   run --progress prints step lines whose done counts increase to
             total/total (ring, ring-q, and a strategy without steps);
             a run predicted over 10 s (a profile of a slow kernel) prints
             them without --progress, stderr not a terminal, with lines
             within a step (share of its tiles); a short run without
             --progress, --no-progress and --quiet print none.
  multinode  2 fake nodes of 2 ranks on a 400 Mbit/s link: the rates
             between nodes are measured, below 400 Mbit/s, and below the
             rates within a node. Needs root; exits 77 (skipped) otherwise.
Prints from the test only; exits 1 on the first failed check.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

from e2e_util import ENV

SKIP = 77
RINGATTN = os.path.abspath(sys.argv[1])
NP = int(sys.argv[2])
MODE = sys.argv[3]
STEP = re.compile(r"^ringattn run: step (\d+)/(\d+), ([\d.]+) s elapsed, "
                  r"ETA ([\d.]+) s$")
TICK = re.compile(r"^ringattn run: in step (\d+)/(\d+|\?), (\d+)% of its "
                  r"tiles, ([\d.]+) s elapsed, ETA ")
# A machine profile whose kernel does 10 kFLOP/s: every run is predicted long.
SLOW_PROFILE = {
    "schema": 2, "measured": True, "date": "2026-12-01T00:00:00Z",
    "version": "ringattn", "hosts": "vm", "io_dir": ".", "nodes": 1,
    "ranks": NP, "ranks_per_node": NP, "threads": 1,
    "kernel": [{"D": 16, "Dv": 16, "score": "dot", "flops_per_core": 1e4}],
    "intra": {"latency": 1e-06, "bandwidth": 7.7e9},
    "inter": {"latency": 0, "bandwidth": 0},
    "alltoall_intra": 7.7e9, "alltoall_inter": 0, "allgather_intra": 7.7e9,
    "allgather_inter": 0, "reduce_scatter_intra": 2.6e9,
    "reduce_scatter_inter": 0, "io_read": 9e8, "io_write": 4e8,
    "mem_per_node": 25769803776}


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)
    print(f"ok   {what}", flush=True)


def mpirun(args, np_=None, prefix=(), timeout=300, **kw):
    cmd = ["mpirun", *prefix, "-np", str(np_ or NP), "--oversubscribe",
           RINGATTN] + args
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True,
                          timeout=timeout, **kw)


def ran(r, what):
    if r.returncode != 0:
        raise Failure(f"{what}: exit {r.returncode}\n{r.stderr[-1500:]}")
    return r


# The kernel rates a probe is asked for: every dim, score and precision at
# 1 rank (oneDNN); at 2 ranks (OpenBLAS) every score and precision at one
# dim (the dim is a size, not a path of the engine: the OpenBLAS subset,
# docs/TESTING.md); one of each beyond, and across nodes, where the rates
# that depend on the rank count are the collectives' and the ring steps'
# (a kernel rate is one core's).
KERNELS_ALL = (("32", "64"), ("dot", "gaussian"), ("fp32", "bf16"))
KERNELS_ENGINE = (("64",), ("dot", "gaussian"), ("fp32", "bf16"))
KERNELS_ONE = (("32",), ("dot",), ("fp32",))


def profile_checks(p, nodes, per_node, kernels=KERNELS_ALL):
    """What any measured profile of nodes x per_node ranks must hold."""
    dims, scores, precisions = kernels
    check(p["measured"] is True and p["nodes"] == nodes and
          p["ranks"] == nodes * per_node and p["ranks_per_node"] == per_node,
          f"the allocation: {nodes} node(s) x {per_node} rank(s)")
    want = {(int(d), s, c, pr) for d in dims for s in scores
            for c in ("full", "masked", "band") for pr in precisions}
    check(len(p["kernel"]) == len(want) and
          all(r["flops_per_core"] > 0 for r in p["kernel"]) and
          {(r["D"], r["score"], r["class"], r["precision"])
           for r in p["kernel"]} == want,
          f"a positive kernel rate for each asked dim, score, tile class "
          f"and precision ({', '.join(precisions)})")
    check(len({r["gemm"] for r in p["kernel"]}) == 1 and
          p["kernel"][0]["gemm"] in ("openblas", "onednn"),
          "the rates of this build's tile engine")
    check(p["call_seconds"] > 0 and p["step_seconds"] >= 0 and
          (p["ranks"] > 1 or p["step_seconds"] == 0),
          "the fixed cost of a call; of a ring step only with 2 ranks or "
          "more (0 where the steps measured no slower than one call)")
    check(p["io_read"] > 0 and p["io_write"] > 0, "I/O rates > 0")
    intra = per_node > 1
    for key in ("alltoall_intra", "allgather_intra", "reduce_scatter_intra"):
        check((p[key] > 0) == intra, f"{key} measured iff a node has 2 ranks")
    check((p["intra"]["bandwidth"] > 0) == intra and
          p["intra"]["latency"] >= 0, "ring steps within a node")
    across = nodes > 1
    for key in ("alltoall_inter", "allgather_inter", "reduce_scatter_inter"):
        check((p[key] > 0) == across, f"{key} measured iff 2 nodes")
    check((p["inter"]["bandwidth"] > 0) == across,
          "ring steps between nodes")
    check(p["mem_per_node"] ==
          os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
          "memory per node from sysconf")
    check(len(p["hosts"].split(",")) == nodes, "one host name per node")


def round_trip(work, prefix=()):
    """probe --show reads the profile and writes it again, byte for byte."""
    r = ran(mpirun(["probe", "--show", "p.json", "--out", "p2.json"],
                   cwd=work, prefix=prefix), "probe --show")
    check("kernel (per core)" in r.stdout, "--show prints the table")
    with open(os.path.join(work, "p.json"), "rb") as a, \
            open(os.path.join(work, "p2.json"), "rb") as b:
        check(a.read() == b.read(), "read back and written again: the "
              "same bytes (round trip)")


def plan_warns(work, p):
    """plan warns in one line about a profile probed oversubscribed, and
    says nothing about one that was not."""
    for over in (True, False):
        with open(os.path.join(work, "q.json"), "w") as f:
            json.dump(dict(p, oversubscribed=over), f)
        r = ran(mpirun(["plan", "--profile", "q.json", "--ranks", str(NP)],
                       np_=1, cwd=work), "plan --profile")
        lines = r.stderr.strip().splitlines()
        check(lines == [] if not over else (
            len(lines) == 1 and lines[0].startswith(
                "ringattn: warning: q.json: probed oversubscribed")),
            f"plan with a profile probed oversubscribed={over}: "
            f"{'one warning' if over else 'no warning'} ({lines})")
    os.remove(os.path.join(work, "q.json"))


def plan_classes(work):
    """plan predicts full, causal and windowed runs from the profile's own
    tile classes: finite times, never NaN."""
    for extra in ([], ["--causal"], ["--causal", "--window", "64"]):
        r = ran(mpirun(["plan", "--profile", "p.json", "--ranks", str(NP),
                        "--seq", "1000", "--dim", "64"] + extra, np_=1,
                       cwd=work), "plan " + " ".join(extra))
        ring = [l.split() for l in r.stdout.splitlines()
                if l.split()[:1] == ["ring"]]
        check(ring and all(float(row[3]) > 0 for row in ring) and
              not any(w in r.stdout.lower() for w in ("nan", "inf")),
              f"plan {' '.join(extra) or '(full)'}: finite predicted times "
              f"from the profile's rates ({ring[0][3] if ring else None} s)")


def check_probe(work):
    kernels = {1: KERNELS_ALL, 2: KERNELS_ENGINE}.get(NP, KERNELS_ONE)
    dims, scores, precisions = kernels
    # a precision named twice is measured once
    r = ran(mpirun(["probe", "--out", "p.json", "--dir", work, "--seconds",
                    "2", "--dim", ",".join(dims), "--score", ",".join(scores),
                    "--precision", ",".join(precisions + precisions[:1])],
                   cwd=work), "probe")
    over = NP > (os.cpu_count() or 1)
    warn = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.stdout.count("ringattn probe: wrote p.json") == 1 and
          len(warn) == over and all(l.startswith(
              "ringattn: warning: ") and "oversubscribed" in l
              for l in warn), "rank 0 alone reports; on stderr one "
          "warning line when ranks outnumber the cores, else nothing")
    with open(os.path.join(work, "p.json")) as f:
        p = json.load(f)
    profile_checks(p, 1, NP, kernels)
    yard = r.stdout.split("yardsticks (per core)")[-1].splitlines()
    rows = [l.split() for l in yard[1:] if l.startswith("  ") and
            not l.strip().startswith("(")]
    check(len(rows) == len(p["kernel"]) and all(
        len(x) == 10 and all(c == "-" or float(c) > 0 for c in x[4:])
        for x in rows) and "loop for fp32" in r.stdout,
          "a yardsticks row per kernel rate: the core's loop, oneDNN's "
          "matmul and the products-only rate, with the fractions (issue 44)")
    check(p["oversubscribed"] is over, f"the profile records "
          f"oversubscribed = {over}")
    plan_warns(work, p)
    plan_classes(work)
    check(p["inter"] == {"latency": 0, "bandwidth": 0},
          "no link between nodes on one node")
    check(p["hosts"] == socket.gethostname(), "the host name")
    check(sorted(os.listdir(work)) == ["p.json"], "no scratch file left")
    round_trip(work)


def steps(stderr):
    return [tuple(int(x) for x in STEP.match(l).groups()[:2])
            for l in stderr.splitlines() if STEP.match(l)]


def check_progress(work):
    ran(mpirun(["gen", "--out", "in.h5", "--seq", "512", "--heads", "2",
                "--dim", "16"], np_=1, cwd=work), "gen")
    base = ["run", "--in", "in.h5", "--out", "out.h5", "--force"]
    for strategy, total in (("ring", NP), ("ring-q", NP), ("tree", 1)):
        r = ran(mpirun(base + ["--strategy", strategy, "--progress",
                               "--progress-every", "0.000001"], cwd=work),
                f"run --progress --strategy {strategy}")
        s = steps(r.stderr)
        check(len(s) == total and [d for d, _ in s] ==
              list(range(1, total + 1)) and all(t == total for _, t in s),
              f"{strategy}: lines 1/{total} .. {total}/{total} "
              f"(got {s})")
        check("# progress   on" in r.stdout, f"{strategy}: the parameter "
              "table says progress is on")
    r = ran(mpirun(base + ["--progress", "--progress-every", "1000"],
                   cwd=work), "run --progress (every 1000 s)")
    check(steps(r.stderr) == [(NP, NP)], "a long interval: only the last "
          "line")
    r = ran(mpirun(base, cwd=work), "run")
    check(steps(r.stderr) == [] and "# progress   off" in r.stdout,
          "a short run without --progress: no lines, the table says off")
    with open(os.path.join(work, "slow.json"), "w") as f:
        json.dump(SLOW_PROFILE, f)
    r = ran(mpirun(base + ["--profile", "slow.json", "--progress-every",
                           "0.000001", "--block-kv", "32"], cwd=work),
            "run predicted long")
    ticks = [TICK.match(l) for l in r.stderr.splitlines() if TICK.match(l)]
    check("# progress   on" in r.stdout and steps(r.stderr)[-1:] ==
          [(NP, NP)], "predicted over 10 s, stderr not a terminal: on by "
          "default, up to the last step")
    check(len(ticks) > 0 and all(0 <= int(m.group(3)) <= 100 for m in ticks),
          f"lines within a step ({len(ticks)}), shares in 0..100%")
    r = ran(mpirun(base + ["--profile", "slow.json", "--no-progress"],
                   cwd=work), "run predicted long, --no-progress")
    check(steps(r.stderr) == [] and "# progress   off (--no-progress"
          in r.stdout, "--no-progress: no lines, the table says why")
    r = ran(mpirun(base + ["--progress", "--quiet"], cwd=work),
            "run --progress --quiet")
    check(steps(r.stderr) == [], "--quiet: no lines")


def check_multinode(work, script):
    if os.geteuid() != 0:
        print("SKIP: the fake cluster needs root")
        sys.exit(SKIP)
    sh = lambda *a: subprocess.run([script, *a], capture_output=True,
                                   text=True, timeout=120)
    up = sh("up", "2", "--rate", "400mbit", "--slots", "2")
    try:
        if up.returncode != 0:
            raise Failure("fake-cluster.sh up: " + up.stderr.strip())
        args = sh("mpirun-args").stdout.split() + ["--map-by", "node", "-x",
                                                   "OMP_NUM_THREADS=1"]
        ran(mpirun(["probe", "--out", "p.json", "--dir", work, "--seconds",
                    "3", "--dim", "32", "--score", "dot", "--precision",
                    "fp32"],
                   np_=4, prefix=args, cwd=work), "probe on 2 fake nodes")
        with open(os.path.join(work, "p.json")) as f:
            p = json.load(f)
        profile_checks(p, 2, 2, KERNELS_ONE)
        link = 400e6 / 8
        check(p["inter"]["bandwidth"] < 1.1 * link,
              f"between nodes {p['inter']['bandwidth'] / 1e6:.1f} MB/s, "
              f"within the 400 Mbit/s link ({link / 1e6:.0f} MB/s)")
        for intra, inter in (("intra", "inter"),
                             ("alltoall_intra", "alltoall_inter"),
                             ("allgather_intra", "allgather_inter"),
                             ("reduce_scatter_intra",
                              "reduce_scatter_inter")):
            a, b = p[intra], p[inter]
            if isinstance(a, dict):
                a, b = a["bandwidth"], b["bandwidth"]
            check(b < a, f"{inter} {b / 1e6:.1f} MB/s below {intra} "
                  f"{a / 1e6:.1f} MB/s")
        round_trip(work, prefix=args)
    finally:
        sh("down")


def main():
    work = tempfile.mkdtemp(prefix="ra_probe_")
    try:
        if MODE == "probe":
            check_probe(work)
        elif MODE == "progress":
            check_progress(work)
        elif MODE == "multinode":
            check_multinode(work, os.path.abspath(sys.argv[4]))
        else:
            raise Failure(f"unknown mode {MODE}")
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL {e}")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"e2e_probe {MODE} P={NP}: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
