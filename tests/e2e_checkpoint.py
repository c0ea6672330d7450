#!/usr/bin/env python3
"""e2e_checkpoint.py: run --checkpoint and --resume through the command
line (docs/CHECKPOINT.md), checked with h5py.

usage: e2e_checkpoint.py RINGATTN NP quick | loop N

quick, on an input of packed segments: forward (causal, RoPE, ALiBi),
backward (window, bf16) and forward on strategy ring-q (causal) each
stopped by SIGUSR1 at their first boundary (exit 3) and resumed to
bitwise the /o and /lse (/dq /dk /dv) of the run never stopped; the
refusals of --resume, each exit 2 and one line naming what differs (an
option, P, the input, a corrupt file, other steps, no checkpoint); a
rank killed (SIGKILL) while a checkpoint is being written, and a full
disk during one (a small tmpfs: skipped by name where it cannot be
mounted), each leave the previous checkpoint whole and alone, and the
run resumes from it bitwise.
loop N: N runs, each signalled at a random moment (SIGUSR1 to mpirun,
which passes it on, or SIGTERM to every rank, as a batch system ends a
step) and resumed as often as it takes: every output bitwise the
reference's.
"""
import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

import e2e_util
from e2e_util import launch, mpi, ours

RINGATTN, NP, MODE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# signalled runs keep Open MPI's default grace between SIGTERM and SIGKILL
ENV = {k: v for k, v in e2e_util.ENV.items()
       if k != "OMPI_MCA_odls_base_sigkill_timeout"}
FAILED = []


def check(ok, what):
    print(f"# P={NP} {what}: {'PASS' if ok else 'FAIL'}", flush=True)
    if not ok:
        FAILED.append(what)


def mpirun(np_, args):
    return mpi(np_) + [RINGATTN, "run"] + args


def run(args, np_=NP):
    """ringattn run args at np_ ranks; the CompletedProcess, unchecked."""
    return launch(mpirun(np_, args), env=ENV, timeout=600)


def same(a, b, names):
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        return all(np.array_equal(fa[n][()], fb[n][()]) for n in names)


def ranks_of(proc):
    """The pids of mpirun's ranks (its children named ringattn)."""
    out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                         text=True).stdout.split()
    pids = []
    for p in out:
        try:
            if open(f"/proc/{p}/comm").read().strip() == "ringattn":
                pids.append(int(p))
        except OSError:
            pass  # gone meanwhile
    return pids


def kill(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def start(args):
    return subprocess.Popen(mpirun(NP, args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def wait_for(cond, proc, limit=300.0):
    t0 = time.time()
    while not cond() and proc.poll() is None and time.time() - t0 < limit:
        time.sleep(0.005)
    return cond()


def catching_usr1(proc):
    """The pids of proc's ranks once all NP of them have a SIGUSR1
    handler (/proc's SigCgt), else []."""
    pids = ranks_of(proc)
    bit = 1 << (signal.SIGUSR1 - 1)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                cgt = [l for l in f if l.startswith("SigCgt:")]
        except OSError:
            return []
        if not cgt or not int(cgt[0].split()[1], 16) & bit:
            return []
    return pids if len(pids) == NP else []


def stop_after_first(args, ck):
    """Runs args with --checkpoint ck,0 and SIGUSR1 to its ranks as soon
    as all of them catch it: the pass stops at its first boundary (saved
    there, exit 3) however fast or loaded the machine is; returns (exit
    status, stderr lines)."""
    p = start(args + ["--checkpoint", ck + ",0"])
    if wait_for(lambda: catching_usr1(p), p):
        for pid in catching_usr1(p):
            kill(pid, signal.SIGUSR1)
    _, err = p.communicate(timeout=600)
    return p.returncode, ours(err)


def resume_case(d, name, args, outs):
    """One pass stopped after its first checkpoint and resumed."""
    ref, out, ck = (os.path.join(d, name + s) for s in
                    (".ref.h5", ".out.h5", ".ck"))
    os.mkdir(ck)
    r = run(args + ["--out", ref])
    code, err = stop_after_first(args + ["--out", out, "--force"], ck)
    stopped = code == 3 and len(err) == 1 and "--resume" in err[0]
    r2 = run(args + ["--out", out, "--force", "--resume", ck])
    check(r.returncode == 0 and stopped and r2.returncode == 0 and
          same(ref, out, outs) and not os.path.exists(
              os.path.join(ck, "checkpoint.h5")),
          f"{name}: stopped (exit {code}), resumed, bitwise")
    return ck, ref


def refusals(d, args, ck):
    """--resume refused before any work: exit 2, one line naming what."""
    other = os.path.join(d, "other.h5")
    subprocess.run([RINGATTN, "gen", "--seq", "3000", "--heads", "4",
                    "--dim", "32", "--seed", "9", "--segments", "400",
                    "--out", other],
                   capture_output=True, check=True)
    path = os.path.join(ck, "checkpoint.h5")
    code, _ = stop_after_first(args + ["--out", os.path.join(d, "x.h5")], ck)
    keep = os.path.join(d, "keep.h5")
    shutil.copy(path, keep)
    cases = [("other options", args[:-1], NP, "num.causal"),
             ("other input", ["--in", other] + args[2:], NP,
              "other input data"),
             ("other P", args, NP + 1, "ranks")]
    for what, a, np_, word in cases:
        r = run(a + ["--out", os.path.join(d, "y.h5"), "--force",
                     "--resume", ck], np_)
        said = ours(r.stderr)
        check(r.returncode == 2 and len(said) == 1 and word in said[0],
              f"refused, {what}: {said[:1]}")
    with h5py.File(path, "r+") as f:
        f["state_o"][3] += 1.0
    r = run(args + ["--out", os.path.join(d, "y.h5"), "--force", "--resume",
                    ck])
    check(r.returncode == 2 and "corrupt" in " ".join(ours(r.stderr)),
          f"refused, corrupt checkpoint: {ours(r.stderr)[:1]}")
    shutil.copy(keep, path)
    with h5py.File(path, "r+") as f:  # as another hybrid group size makes
        f.attrs["steps"] = f.attrs["steps"] + 2
    r = run(args + ["--out", os.path.join(d, "y.h5"), "--force", "--resume",
                    ck])
    check(r.returncode == 2 and "steps" in " ".join(ours(r.stderr)),
          f"refused, a pass of other steps: {ours(r.stderr)[:1]}")
    r = run(args + ["--out", os.path.join(d, "y.h5"), "--force", "--resume",
                    d])
    check(r.returncode == 2 and "no checkpoint" in " ".join(ours(r.stderr)),
          f"refused, no checkpoint: {ours(r.stderr)[:1]}")
    shutil.copy(keep, path)
    return code


def kill_in_write(d, args, ref):
    """SIGKILL of one rank while a checkpoint is being written: the
    previous one stays whole and resumes bitwise."""
    ck = os.path.join(d, "kill.ck")
    os.mkdir(ck)
    path = os.path.join(ck, "checkpoint.h5")
    out = os.path.join(d, "kill.h5")
    p = start(args + ["--out", out, "--checkpoint", ck + ",0"])
    wait_for(lambda: os.path.exists(path), p)
    writing = lambda: glob.glob(os.path.join(ck, ".checkpoint.h5.tmp.*"))
    killed = wait_for(writing, p) and p.poll() is None
    if killed:
        kill(ranks_of(p)[-1], signal.SIGKILL)
    p.communicate(timeout=600)
    r = run(args + ["--out", out, "--force", "--resume", ck])
    check(killed and p.returncode != 0 and r.returncode == 0 and
          same(ref, out, ["o", "lse"]),
          f"a rank killed in a checkpoint write (exit {p.returncode}): "
          f"the previous checkpoint resumed bitwise")


def full_disk(d, args, ref, size):
    """A checkpoint dir on a tmpfs with room for one checkpoint of size
    bytes and a half: the second checkpoint's temporary file runs out of
    space. The run stops with exit 1 and one line naming the file (or
    goes on to a whole output), the first checkpoint stays alone and
    whole, and resumes bitwise."""
    full, out = os.path.join(d, "full"), os.path.join(d, "full.h5")
    ck, kept = os.path.join(full, "ck"), os.path.join(d, "full.ck")
    os.mkdir(full)
    kb = (size * 3 // 2 + (256 << 10)) // 1024
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kb}k", "tmpfs",
                        full], capture_output=True, text=True)
    if m.returncode != 0:
        print(f"# P={NP} full disk: SKIPPED (no tmpfs: "
              f"{m.stderr.strip()})", flush=True)
        return
    try:
        os.mkdir(ck)
        r = run(args + ["--out", out, "--checkpoint", ck + ",0"])
        left = sorted(os.listdir(ck))
        with h5py.File(os.path.join(ck, "checkpoint.h5"), "r") as f:
            step = int(f.attrs["step"])
        shutil.copytree(ck, kept)
    finally:
        if subprocess.run(["umount", full]).returncode != 0:
            subprocess.run(["umount", "-l", full])
    said = ours(r.stderr)
    stopped = (r.returncode == 1 and len(said) == 1 and
               "checkpoint" in said[0])
    r2 = run(args + ["--out", out, "--force", "--resume", kept])
    check((stopped or r.returncode == 0) and left == ["checkpoint.h5"] and
          step == 1 and r2.returncode == 0 and same(ref, out, ["o", "lse"]),
          f"a full disk in the second checkpoint (exit {r.returncode}, "
          f"{said[:1]}): the first alone ({left}, step {step}), "
          f"resumed bitwise")


def quick(d):
    inp = os.path.join(d, "in.h5")
    subprocess.run([RINGATTN, "gen", "--seq", "3000", "--heads", "4",
                    "--dim", "32", "--backward", "--segments", "400",
                    "--out", inp],
                   capture_output=True, check=True)
    fwd = ["--in", inp, "--rope", "half", "--alibi", "--layout", "striped",
           "--causal"]
    ck, ref = resume_case(d, "forward", fwd, ["o", "lse"])
    bwd = ["--backward", "--in", inp, "--recompute", "--window", "300,20",
           "--precision", "bf16"]
    resume_case(d, "backward", bwd, ["dq", "dk", "dv"])
    rq = ["--in", inp, "--strategy", "ring-q", "--causal"]
    resume_case(d, "ring-q", rq, ["o", "lse"])
    shutil.rmtree(ck)
    os.mkdir(ck)
    refusals(d, fwd, ck)
    kill_in_write(d, fwd, ref)
    full_disk(d, fwd, ref, os.path.getsize(os.path.join(d, "keep.h5")))


def checkpoint_step(ck):
    """The step of the checkpoint in ck, -1 without one."""
    path = os.path.join(ck, "checkpoint.h5")
    if not os.path.exists(path):
        return -1
    with h5py.File(path, "r") as f:
        return int(f.attrs["step"])


def loop(d, n):
    inp, ref = os.path.join(d, "in.h5"), os.path.join(d, "ref.h5")
    subprocess.run([RINGATTN, "gen", "--seq", "4000", "--heads", "4",
                    "--dim", "32", "--out", inp], capture_output=True,
                   check=True)
    args = ["--in", inp, "--causal", "--layout", "zigzag"]
    t0 = time.time()
    run(args + ["--out", ref])
    span = time.time() - t0
    rng = random.Random(43)
    stops = equal = hangs = unfinished = 0
    for i in range(n):
        ck, out = os.path.join(d, f"ck{i}"), os.path.join(d, f"o{i}.h5")
        os.mkdir(ck)
        resume, reached, grow = [], -1, 1.0
        for _ in range(20):
            p = start(args + ["--out", out, "--force", "--checkpoint",
                              ck + ",0"] + resume)
            # a start that saved nothing new (a loaded machine's start-up
            # outlasting the wait) waits twice as long the next time
            try:
                p.wait(timeout=rng.uniform(0.2, 1.0) * span * grow)
            except subprocess.TimeoutExpired:
                pass
            if p.poll() is None and rng.random() < 0.5:
                p.send_signal(signal.SIGUSR1)  # mpirun passes it on
            elif p.poll() is None:  # as a batch system ends a step
                for pid in ranks_of(p):
                    kill(pid, signal.SIGTERM)
            try:
                p.communicate(timeout=20 * span + 60)
            except subprocess.TimeoutExpired:
                # Open MPI 4's mpirun, seen here: its ranks have exited
                # (zombies) and it never reaps them. Counted, not hidden.
                hangs += 1
                p.kill()
                p.communicate()
            if p.returncode == 0:
                break
            stops += p.returncode == 3
            step = checkpoint_step(ck)
            grow = 1.0 if step > reached else 2 * grow
            reached = max(reached, step)
            if step >= 0:
                resume = ["--resume", ck]
        unfinished += p.returncode != 0
        equal += p.returncode == 0 and same(ref, out, ["o", "lse"])
        shutil.rmtree(ck)
        if os.path.exists(out):
            os.remove(out)
    check(equal == n, f"{n} runs signalled at random moments ({stops} "
          f"stops, {hangs} mpirun hangs after its ranks exited, "
          f"{unfinished} not done after 20 starts), every output bitwise "
          f"the reference's: {equal}")


def main():
    d = tempfile.mkdtemp(prefix="ra-ckpt-")
    try:
        t0 = time.time()
        if MODE == "quick":
            quick(d)
        else:
            loop(d, int(sys.argv[4]))
        print(f"# {MODE}: {time.time() - t0:.1f} s")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
