#!/usr/bin/python3
"""e2e_house.py: what issue 24 added to the command line, end to end.

    e2e_house.py RINGATTN NP

  version    `ringattn --version` names the build's commit: a git
             describe id (possibly -dirty) or "unknown".
  gen-f16    `gen --dtype float16` writes /q /k /v /do as float16, each
             value the float32 file's rounded to nearest (numpy's
             astype('f2')); `run` reads it and `verify` passes.
  bench-bwd  `bench --backward --json` prints bench's header and one row of
             mode backward, and writes a JSON list whose row has exactly
             the keys of `bench --json`'s, with verdict PASS.
  gemm-env   RINGATTN_GEMM picks the engine of --gemm auto: bench echoes
             the engine it ran (openblas, onednn when built, the build's
             default unset) with verdict PASS; an explicit --gemm wins over
             it (tests/test_gemm_env.c checks empty and auto); at NP = 1.
  gemm-mixed At NP > 1 with oneDNN built: rank 0 with RINGATTN_GEMM=onednn, the
             others with openblas, is refused at the start (exit 2, one
             line, no output).
Prints from the test only; exits 1 on the first failed check.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

from e2e_util import ENV, mpi, ours

RINGATTN = os.path.abspath(sys.argv[1])
NP = int(sys.argv[2])
SHAPE = ["--seq", "96", "--heads", "2", "--dim", "16"]


def ringattn(work, *args, env=ENV):
    """Runs ringattn at NP ranks in work; exits 1 unless it exits 0."""
    cmd = mpi(NP) + [RINGATTN, *args]
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True,
                       text=True, timeout=240)
    if r.returncode != 0:
        fail(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def fail(what):
    print(f"FAIL {what}", flush=True)
    sys.exit(1)


def check_version(work):
    first = ringattn(work, "--version").splitlines()[0]
    if not re.fullmatch(r"ringattn \S+ \(commit ([0-9a-f]{7,}(-dirty)?|"
                        r"unknown)\)", first):
        fail(f"version: first line {first!r} names no commit")
    print(f"ok   version: {first}")


def check_gen_f16(work):
    ringattn(work, "gen", "--out", "h16.h5", "--dtype", "float16",
             "--backward", *SHAPE)
    ringattn(work, "gen", "--out", "h32.h5", "--backward", *SHAPE)
    with h5py.File(os.path.join(work, "h16.h5"), "r") as h16, \
            h5py.File(os.path.join(work, "h32.h5"), "r") as h32:
        for name in ("q", "k", "v", "do"):
            if h16[name].dtype != np.float16:
                fail(f"gen-f16: /{name} is {h16[name].dtype}")
            want = h32[name][...].astype(np.float16)
            if not np.array_equal(h16[name][...], want):
                fail(f"gen-f16: /{name} is not the float32 values rounded")
    ringattn(work, "run", "--in", "h16.h5", "--out", "o16.h5")
    out = ringattn(work, "verify", "--in", "h16.h5", "--out", "o16.h5")
    if not out.rstrip().endswith("PASS"):
        fail(f"gen-f16: verify: {out.strip()[-200:]}")
    print("ok   gen-f16: /q /k /v /do float16, rounded as numpy; verify PASS")


def table(stdout):
    """The header line and the rows of a bench table."""
    lines = stdout.splitlines()
    header = [l for l in lines if l.startswith("#") and "time_s" in l]
    rows = [l for l in lines if l.strip() and not l.startswith("#")]
    return header, rows


def check_bench_backward(work):
    fwd = ringattn(work, "bench", "--reps", "1", "--json", "f.json", *SHAPE)
    bwd = ringattn(work, "bench", "--backward", "--reps", "1", "--json",
                   "b.json", *SHAPE)
    (fh, _), (bh, brows) = table(fwd), table(bwd)
    if not fh or fh != bh or len(brows) != 1 or \
            brows[0].split()[4] != "backward":
        fail(f"bench-bwd: table {bh} {brows} against bench's {fh}")
    with open(os.path.join(work, "f.json")) as f, \
            open(os.path.join(work, "b.json")) as b:
        frow, brow = json.load(f)[0], json.load(b)
    if len(brow) != 1 or sorted(brow[0]) != sorted(frow):
        fail(f"bench-bwd: JSON keys {sorted(brow[0])} against {sorted(frow)}")
    if brow[0]["mode"] != "backward" or brow[0]["verdict"] != "PASS" or \
            not brow[0]["seconds_median"] > 0:
        fail(f"bench-bwd: JSON row {brow[0]}")
    print("ok   bench-bwd: bench's columns and JSON keys, mode backward, PASS")
    check_peak(fwd, fh, [frow, brow[0]])


def check_peak(stdout, header, rows):
    """The oneDNN peak beside the sgemm: echoed once, a column of the table
    and keys of the JSON, its fraction that of the row's GFLOP/s; n/a and
    null in a build without oneDNN, never a figure."""
    echo = [l for l in stdout.splitlines() if l.startswith("# peak ")]
    cols = header[0].lstrip("#").split() if header else []
    na = len(echo) == 1 and "n/a: this build has no oneDNN" in echo[0]
    for row in rows:
        if na:
            ok = row["peak_gflops"] is None and row["fraction_of_peak"] is None
        else:
            ok = row["peak_gflops"] > 0 and abs(
                row["fraction_of_peak"] - row["gflops"] / row["peak_gflops"]) \
                < 1e-3
        if len(echo) != 1 or cols[13:15] != ["peak", "f_peak"] or not ok:
            fail(f"bench-peak: echo {echo}, columns {cols[13:15]}, row "
                 f"{row.get('peak_gflops')} {row.get('fraction_of_peak')}")
    print(f"ok   bench-peak: the oneDNN peak column "
          f"({'n/a without oneDNN' if na else 'measured'}) in the table, "
          f"the echo and the JSON of bench and bench --backward")
    check_core_products(stdout, cols, rows)


def check_core_products(stdout, cols, rows):
    """The core's physical peak (the loop named in the echo, or n/a naming
    what the core lacks) and the products-only rate: columns of the table,
    keys of the JSON, each fraction that of the row's GFLOP/s (issue 44)."""
    core = [l for l in stdout.splitlines() if l.startswith("# core ")]
    na = len(core) == 1 and "n/a: this core has no" in core[0]
    for row in rows:
        ok = cols[-4:] == ["core", "f_core", "prod", "f_prod"]
        for key, frac in (("core_peak_gflops", "fraction_of_core_peak"),
                          ("products_gflops", "fraction_of_products")):
            if key == "core_peak_gflops" and na:
                ok &= row[key] is None and row[frac] is None
            else:
                ok &= row[key] > 0 and abs(
                    row[frac] - row["gflops"] / row[key]) < 1e-3
        if len(core) != 1 or not ok:
            fail(f"bench-core: echo {core}, columns {cols[-4:]}, row "
                 f"{[row.get(k) for k in ('core_peak_gflops', 'products_gflops')]}")
    print(f"ok   bench-core: the core's peak ({core[0].split()[2]} loop) and "
          "the products-only rate, columns and JSON keys, bench and "
          "bench --backward")


def check_no_yardsticks(work):
    """--no-yardsticks: neither yardstick runs; the echo says so, their
    four columns read n/a and their JSON keys null (never 0 or inf), in
    bench and bench --backward."""
    for extra in ([], ["--backward"]):
        out = ringattn(work, "bench", *extra, "--reps", "1",
                       "--no-yardsticks", "--json", f"n{len(extra)}.json",
                       *SHAPE)
        header, rows = table(out)
        echo = [l for l in out.splitlines() if l.startswith("# yardsticks")]
        cols = header[0].lstrip("#").split() if header else []
        cells = rows[0].split()[11:15] if len(rows) == 1 else []
        with open(os.path.join(work, f"n{len(extra)}.json")) as f:
            row = json.load(f)[0]
        keys = ("sgemm_gflops", "fraction_of_sgemm", "peak_gflops",
                "fraction_of_peak")
        if len(echo) != 1 or "not measured (--no-yardsticks)" not in echo[0] \
                or any(l.startswith(("# sgemm", "# peak")) for l in
                       out.splitlines()) or cols[11:15] != \
                ["sgemm", "ratio", "peak", "f_peak"] or \
                cells != ["n/a"] * 4 or any(row[k] is not None for k in keys) \
                or row["verdict"] != "PASS":
            fail(f"no-yardsticks {extra}: echo {echo}, cells {cells}, JSON "
                 f"{[row.get(k) for k in keys]}")
    print("ok   bench --no-yardsticks: echo, n/a cells and null keys, in "
          "bench and bench --backward")


def bench_engine(work, gemm_env, *args):
    """The engine bench echoes under RINGATTN_GEMM=gemm_env (None: unset),
    its one row PASS and its JSON row naming the same engine (gemm)."""
    env = {k: v for k, v in ENV.items() if k != "RINGATTN_GEMM"}
    if gemm_env is not None:
        env["RINGATTN_GEMM"] = gemm_env
    js = os.path.join(work, "engine.json")
    out = ringattn(work, "bench", "--reps", "1", "--warmup", "0",
                   "--no-yardsticks", *args, *SHAPE, "--json", js, env=env)
    echo = [l.split() for l in out.splitlines() if l.startswith("# gemm ")]
    _, rows = table(out)
    with open(js) as f:
        recorded = [r.get("gemm") for r in json.load(f)]
    os.remove(js)
    if len(echo) != 1 or len(rows) != 1 or "PASS" not in rows[0].split() or \
            recorded != [echo[0][2]]:
        fail(f"gemm-env {gemm_env} {args}: echo {echo}, rows {rows}, JSON "
             f"gemm {recorded}")
    return echo[0][2]


def check_gemm_env(work):
    built = subprocess.run(["mpirun", "-np", "1", RINGATTN, "bench", "--gemm",
                            "onednn", "--help"], env=ENV, capture_output=True)
    onednn = built.returncode == 0
    default = "onednn" if onednn else "openblas"
    want = [(None, (), default), ("openblas", (), "openblas"),
            ("openblas", ("--gemm", "auto"), "openblas")]
    if onednn:
        want += [("onednn", (), "onednn"),
                 ("onednn", ("--gemm", "openblas"), "openblas"),
                 ("openblas", ("--gemm", "onednn"), "onednn")]
    for gemm_env, args, engine in want:
        got = bench_engine(work, gemm_env, *args)
        if got != engine:
            fail(f"gemm-env: RINGATTN_GEMM={gemm_env} {args}: bench ran "
                 f"{got}, not {engine}")
    # run's parameter table names the engine it ran
    ringattn(work, "gen", "--out", "engine.h5", *SHAPE)
    for gemm_env, engine in (("openblas", "openblas"), (None, default)):
        env = {k: v for k, v in ENV.items() if k != "RINGATTN_GEMM"}
        if gemm_env:
            env["RINGATTN_GEMM"] = gemm_env
        out = ringattn(work, "run", "--in", "engine.h5", "--out",
                       "engine-out.h5", "--force", env=env)
        echo = [l.split() for l in out.splitlines() if l.startswith("# gemm ")]
        if [e[2] for e in echo] != [engine]:
            fail(f"gemm-env: run under RINGATTN_GEMM={gemm_env}: table "
                 f"says {echo}, not {engine}")
    for name in ("engine.h5", "engine-out.h5"):
        os.remove(os.path.join(work, name))
    print(f"ok   gemm-env: RINGATTN_GEMM picks the engine of --gemm auto "
          f"(default {default}); --gemm wins over it; bench's JSON and "
          f"run's table name it")


def check_gemm_mixed(work):
    """With oneDNN built, RINGATTN_GEMM is the job's: rank 0 on onednn and the others on
    openblas (each node gets its own environment) is refused at the start,
    exit 2, one line, whatever --gemm says, and no output is written."""
    built = subprocess.run(["mpirun", "-np", "1", RINGATTN, "bench", "--gemm",
                            "onednn", "--help"], env=ENV, capture_output=True)
    if built.returncode != 0:
        print("ok   gemm-mixed: skipped, one engine in this build")
        return
    env = {k: v for k, v in ENV.items() if k != "RINGATTN_GEMM"}
    argv = [RINGATTN, "run", "--in", "mixed_in.h5", "--out", "mixed_out.h5",
            "--gemm", "openblas"]
    ringattn(work, "gen", "--out", "mixed_in.h5", *SHAPE)
    r = subprocess.run(["mpirun", "--oversubscribe", "-np", "1", "-x",
                        "RINGATTN_GEMM=onednn"] + argv +
                       [":", "-np", str(NP - 1), "-x",
                        "RINGATTN_GEMM=openblas"] + argv,
                       cwd=work, env=env, capture_output=True, text=True)
    said = ours(r.stderr)
    want = ("ringattn: RINGATTN_GEMM: the ranks run different tile engines "
            "(openblas on some, onednn on others): set it alike on every "
            "node (mpirun -x RINGATTN_GEMM)")
    # before any work: no parameter table (printed before the read)
    if r.returncode != 2 or said != [want] or r.stdout.strip() or \
            os.path.exists(os.path.join(work, "mixed_out.h5")):
        fail(f"gemm-mixed: exit {r.returncode}, lines {said}, stdout "
             f"{r.stdout[:200]!r}, files {os.listdir(work)}")
    print("ok   gemm-mixed: ranks on different engines refused before any "
          "work, exit 2, one line, no output")


def main():
    work = tempfile.mkdtemp(prefix="ra_house_")
    try:
        check_version(work)
        check_gen_f16(work)
        check_bench_backward(work)
        check_no_yardsticks(work)
        if NP == 1:
            check_gemm_env(work)
        else:
            check_gemm_mixed(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
