#!/usr/bin/python3
"""scaling-study.py: `ringattn bench` (and optionally `run`) across node
counts, ranks per node and threads per rank; strong and weak scaling.

    launch/scaling-study.py --launcher fake|hostfile|slurm|local|simgrid
        [--nodes 1,2,3,4] [--ranks-per-node 2] [--threads 1]
        [--scaling strong,weak-memory,weak-work] [--seq N0] [--repeats 3]
        [--io] [--out-dir DIR] [--force] [--timeout S] [--rate 1gbit]
        [--hostfile FILE] [--build DIR] [--platform FILE|NAME]
        [--sim-mode exact|scale] [-- BENCH_OPTIONS...]

Launchers:
  fake      launch/fake-cluster.sh (root): K fake nodes at --rate per link,
            ranks dealt round-robin (mpirun --map-by node); the study
            holds the fake cluster's lock throughout, waiting (and saying
            so) while another user holds it
  hostfile  mpirun on the first K hosts of --hostfile, --ranks-per-node each
  slurm     srun --nodes K --ntasks-per-node R --cpus-per-task T inside an
            allocation (salloc/sbatch) of at least max(K) nodes
  local     mpirun on this machine (one node; K must be 1)
  simgrid   ringattn-sim (the engine under SimGrid SMPI, docs/SIMULATION.md)
            through launch/ringattn-sim.sh on K simulated nodes of
            --platform (a file, or a name of launch/sim/platforms/: default
            fat-tree-1024), R ranks each, one thread per rank; --sim-mode
            exact (kernels run, output checked against fp64) or scale
            (kernel time injected, buffers folded; the default). The
            program is DIR/sim/ringattn-sim (or DIR/ringattn-sim, as
            `launch/setup.sh --sim DIR` builds it) of --build; BENCH_OPTIONS are
            ringattn-sim's (--heads, --dim, --causal, --strategy, ...).
            Every row says "simulated": true, its sim_mode and platform;
            times are simulated seconds.
Scaling (named in every output row):
  strong       N = N0 at every P
  weak-memory  N = N0 * P / P0: fixed memory per rank (N/P constant)
  weak-work    N = N0 * sqrt(P / P0): fixed work per rank (N^2/P constant)
P0 is the smallest P of the study. MPIRUN_FLAGS adds site flags to the
hostfile and local launchers' mpirun; RINGATTN_GEMM, when set, reaches
every node (mpirun -x; srun passes the environment), and each row names
the tile engine and precision that ran. BENCH_OPTIONS go to every bench
(e.g. --heads 4 --dim 64 --causal). An --out-dir that holds a study's
outputs already (scaling.json, scaling.csv, its charts) is refused before
the study unless --force. Every point is appended to
DIR/scaling.json and DIR/scaling.csv as soon as it finishes, so a failed or
timed-out point never loses the others; the charts (speed-up against ideal,
efficiency, time breakdown) are drawn at the end from whatever finished.
A failed point keeps its row, with the failure's own message whole (the
`ringattn:` line of the command), and is marked on the charts. As root, the
launchers' mpirun gets Open MPI's OMPI_ALLOW_RUN_AS_ROOT variables, as
ringattn-mpirun.sh gives them. Where ranks (times threads) outnumber a
node's cores, one `ringattn: warning:` line on stderr names the points;
their rows and markers say oversubscribed.
Exit status: 0 when every point finished, 1 when some failed, 2 on bad
options.
"""
import argparse
import csv
import datetime
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, HERE)
from ra_script import (  # noqa: E402
    FakeClusterLock, Failed, Parser, Refused, run, write_atomic)
FAKE = os.path.join(HERE, "fake-cluster.sh")
# Open MPI refuses to start as root without these (ringattn-mpirun.sh sets
# them too); other MPIs ignore them.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
REASON_CHARS = 300  # the longest failure reason a row keeps
CSV_FIELDS = [
    "scaling", "nodes", "ranks_per_node", "threads", "ranks", "seq", "repeat",
    "seconds", "gflops", "compute_s", "imbalance_s", "exposed_comm_s",
    "io_read_s", "io_write_s", "comm_wait_fraction", "bytes_sent",
    "cross_node_bytes_total", "ring_gbps", "oversubscribed", "launcher",
    "link_rate", "ring_order", "layout", "score", "causal", "precision",
    "gemm", "verdict", "status", "simulated", "sim_mode", "platform",
]
SIM = os.path.join(HERE, "ringattn-sim.sh")
PLATFORMS = os.path.join(HERE, "sim", "platforms")


class StudyError(Refused):
    """A problem that stops the study (bad options, no launcher): exit 2."""


def parse_ints(text, what):
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise StudyError(f"{what}: '{text}' is not a comma-separated list "
                         "of integers")
    if not vals or min(vals) < 1:
        raise StudyError(f"{what}: '{text}' needs positive integers")
    return vals


def options(argv):
    ap = Parser(
        prog="scaling-study", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launcher", required=True,
                    choices=["fake", "hostfile", "slurm", "local",
                             "simgrid"])
    ap.add_argument("--nodes", default="1,2,3,4")
    ap.add_argument("--ranks-per-node", default="2")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--scaling", default="strong,weak-memory")
    ap.add_argument("--seq", type=int, default=4096,
                    help="N0, the length at the smallest P (default 4096)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="bench runs per point, for min-max bars (3)")
    ap.add_argument("--reps", type=int, default=3,
                    help="timed passes inside each bench run (median)")
    ap.add_argument("--io", action="store_true",
                    help="also gen + run a file per point for I/O times")
    ap.add_argument("--out-dir", default="scaling-study")
    ap.add_argument("--force", action="store_true",
                    help="replace the outputs of an earlier study in DIR")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds before a point is given up (300)")
    ap.add_argument("--rate", default="1gbit", help="fake: link rate")
    ap.add_argument("--map-by", default="node",
                    help="mpirun --map-by for fake/hostfile (node)")
    ap.add_argument("--hostfile")
    ap.add_argument("--build", default="build")
    ap.add_argument("--platform", default="fat-tree-1024",
                    help="simgrid: the SimGrid platform (fat-tree-1024)")
    ap.add_argument("--sim-mode", default="scale", choices=["exact", "scale"],
                    help="simgrid: exact or scale (scale)")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    a.nodes = parse_ints(a.nodes, "--nodes")
    a.ranks_per_node = parse_ints(a.ranks_per_node, "--ranks-per-node")
    a.threads = parse_ints(a.threads, "--threads")
    a.scaling = [s for s in a.scaling.split(",") if s]
    bad = set(a.scaling) - {"strong", "weak-memory", "weak-work"}
    if bad or not a.scaling:
        raise StudyError(f"--scaling: unknown {sorted(bad)}; use strong, "
                         "weak-memory, weak-work")
    if a.seq < 1 or a.repeats < 1 or a.reps < 1:
        raise StudyError("--seq, --repeats and --reps must be >= 1")
    if not 0 < a.timeout < math.inf:
        raise StudyError(f"--timeout: {a.timeout:g} is not a number of "
                         "seconds > 0")
    out_dir_check(a.out_dir, a.force)
    if a.bench_args[:1] == ["--"]:
        a.bench_args = a.bench_args[1:]
    a.ringattn = os.path.abspath(os.path.join(a.build, "ringattn"))
    if a.launcher == "simgrid":  # a build's sub-build, or setup.sh --sim's
        a.ringattn = next((p for p in (
            os.path.join(a.build, "sim", "ringattn-sim"),
            os.path.join(a.build, "ringattn-sim")) if os.access(p, os.X_OK)),
            os.path.join(a.build, "sim", "ringattn-sim"))
    if not os.access(a.ringattn, os.X_OK):
        raise StudyError(f"no {a.ringattn}; build first or pass --build")
    if a.launcher == "simgrid":
        simgrid_check(a)
    if a.launcher == "hostfile" and not (a.hostfile and
                                         os.access(a.hostfile, os.R_OK)):
        raise StudyError("--launcher hostfile needs a readable --hostfile")
    if a.launcher == "local" and a.nodes != [1]:
        raise StudyError("--launcher local runs on one node: --nodes 1")
    if a.launcher == "slurm" and not os.environ.get("SLURM_JOB_ID"):
        raise StudyError("--launcher slurm runs inside an allocation "
                         "(salloc or sbatch)")
    if a.launcher == "fake":
        fake_check(a)
    return a


def out_dir_check(path, force):
    """--out-dir is a writable folder, or can be made: its nearest existing
    ancestor is a writable folder; it holds no outputs of a study unless
    force."""
    outputs = [os.path.join(path, n) for n in ("scaling.json", "scaling.csv")]
    for out in outputs + plot_module().chart_paths(path):
        if os.path.lexists(out) and not force:
            raise StudyError(f"--out-dir {path}: {out} exists; add --force "
                             "to replace it")
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise StudyError(f"--out-dir {path}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise StudyError(f"--out-dir {path}: {probe} is not writable")


def simgrid_check(a):
    """The platform (a file or a shipped name) read by ringattn-sim.sh's own
    reader, before any work: it exists, is a platform, has max(--nodes)
    hosts; one thread per simulated rank."""
    if a.threads != [1]:
        raise StudyError("--threads: the simulator runs one thread per "
                         "rank: --threads 1")
    named = os.path.join(PLATFORMS, a.platform + ".xml")
    if not os.path.exists(a.platform) and os.path.exists(named):
        a.platform = named
    r = subprocess.run([sys.executable, os.path.join(HERE, "sim",
                                                     "platform_hosts.py"),
                        a.platform], capture_output=True, text=True)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        raise StudyError(lines[-1].replace("ringattn-sim.sh: ", "")
                         if lines else f"--platform {a.platform}: unreadable")
    hosts = r.stdout.split("\n")
    hosts = [h for h in hosts if h.strip()]
    if max(a.nodes) > len(hosts):
        raise StudyError(f"--nodes: {max(a.nodes)} nodes and --platform "
                         f"{a.platform} has {len(hosts)} hosts")
    a.platform = os.path.abspath(a.platform)


def fake_check(a):
    """fake-cluster.sh's own check of the largest cluster the study builds
    (nodes, --rate, slots, root, tools, state folder), before any work."""
    r = subprocess.run([FAKE, "up", str(max(a.nodes)), "--rate", a.rate,
                        "--slots", str(max(a.ranks_per_node)), "--dry-run"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        raise StudyError(lines[-1] if lines else
                         f"fake-cluster.sh up --dry-run: exit {r.returncode}")


def bench_option(args, name, default):
    """The value of a bench option in args, or default."""
    for i, x in enumerate(args[:-1]):
        if x == name:
            return args[i + 1]
    return default


class Launcher:
    """Command prefixes that start P ranks on K nodes."""

    def __init__(self, a, work):
        self.a, self.work = a, work
        self.fake_up = 0

    def cores_per_node(self):
        if self.a.launcher == "slurm":
            return int(os.environ.get("SLURM_CPUS_ON_NODE", os.cpu_count()))
        return os.cpu_count() or 1

    def oversubscribed(self, K, R, T):
        """More threads than cores: on the fake cluster all nodes share
        this machine's cores."""
        if self.a.launcher == "simgrid":
            return False  # ringattn-sim.sh refuses more than a host's cores
        if self.a.launcher in ("fake", "local"):
            return K * R * T > (os.cpu_count() or 1)
        return R * T > self.cores_per_node()

    def prepare(self, K, R):
        if self.a.launcher != "fake":
            return
        r = subprocess.run([FAKE, "up", str(K), "--rate", self.a.rate,
                            "--slots", str(R)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise StudyError("fake-cluster.sh up failed: " + r.stderr.strip())
        self.fake_up = K

    def finish(self):
        if self.fake_up:
            subprocess.run([FAKE, "down"], capture_output=True)
            self.fake_up = 0

    def prefix(self, K, R, T):
        a, P = self.a, K * R
        env = ["-x", f"OMP_NUM_THREADS={T}", "-x", "OPENBLAS_NUM_THREADS=1"]
        # the tile engine a user chose by the variable, on every node (the
        # ranks refuse to run on mixed engines)
        if "RINGATTN_GEMM" in os.environ:
            env += ["-x", "RINGATTN_GEMM"]
        if a.launcher == "simgrid":
            return [SIM, "-n", str(P), "--platform", a.platform,
                    "--ranks-per-node", str(R), "--program", a.ringattn]
        over = ["--oversubscribe"] if self.oversubscribed(K, R, T) else []
        site = os.environ.get("MPIRUN_FLAGS", "").split()
        if a.launcher == "fake":
            args = subprocess.run([FAKE, "mpirun-args"], capture_output=True,
                                  text=True).stdout.split()
            return ["mpirun", *args, "-np", str(P), "--map-by", a.map_by,
                    *over, *env]
        if a.launcher == "hostfile":
            hosts = []
            with open(a.hostfile) as f:
                for line in f:
                    w = line.split("#")[0].split()
                    if w and w[0] not in hosts:
                        hosts.append(w[0])
            if len(hosts) < K:
                raise StudyError(f"{a.hostfile} lists {len(hosts)} hosts, "
                                 f"fewer than {K}")
            sub = os.path.join(self.work, f"hosts-{K}-{R}")
            with open(sub, "w") as f:
                f.writelines(f"{h} slots={R}\n" for h in hosts[:K])
            return ["mpirun", "--hostfile", sub, "-np", str(P), "--map-by",
                    a.map_by, *over, *env, *site]
        if a.launcher == "slurm":
            mpi = []
            r = subprocess.run(["srun", "--mpi=list"], capture_output=True,
                               text=True)
            if "pmix" in r.stdout + r.stderr:
                mpi = ["--mpi=pmix"]
            # --ntasks too: srun inherits the allocation's SLURM_NTASKS,
            # which would override K x R for a step on fewer nodes
            return ["env", f"OMP_NUM_THREADS={T}", "OPENBLAS_NUM_THREADS=1",
                    "srun", *mpi, "--nodes", str(K), "--ntasks", str(P),
                    "--ntasks-per-node", str(R), "--cpus-per-task", str(T),
                    "--cpu-bind=cores"]
        return ["mpirun", "-np", str(P), *over, *env, *site]


def run_cmd(cmd, timeout):
    """(returncode, stdout, stderr); returncode None on a timeout. As root,
    with Open MPI's permission to run as root."""
    env = dict(os.environ, **ROOT_ENV) if os.geteuid() == 0 else None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=timeout, env=env)
        return r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else ""
        return None, out or "", "timed out"


def seq_for(scaling, N0, P, P0):
    if scaling == "strong":
        return N0
    if scaling == "weak-memory":
        return max(1, round(N0 * P / P0))
    return max(1, round(N0 * math.sqrt(P / P0)))


def bench_point(a, launch, K, R, T, N, work):
    """One bench run: the JSON row and the command, or an error text."""
    js = os.path.join(work, "bench.json")
    if os.path.exists(js):
        os.remove(js)
    if a.launcher == "simgrid":
        cmd = launch.prefix(K, R, T) + ["--mode", a.sim_mode, "--seq", str(N),
                                        "--reps", str(a.reps), *a.bench_args,
                                        "--json", js]
    else:
        cmd = launch.prefix(K, R, T) + [
            a.ringattn, "bench", "--seq", str(N), "--threads", str(T),
            "--reps", str(a.reps), *a.bench_args, "--json", js]
    code, out, err = run_cmd(cmd, a.timeout)
    if code != 0:
        why = "timeout" if code is None else f"exit {code}"
        return None, cmd, f"{why}: {failure_reason(err)}"
    with open(js) as f:
        return json.load(f)[0], cmd, ""


def failure_reason(err):
    """Why a command failed, in whole lines: its `ringattn:` lines when it
    printed any (the command's own message), else its last lines (MPI's
    banner rules dropped); over REASON_CHARS, cut at a word with "..."."""
    lines = [l.strip() for l in err.splitlines()
             if l.strip() and l.strip().strip("-=*")]
    own = [l for l in lines if l.startswith("ringattn:")]
    text = ""
    for line in own or reversed(lines):
        joined = (text + " " + line) if own else (line + " " + text)
        if len(joined.strip()) > REASON_CHARS and text:
            break
        text = joined.strip()
    if len(text) > REASON_CHARS:
        text = text[:REASON_CHARS].rsplit(" ", 1)[0] + " ..."
    return text or "no message"


RUN_TIMES = re.compile(r"read ([0-9.]+) s .*write ([0-9.]+) s")


def io_point(a, launch, K, R, T, N, work):
    """gen + run of one file: (read_s, write_s) or (None, None)."""
    inp, out = os.path.join(work, f"in-{N}.h5"), os.path.join(work, "out.h5")
    pre = launch.prefix(K, R, T)
    shape = ["--heads", bench_option(a.bench_args, "--heads", "8"),
             "--dim", bench_option(a.bench_args, "--dim", "64")]
    if not os.path.exists(inp):
        code, _, _ = run_cmd(pre + [a.ringattn, "gen", "--out", inp, "--seq",
                                    str(N), *shape], a.timeout)
        if code != 0:
            return None, None
    flags = ["--causal"] if "--causal" in a.bench_args else []
    code, text, _ = run_cmd(pre + [a.ringattn, "run", "--in", inp, "--out",
                                   out, "--force", *flags], a.timeout)
    m = RUN_TIMES.search(text or "")
    if code != 0 or not m:
        return None, None
    return float(m.group(1)), float(m.group(2))


def point_row(a, launch, scaling, K, R, T, rep, row, io):
    t = row["seconds_median"]
    busy_min, busy_max = row["busy_seconds_min"], row["busy_seconds_max"]
    return {
        "scaling": scaling, "nodes": K, "ranks_per_node": R, "threads": T,
        "ranks": K * R, "seq": row["seq_q"], "repeat": rep, "seconds": t,
        "gflops": row["gflops"], "flops": row["flops"],
        "compute_s": busy_min, "imbalance_s": busy_max - busy_min,
        "exposed_comm_s": row["comm_wait_fraction"] * t,
        "io_read_s": io[0], "io_write_s": io[1],
        "comm_wait_fraction": row["comm_wait_fraction"],
        "bytes_sent": row["bytes_sent"],
        "cross_node_bytes_total": row.get("cross_node_bytes_total"),
        "ring_gbps": row["ring_gbps"],
        "oversubscribed": launch.oversubscribed(K, R, T),
        "launcher": a.launcher,
        "link_rate": a.rate if a.launcher == "fake" else "",
        "ring_order": row.get("ring_order", ""), "layout": row["layout"],
        "score": bench_option(a.bench_args, "--score", "dot"),
        "scale": bench_option(a.bench_args, "--scale", "1/sqrt(D)"),
        "causal": row["causal"], "masks": "lens" if row["lens"] else "",
        "precision": row["precision"], "gemm": row["gemm"],
        "batch": row["batch"], "heads": row["heads"], "dim": row["dim"],
        "verdict": row["verdict"], "status": "ok",
        "simulated": bool(row.get("simulated")),
        "sim_mode": row.get("sim_mode", ""),
        "platform": row.get("platform", ""),
    }


def write_outputs(out_dir, meta, points):
    """Rewrites scaling.json and scaling.csv (atomically) with every point
    so far."""
    for name, dump in (("scaling.json", lambda f: json.dump(
            {"meta": meta, "points": points}, f, indent=1)),
            ("scaling.csv", lambda f: write_csv(f, points))):
        write_atomic(os.path.join(out_dir, name), dump)


def write_csv(f, points):
    w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    w.writerows(points)


def host_names(launch, K, R, T, timeout):
    if launch.a.launcher == "simgrid":
        return []  # simulated hosts: the platform's (meta["platform"])
    code, out, _ = run_cmd(launch.prefix(K, R, T) + ["hostname"], timeout)
    return sorted(set(out.split())) if code == 0 else []


def study_meta(a):
    mpi = subprocess.run(["mpirun", "--version"], capture_output=True,
                         text=True).stdout.splitlines()
    sim = a.launcher == "simgrid"
    ver = subprocess.run(["true"] if sim else [a.ringattn, "--help"],
                         capture_output=True, text=True)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "launcher": a.launcher, "nodes": a.nodes,
        "ranks_per_node": a.ranks_per_node, "threads": a.threads,
        "scaling": a.scaling, "seq0": a.seq, "repeats": a.repeats,
        "reps": a.reps, "bench_args": a.bench_args,
        "link_rate": a.rate if a.launcher == "fake" else None,
        "map_by": a.map_by, "cores_here": os.cpu_count(),
        "simulated": sim, "platform": a.platform if sim else None,
        "sim_mode": a.sim_mode if sim else None,
        "mpi_version": mpi[0] if mpi else "",
        "ringattn_ok": ver.returncode == 0,
        "python": sys.version.split()[0], "hosts": {},
        "weak_definitions": {
            "weak-memory": "fixed memory per rank: N = N0 * P / P0",
            "weak-work": "fixed work per rank: N = N0 * sqrt(P / P0)"},
    }


def measure(a, launch, K, R, T, scaling, N, work, meta, points):
    """The repeats of one point, each written out as soon as it finishes.
    Returns the number that failed."""
    failed = 0
    io = io_point(a, launch, K, R, T, N, work) if a.io else (None, None)
    for rep in range(a.repeats):
        row, cmd, err = bench_point(a, launch, K, R, T, N, work)
        where = f"K={K} R={R} T={T} {scaling:11s} N={N:6d} rep {rep}"
        if row is None:
            failed += 1
            points.append({"scaling": scaling, "nodes": K,
                           "ranks_per_node": R, "threads": T,
                           "ranks": K * R, "seq": N, "repeat": rep,
                           "oversubscribed": launch.oversubscribed(K, R, T),
                           "status": err, "command": " ".join(cmd)})
            print(f"scaling-study: {where}: FAILED ({err})", file=sys.stderr)
        else:
            p = point_row(a, launch, scaling, K, R, T, rep, row, io)
            points.append(p)
            print(f"scaling-study: {where}: {p['seconds']:.4f} s, wait "
                  f"{100 * p['comm_wait_fraction']:.1f}%, across nodes "
                  f"{(p['cross_node_bytes_total'] or 0) / 1e6:.1f} MB",
                  flush=True)
        write_outputs(a.out_dir, meta, points)
    return failed


def warn_oversubscribed(a, launch):
    """One warning line naming the points whose ranks times threads
    outnumber a node's cores (fake nodes share this machine's)."""
    over = [f"{K}x{R}x{T}" for K in a.nodes for R in a.ranks_per_node
            for T in a.threads if launch.oversubscribed(K, R, T)]
    if over:
        print(f"ringattn: warning: scaling-study: ranks x threads outnumber "
              f"the cores of a node ({launch.cores_per_node()}) at nodes x "
              f"ranks per node x threads {', '.join(over)}: those points "
              "are oversubscribed and their times say nothing about compute "
              "scaling", file=sys.stderr, flush=True)


def run_study(a):
    """The study under the fake cluster's lock when it uses the cluster."""
    if a.launcher != "fake":
        return run_points(a)
    with FakeClusterLock(f"scaling-study.py --launcher fake --nodes "
                         f"{','.join(map(str, a.nodes))}"):
        return run_points(a)


def run_points(a):
    os.makedirs(a.out_dir, exist_ok=True)
    meta, points, failed = study_meta(a), [], 0
    P0 = min(a.nodes) * min(a.ranks_per_node)
    work = tempfile.mkdtemp(prefix="ra-scaling-", dir=os.getcwd())
    launch = Launcher(a, work)
    warn_oversubscribed(a, launch)
    try:
        for K in a.nodes:
            for R in a.ranks_per_node:
                launch.prepare(K, R)
                meta["hosts"][f"{K}x{R}"] = host_names(launch, K, R, 1,
                                                       a.timeout)
                for T in a.threads:
                    for scaling in a.scaling:
                        N = seq_for(scaling, a.seq, K * R, P0)
                        failed += measure(a, launch, K, R, T, scaling, N,
                                          work, meta, points)
                launch.finish()
    finally:
        launch.finish()
        shutil.rmtree(work, ignore_errors=True)
    return meta, points, failed


def plot_module():
    """launch/scaling-plot.py as a module (matplotlib is imported only
    when it draws)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "scaling_plot", os.path.join(HERE, "scaling-plot.py"))
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    return plot


def interrupted(signum, frame):
    """SIGTERM and SIGHUP end the study as Ctrl-C does: the fake cluster is
    taken down and the temporary folder removed."""
    raise KeyboardInterrupt


def main(argv):
    a = options(argv)
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    try:
        meta, points, failed = run_study(a)
    except KeyboardInterrupt:
        raise Failed(f"scaling-study: interrupted; finished points are in "
                     f"{a.out_dir}")
    except OSError as e:
        raise Failed(f"scaling-study: {e}")
    try:
        plot = plot_module()
        paths = plot.draw(meta, points, a.out_dir)
        for path in paths:
            print(f"scaling-study: wrote {path}")
        marked = plot.failed_count(points)
        if marked and paths:
            print(f"scaling-study: the charts mark {marked} failed point"
                  f"{'s' if marked > 1 else ''} (reasons in scaling.json)")
    except ImportError as e:
        print(f"scaling-study: no charts ({e}); the JSON and CSV are "
              "complete", file=sys.stderr)
    print(f"scaling-study: {len(points) - failed} points, {failed} failed "
          f"-> {os.path.join(a.out_dir, 'scaling.json')}")
    return 1 if failed else 0


if __name__ == "__main__":
    run(main, "scaling-study")
