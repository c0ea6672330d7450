#!/usr/bin/env python3
"""placement.py: the warning for threads that share cores, through the
command line. usage: placement.py RINGATTN

A rank whose threads have fewer CPUs than threads (here: the process pinned
to one CPU with taskset, as mpirun's default binding does to a rank) must
print exactly one line `ringattn: warning: rank 0 runs 2 threads on 1 CPU`
on stderr and still finish with a passing fp64 check; one thread on one CPU,
and two threads on two CPUs (free, or each bound to its own core with
OMP_PLACES=cores OMP_PROC_BIND=close), must print nothing. Exit 77 (skipped) without
taskset or with fewer than 2 CPUs to give."""
import os
import re
import shutil
import subprocess
import sys

BENCH = ["bench", "--seq", "512", "--heads", "2", "--dim", "16", "--reps",
         "1", "--warmup", "0", "--check-rows", "2", "--no-yardsticks"]


def run(ringattn, cpus, threads, bind):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("OMP_PLACES", None)
    env.pop("OMP_PROC_BIND", None)
    if bind:  # each thread pinned to a core of its own: still 2 CPUs
        env.update(OMP_PLACES="cores", OMP_PROC_BIND="close")
    cmd = ["taskset", "-c", ",".join(map(str, cpus)), ringattn] + BENCH + \
          ["--threads", str(threads)]
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=240)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"FAIL {' '.join(cmd)}: {e}")
        return None


def main():
    if len(sys.argv) != 2:
        print("usage: placement.py RINGATTN", file=sys.stderr)
        return 2
    ringattn = sys.argv[1]
    allowed = sorted(os.sched_getaffinity(0))
    if shutil.which("taskset") is None or len(allowed) < 2:
        print("skipped: needs taskset and 2 CPUs")
        return 77
    warn = re.compile(r"^ringattn: warning: rank 0 runs 2 threads on 1 CPU ")
    cases = [(allowed[:1], 2, 0, True), (allowed[:1], 1, 0, False),
             (allowed[:2], 2, 0, False), (allowed[:2], 2, 1, False)]
    bad = 0
    for cpus, threads, bind, expect in cases:
        r = run(ringattn, cpus, threads, bind)
        if r is None:
            bad += 1
            continue
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        warned = len(lines) == 1 and warn.match(lines[0]) is not None
        ok = (r.returncode == 0 and "PASS" in r.stdout and
              (warned if expect else not lines))
        print(f"{'ok' if ok else 'FAIL':4} {len(cpus)} CPU(s), {threads} "
              f"thread(s){', bound' if bind else ''}: exit {r.returncode}, "
              f"stderr {lines!r}")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
