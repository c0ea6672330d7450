#!/usr/bin/env python3
"""python_overhead.py: the Python call against the C API (issue 26's targets).

    /usr/bin/python3 bench/python_overhead.py [--build build]
        [--seq 16384] [--heads 4] [--dim 64] [--ranks 2] [--reps 3]
        [--rounds 2]

Runs, --rounds times in alternation (so that a noisy machine weighs on all
alike), with OMP_NUM_THREADS=1 over shared memory:
  1. `mpirun -np P ringattn bench --seq N --heads H --dim D` (the forward
     through the C API, median of --reps timed passes);
  2. `mpirun -np P ringattn bench --backward ...` (ra_backward alone);
  3. this script as P ranks (--worker): ringattn.forward on numpy arrays of
     the same shape, and forward + backward through ringattn.torch.attention
     (autograd), each timed between barriers (slowest rank per pass, median
     of --reps), plus the library's own time inside the Python forward
     (ra_timing.total), which gives the call's overhead in the same process.
Rank 0 prints a '#' echo of the parameters and one row per comparison with
its ratio; the best (lowest) median of the rounds is taken for each.
Exit 0; 2 and one `ringattn:` line on stderr for a bad option (sizes below
1, a --build folder without the command or the package), before anything
runs; 1 and one such line when a measurement fails.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))


def worker(a):
    """One rank of the Python measurement; rank 0 writes the JSON."""
    import numpy as np
    import torch
    from mpi4py import MPI

    import ringattn
    import ringattn.torch as rt

    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(1 + comm.Get_rank())
    n = len(ringattn.owned_positions("auto", a.seq, comm))
    q, k, v, do = (rng.standard_normal((1, n, a.heads, a.dim),
                                       dtype=np.float32) for _ in range(4))

    def timed(fn):
        times, inner = [], []
        for rep in range(a.reps + 1):  # the first pass warms up
            comm.Barrier()
            t0 = time.perf_counter()
            extra = fn()
            t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if rep:
                times.append(t)
                inner.append(comm.allreduce(extra or 0.0, op=MPI.MAX))
        return float(np.median(times)), float(np.median(inner))

    fwd, lib = timed(lambda: ringattn.forward(q, k, v, comm, order="bnhd",
                                              timing=True)[2]["total"])
    ts = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
    dot = torch.from_numpy(do)

    def torch_step():
        rt.attention(*ts, comm, order="bnhd").backward(dot)

    both, _ = timed(torch_step)
    if comm.Get_rank() == 0:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"forward": fwd, "forward_library": lib,
                       "torch_fwd_bwd": both}, f)


class Failed(Exception):
    """A measurement that did not run (its message is the line)."""


def run(cmd, env, what):
    """Runs one measurement (`what` names it); a failure is Failed with
    its exit status and its `ringattn:` message (or last stderr line)."""
    print("+ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, env=env, check=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["no message"]
        said = [x for x in lines if x.startswith("ringattn:")]
        raise Failed(f"{what} exited {done.returncode}: "
                     f"{(said or lines)[-1]}")


def driver(a):
    cli = os.path.join(a.build, "ringattn")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=os.path.join(a.build, "python"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpi = ["mpirun", "-np", str(a.ranks), "--mca", "btl", "self,vader"]
    # --stall-timeout 0: on a loaded machine the watchdog derived from the
    # predicted step ends `bench --backward`, which is no stall
    shape = ["--seq", str(a.seq), "--heads", str(a.heads), "--dim",
             str(a.dim), "--warmup", "1", "--reps", str(a.reps),
             "--stall-timeout", "0"]
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            for name, extra in (("bench", []), ("bench_bwd", ["--backward"])):
                out = os.path.join(tmp, name + ".json")
                run(mpi + [cli, "bench"] + extra + shape + ["--json", out],
                    env, " ".join(["ringattn bench"] + extra))
                with open(out, encoding="utf-8") as f:
                    t = json.load(f)[0]["seconds_median"]
                best[name] = min(best.get(name, t), t)
            out = os.path.join(tmp, "py.json")
            run(mpi + [sys.executable, __file__, "--worker", "--json", out,
                       "--seq", str(a.seq), "--heads", str(a.heads),
                       "--dim", str(a.dim), "--reps", str(a.reps)], env,
                "the Python worker")
            with open(out, encoding="utf-8") as f:
                for key, t in json.load(f).items():
                    best[key] = min(best.get(key, t), t)
    report(a, best)


def report(a, b):
    print(f"# python_overhead: N={a.seq} H={a.heads} D={a.dim} P={a.ranks} "
          f"reps={a.reps} rounds={a.rounds} OMP_NUM_THREADS=1 btl self,vader"
          "; best median of the rounds, seconds")
    rows = [
        ("forward: ringattn.forward / ringattn bench", b["forward"],
         b["bench"]),
        ("forward: Python call / library inside it", b["forward"],
         b["forward_library"]),
        ("fwd+bwd: ringattn.torch.attention / bench + bench --backward",
         b["torch_fwd_bwd"], b["bench"] + b["bench_bwd"]),
    ]
    print(f"{'comparison':<62} {'python_s':>9} {'c_s':>9} {'ratio':>7}")
    for name, py, c in rows:
        print(f"{name:<62} {py:9.4f} {c:9.4f} {py / c:7.4f}")


class Parser(argparse.ArgumentParser):
    """A bad option is one `ringattn:` line on stderr and exit 2."""

    def error(self, message):
        print(f"ringattn: python_overhead: {message}", file=sys.stderr)
        sys.exit(2)


def options(argv):
    """The options, checked before anything runs: sizes >= 1 and a build
    folder holding the command and the package."""
    ap = Parser(prog="python_overhead.py",
                description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    for name, default in (("seq", 16384), ("heads", 4), ("dim", 64),
                          ("ranks", 2), ("reps", 3), ("rounds", 2)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    for name in ("seq", "heads", "dim", "ranks", "reps", "rounds"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} {getattr(a, name)}: must be at least 1")
    if not a.worker and not (
            os.access(os.path.join(a.build, "ringattn"), os.X_OK) and
            os.path.isdir(os.path.join(a.build, "python", "ringattn"))):
        ap.error(f"--build {a.build}: no ringattn command and python/ringattn"
                 " package there (build the project with its Python "
                 "package first)")
    return a


def main(argv):
    """Exit 0 with the table; 2 for a bad option; 1 with one `ringattn:`
    line when a measurement fails (a worker rank's line ends its job)."""
    a = options(argv)
    try:
        (worker if a.worker else driver)(a)
    except Exception as exc:  # a failure of the work: one line, exit 1
        text = str(exc) if isinstance(exc, Failed) else \
            f"{type(exc).__name__}: {exc}"
        print(f"ringattn: python_overhead: {text}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
