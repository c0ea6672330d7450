#!/usr/bin/env python3
"""shard_move.py: what contiguous shards cost under causal attention
(issue 41, part 1): the call moving them into the zigzag layout and back,
against a caller that already holds zigzag shards, and against computing
in the contiguous layout itself (unbalanced).

    PYTHONPATH=build/python mpirun -np 2 /usr/bin/python3 \\
        bench/shard_move.py [--seq 16384] [--heads 4] [--dim 64] [--reps 5]

Each variant runs ringattn.forward then ringattn.backward (causal, B = 1)
on the same global q, k, v, dout, cut as it needs: 'auto' (contiguous
shards, moved), 'zigzag' (zigzag shards, nothing moved), 'contiguous'
(contiguous shards computed where they are). Each pass is timed between
barriers on every rank; a row gives the per-pass min / avg / max over the
--reps passes after one warm-up (the slowest rank of each pass), and its
verdict: its o and dq against the zigzag run's, gathered (PASS within
1e-5 of their largest entry). A last row times the moves alone that
'auto' adds to a forward and backward (q, k, v in and o, lse out; q, k,
v, o, lse, dout in and dq, dk, dv out: _shards.Move, as the call makes
them), which a loaded machine's noise on the whole passes can hide.
Rank 0 prints a '#' echo of the parameters and the rows. Exit 0; 2 and
one `ringattn:` line on stderr for a bad option, before anything runs.
"""
import argparse
import sys
import time

import numpy as np

VARIANTS = (("auto", "contiguous shards, moved to zigzag and back"),
            ("zigzag", "zigzag shards held by the caller"),
            ("contiguous", "contiguous shards, computed unbalanced"))


class Parser(argparse.ArgumentParser):
    """A bad option is one `ringattn:` line and exit 2."""

    def error(self, message):
        sys.stderr.write(f"ringattn: shard_move: {message}\n")
        sys.exit(2)


def options():
    p = Parser(prog="shard_move.py", description=__doc__.split("\n")[0])
    for name, default in (("seq", 16384), ("heads", 4), ("dim", 64),
                          ("reps", 5)):
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    for name in ("seq", "heads", "dim", "reps"):
        if getattr(a, name) < 1:
            p.error(f"--{name} {getattr(a, name)}: expected at least 1")
    return a


def run(comm, full, layout, reps):
    """(per-pass seconds, o and dq put back in global order) of one
    variant."""
    from mpi4py import MPI
    import ringattn
    pos = ringattn.owned_positions(layout, full[0].shape[1], comm,
                                   causal=True)
    q, k, v, do = (np.ascontiguousarray(x[:, pos]) for x in full)
    times = []
    for rep in range(reps + 1):  # the first pass warms up
        comm.Barrier()
        t0 = time.perf_counter()
        o, lse = ringattn.forward(q, k, v, comm, order="bnhd",
                                  causal=True, layout=layout)
        dq, _, _ = ringattn.backward(q, k, v, o, lse, do, comm, order="bnhd",
                                     causal=True,
                                     layout=layout)
        t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if rep:
            times.append(t)
    back = [ringattn.unshard(x, layout, comm, causal=True) for x in (o, dq)]
    return np.array(times), back


def moves_alone(comm, full, reps):
    """Per-pass seconds of the 14 row moves 'auto' adds to a causal
    forward and backward (the slowest rank of each pass)."""
    from mpi4py import MPI
    import ringattn
    from ringattn import _options, _shards
    N = full[0].shape[1]
    opts = _options.params({"causal": True})
    move = _shards.Move(comm, N, "contiguous", "zigzag", opts)
    pos = ringattn.owned_positions("auto", N, comm)
    x = np.ascontiguousarray(full[0][:, pos])
    lse = np.ascontiguousarray(x[..., 0].transpose(0, 2, 1))
    wait = _options.stall_timeout({})
    times = []
    for rep in range(reps + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(3 + 5):  # q, k, v; then q, k, v, o, dout in
            y = move.forward(x, 1, wait)
        for _ in range(1 + 3):  # o; then dq, dk, dv out
            move.back(y, 1, wait)
        move.back(move.forward(lse, 2, wait), 2, wait)  # lse in and out
        t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if rep:
            times.append(t)
    return np.array(times)


def main():
    a = options()
    from mpi4py import MPI  # after the options: a bad one starts no MPI
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(7)
    full = [rng.standard_normal((1, a.seq, a.heads, a.dim), np.float32)
            for _ in range(4)]
    results = {name: run(comm, full, name, a.reps) for name, _ in VARIANTS}
    alone = moves_alone(comm, full, a.reps)
    if comm.Get_rank():
        return
    print(f"# shard_move: P {comm.Get_size()}, N {a.seq}, H {a.heads}, "
          f"D {a.dim}, causal, forward + backward, reps {a.reps} (+1 "
          "warm-up), seconds per pass (slowest rank)")
    print(f"# {'layout':<11} {'min':>8} {'avg':>8} {'max':>8} {'vs zigzag':>9}"
          f" {'error':>9}  verdict  what")
    base = results["zigzag"][0].min()
    want = results["zigzag"][1]
    for name, what in VARIANTS:
        t, got = results[name]
        err = max(float(np.abs(g - w).max() / np.abs(w).max())
                  for g, w in zip(got, want))
        print(f"  {name:<11} {t.min():8.3f} {t.mean():8.3f} {t.max():8.3f} "
              f"{t.min() / base:9.2f} {err:9.1e}  "
              f"{'PASS' if err <= 1e-5 else 'FAIL':<7}  {what}")
    print(f"  {'moves':<11} {alone.min():8.3f} {alone.mean():8.3f} "
          f"{alone.max():8.3f} {alone.min() / base:9.2f} {'-':>9}  "
          f"{'-':<7}  the row moves 'auto' adds, alone")


if __name__ == "__main__":
    main()
