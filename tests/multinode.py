#!/usr/bin/python3
"""multinode.py: ringattn across fake nodes (launch/fake-cluster.sh).

    multinode.py RINGATTN FAKE_CLUSTER_SH
                 correct|bytes|kill|api|slurm|users|options [TEST_NODES]

Each check builds a 3-node fake cluster, runs 2 ranks per node dealt
round-robin (mpirun --map-by node, so mpirun's ranks 0 and 3 share node 1),
and removes the cluster afterwards, also when the check fails:
  correct  run, causal (on OpenBLAS) and not (on the default engine),
           checked by `ringattn verify` (fp64 reference) with the
           node-aware ring and with mpirun's order;
  bytes    bench's bytes sent across nodes equal the node-major minimum
           (one crossing per node boundary per ring step) computed from the
           shape, and mpirun's order sends every block across; ulysses' and
           hybrid's equal the count computed from the shape;
  kill     killing every rank of one node ends the job in seconds, with a
           failure status and no output or temporary file left;
  api      TEST_NODES (tests/test_nodes_mpi.c): ra_comm_nodes and
           ra_comm_ring_order against the ranks' host names, and
           ra_forward on the node-major communicator.
  slurm    a 2-node Slurm cluster (up --slurm) runs launch/ringattn.slurm
           with 1 rank x 2 threads per node: every rank is allowed 2 CPUs
           (the template hands --cpus-per-task to srun), the ring spans
           both nodes, and verify passes; then scaling-study.py
           --launcher slurm inside an sbatch allocation finishes a point on
           1 node and one on 2. Skipped when Slurm is not installed.
  users    two users of the fake cluster (issue 39, class 12): while one
           holds it (a standalone `up`, or a process holding the lock
           as the tests do), a second `up` and scaling-study.py
           --launcher fake wait, saying whom for, and the first's nodes
           stay and carry a job; interrupted while waiting, they change
           nothing; once the first is done, the second builds its own.
Needs root (namespaces); exits 77 (skipped) with a message otherwise.
`options` needs no cluster: the global options --ring-order, --align,
--mpiio-hint and RINGATTN_MPIIO_HINTS on this machine.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
# killed ranks and nodes as users meet them: Open MPI's default SIGKILL
# grace (tests/CMakeLists.txt drops it for the other tests)
os.environ.pop("OMPI_MCA_odls_base_sigkill_timeout", None)
NODES, PER_NODE = 3, 2
P = NODES * PER_NODE
KILL_DEADLINE_S = 20.0  # the job must end this soon after the kill
sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
if len(sys.argv) > 2:  # the fake cluster's lock, as the scripts take it
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[2])))
from ra_script import FakeClusterLock, lock_holders  # noqa: E402
from e2e_util import ours  # noqa: E402


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def sh(cmd, timeout=300, **kw):
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=timeout, **kw)


def sbatch_wait(args, env, cwd, timeout=240):
    """sbatch args, then the job's end polled every 0.2 s (`sbatch --wait`
    polls at growing intervals and answered up to 32 s late); returns a
    CompletedProcess whose returncode is the job's exit code (1 for a job
    that ended otherwise than COMPLETED with code 0)."""
    r = sh(["sbatch", "--parsable"] + args, env=env, cwd=cwd)
    if r.returncode != 0:
        return r
    job = r.stdout.strip().split(";")[0]
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = sh(["scontrol", "-o", "show", "job", job], env=env, cwd=cwd)
        m = re.search(r"JobState=(\S+).*?ExitCode=(\d+):(\d+)", s.stdout)
        if m and m.group(1) not in ("PENDING", "CONFIGURING", "RUNNING",
                                    "COMPLETING", "SUSPENDED"):
            code = int(m.group(2)) or int(m.group(3))
            if m.group(1) != "COMPLETED" and code == 0:
                code = 1
            return subprocess.CompletedProcess(r.args, code, r.stdout,
                                               s.stdout)
        time.sleep(0.2)
    sh(["scancel", job], env=env, cwd=cwd)
    raise subprocess.TimeoutExpired(r.args, timeout)


class Cluster:
    """The fake cluster for the duration of a with-block."""

    def __init__(self, script, nodes=NODES, extra=()):
        self.script = script
        self.nodes = nodes
        self.extra = list(extra)

    def __enter__(self):
        # one user of the fake cluster at a time, whoever builds it
        self.lock = FakeClusterLock(" ".join(["multinode.py"] + sys.argv[3:4]))
        self.lock.__enter__()
        r = sh([self.script, "up", str(self.nodes), "--rate", "1gbit",
                "--slots", str(PER_NODE), *self.extra])
        if r.returncode != 0:
            sh([self.script, "down"])
            self.lock.__exit__()
            raise Failure("fake-cluster.sh up failed: " + r.stderr.strip())
        self.args = sh([self.script, "mpirun-args"]).stdout.split()
        return self

    def __exit__(self, *exc):
        sh([self.script, "down"])
        self.lock.__exit__()
        return False

    def mpirun(self, ringattn, *args, gemm=None):
        """The command that runs ringattn args on the cluster; gemm: the
        tile engine of every node (RINGATTN_GEMM), or the default."""
        engine = ["-x", f"RINGATTN_GEMM={gemm}"] if gemm else []
        return ["mpirun", *self.args, "-np", str(P), "--map-by", "node",
                "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
                *engine, ringattn, *args]


def check_correct(ringattn, cl, work):
    inp = os.path.join(work, "in.h5")
    seed = int(time.time()) % 100000
    print(f"correct: input seed {seed}")
    r = sh(cl.mpirun(ringattn, "gen", "--out", inp, "--seq", "1500",
                     "--heads", "4", "--kv-heads", "2", "--dim", "32",
                     "--seed", str(seed)))
    check(r.returncode == 0, "gen failed: " + r.stderr)
    for order in ("node", "mpirun"):
        for causal in ([], ["--causal"]):
            out = os.path.join(work, f"out-{order}{len(causal)}.h5")
            # the causal runs on OpenBLAS, the others on the default engine
            r = sh(cl.mpirun(ringattn, "run", "--ring-order", order, "--in",
                             inp, "--out", out, *causal,
                             gemm="openblas" if causal else None))
            check(r.returncode == 0, f"run {order} {causal} failed: "
                  + r.stderr)
            table = r.stdout
            check(f"# nodes      {NODES}" in table and
                  f"# ranks/node {PER_NODE}" in table,
                  "the parameter table does not show 3 nodes of 2 ranks:\n"
                  + table)
            check(not causal or "# gemm       openblas" in table,
                  "the causal run's table does not show the OpenBLAS "
                  "engine:\n" + table)
            want = ("node by node: 0 3 | 1 4 | 2 5" if order == "node"
                    else "mpirun's: 0 | 1 | 2 | 3 | 4 | 5")
            check(want in table, f"ring order is not '{want}':\n" + table)
            v = sh(["mpirun", "-np", "2", "--oversubscribe", ringattn,
                    "verify", "--in", inp, "--out", out])
            check(v.returncode == 0 and "PASS" in v.stdout,
                  f"verify {order} {causal}: " + v.stdout + v.stderr)
            print(f"correct: ring order {order}, causal {bool(causal)} "
                  f"({'openblas' if causal else 'default engine'}): "
                  + v.stdout.strip().splitlines()[-1][-60:])
    stray = [f for f in os.listdir(work)
             if f != "in.h5" and not f.startswith("out-")]
    check(not stray, f"files left beside the input and outputs: {stray}")


def bench_row(ringattn, cl, work, order, N, H, D, strategy="ring"):
    js = os.path.join(work, f"bench-{order}-{strategy}.json")
    r = sh(cl.mpirun(ringattn, "bench", "--ring-order", order, "--seq",
                     str(N), "--heads", str(H), "--dim", str(D), "--layout",
                     "contiguous", "--reps", "1", "--strategy", strategy,
                     "--no-yardsticks",
                     "--json", js))
    check(r.returncode == 0, f"bench {strategy} {order} failed: " + r.stderr)
    with open(js) as f:
        return json.load(f)[0]


def check_plan_bytes(ringattn, work, row, N, H, D):
    """`ringattn plan` at NODES nodes of PER_NODE ranks counts the bytes
    bench counted, across nodes too (ring order node by node)."""
    js = os.path.join(work, "plan.json")
    r = sh([ringattn, "plan", "--ranks", str(P), "--nodes", str(NODES),
            "--seq", str(N), "--heads", str(H), "--dim", str(D), "--layout",
            "contiguous", "--json", js])
    check(r.returncode == 0, "plan failed: " + r.stderr)
    with open(js) as f:
        ring = [x for x in json.load(f)["rows"] if x["strategy"] == "ring"][0]
    for key in ("bytes_sent", "cross_node_bytes", "cross_node_bytes_total"):
        check(ring[key] == row[key],
              f"plan {key} {ring[key]} != bench {row[key]}")
    print(f"bytes: plan counts {ring['cross_node_bytes_total']:.0f} bytes "
          f"across nodes, as bench did")


def check_bytes_heads(ringattn, cl, work):
    """ulysses and hybrid on the node-major ranks (G = H, so no kv head is
    replicated; P and the groups divide N and H): the cross-node bytes
    bench counts equal those computed from the shape."""
    N, H, D, B = 3000, 6, 32, 1
    n = N // P
    # ulysses: to each other rank, q of n tokens and k, v of n keys for its
    # H/P heads, then o and lse (D + 1 floats) back; the ranks of the other
    # nodes are P - PER_NODE of them
    per_dest = 4 * B * n * (H // P) * (D + 2 * D + D + 1)
    # hybrid: groups are nodes, the all-to-alls stay inside; the ring moves
    # a group's keys (N / NODES) for H / PER_NODE kv heads, NODES - 1 hops
    hop = 4 * B * (N // NODES) * (H // PER_NODE) * 2 * D
    for strategy, want in (("ulysses", P * (P - PER_NODE) * per_dest),
                           ("hybrid", P * (NODES - 1) * hop)):
        row = bench_row(ringattn, cl, work, "node", N, H, D, strategy)
        check(row["cross_node_bytes_total"] == want,
              f"{strategy}: cross-node bytes {row['cross_node_bytes_total']}"
              f" != {want} computed from the shape")
        check(row["verdict"] == "PASS", f"{strategy}: bench verdict FAIL")
        print(f"bytes: {strategy}: {want} bytes across nodes, as computed")


def check_bytes(ringattn, cl, work):
    N, H, D, B = 3000, 2, 32, 1
    # every rank sends its K and V block (N/P rows, H kv heads, D + D
    # floats) at each of the P - 1 steps; node-major: NODES of them cross
    block = B * (N // P) * H * (D + D) * 4
    per_rank = (P - 1) * block
    for order, crossing in (("node", NODES), ("mpirun", P)):
        row = bench_row(ringattn, cl, work, order, N, H, D)
        check(row["nodes"] == NODES and row["ranks_per_node"] == PER_NODE,
              f"bench saw {row['nodes']} nodes of {row['ranks_per_node']}")
        check(row["bytes_sent"] == per_rank,
              f"{order}: bytes_sent {row['bytes_sent']} != {per_rank}")
        want = crossing * per_rank
        check(row["cross_node_bytes_total"] == want,
              f"{order}: cross-node bytes {row['cross_node_bytes_total']} "
              f"!= {crossing} x {per_rank} = {want}")
        check(row["verdict"] == "PASS", f"{order}: bench verdict FAIL")
        if order == "node":  # the plan's count of the same run
            check_plan_bytes(ringattn, work, row, N, H, D)
        print(f"bytes: ring order {order}: {row['cross_node_bytes_total']:.0f}"
              f" bytes across nodes = {crossing} x {per_rank}")
    check_bytes_heads(ringattn, cl, work)


def node_ranks(node):
    """Process ids of ringattn ranks inside fake node `node`."""
    r = sh(["ip", "netns", "pids", f"ra-node{node}"])
    pids = []
    for pid in r.stdout.split():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "ringattn":
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def check_kill(ringattn, cl, work):
    inp = os.path.join(work, "in.h5")
    out = os.path.join(work, "out.h5")
    r = sh(cl.mpirun(ringattn, "gen", "--out", inp, "--seq", "12000",
                     "--heads", "8", "--dim", "64"))
    check(r.returncode == 0, "gen failed: " + r.stderr)
    job = subprocess.Popen(cl.mpirun(ringattn, "run", "--in", inp, "--out",
                                     out), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    try:
        for line in job.stdout:  # the table is printed before the ring runs
            if line.startswith("# threads"):
                break
        time.sleep(1.0)
        check(job.poll() is None, "the run ended before the kill")
        victims = node_ranks(2)
        check(len(victims) == PER_NODE,
              f"found {len(victims)} ranks on node 2, not {PER_NODE}")
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        try:
            code = job.wait(timeout=KILL_DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise Failure(f"the job still runs {KILL_DEADLINE_S:.0f} s "
                          "after node 2's ranks were killed")
        took = time.monotonic() - t0
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    check(code != 0, "the job reported success after losing a node")
    left = sorted(set(os.listdir(work)) - {"in.h5"})
    check(not left, f"files left behind: {left}")
    print(f"kill: job ended {took:.1f} s after node 2's ranks were killed, "
          f"exit {code}, nothing left")


def check_api(ringattn, cl, work):
    r = sh(cl.mpirun(API_TEST))
    print(r.stdout.strip())
    check(r.returncode == 0, "test_nodes_mpi failed: " + r.stderr[-2000:])
    check("on 3 nodes: 3 crossings per step" in r.stdout,
          "test_nodes_mpi did not see 3 nodes")


SLURM_TOOLS = ("slurmctld", "slurmd", "sbatch", "munged", "mungekey")


def check_slurm(ringattn, script, work):
    """launch/ringattn.slurm on a real Slurm across 2 fake nodes."""
    os.chmod(work, 0o755)
    wrapper = os.path.join(work, "ringattn-wrapper")
    with open(wrapper, "w") as f:  # records each rank's allowed CPUs
        f.write("#!/bin/sh\n"
                "grep Cpus_allowed_list /proc/self/status | cut -f2 "
                f">> {work}/cpus-$(hostname)-$SLURM_PROCID\n"
                f'exec {ringattn} "$@"\n')
    os.chmod(wrapper, 0o755)
    with Cluster(script, nodes=2, extra=["--slurm"]):
        conf = sh([script, "slurm-conf"]).stdout.strip()
        env = {**os.environ, "SLURM_CONF": conf, "RINGATTN": wrapper,
               "SEQ": "3001", "IN": os.path.join(work, "in.h5"),
               "OUT": os.path.join(work, "out.h5")}
        out = os.path.join(work, "job.out")
        r = sbatch_wait(["--nodes", "2", "--ntasks-per-node", "1",
                         "--cpus-per-task", "2", "--output", out,
                         os.path.join(os.path.dirname(script),
                                      "ringattn.slurm")], env, work)
        log = open(out).read() if os.path.exists(out) else ""
        check(r.returncode == 0, f"sbatch exit {r.returncode}: "
              f"{r.stderr.strip()}\n{log[-3000:]}")
        study = check_slurm_study(ringattn, script, work, env)
    check("2 nodes" in log and "2 ranks, 2 threads per rank" in log,
          "the job did not run 2 ranks x 2 threads on 2 nodes:\n" + log)
    check("# nodes      2" in log, "the ring does not span 2 nodes:\n" + log)
    check(": PASS" in log and "FAIL" not in log,
          "verify did not pass:\n" + log)
    cpus = {}
    for name in sorted(os.listdir(work)):
        if name.startswith("cpus-"):
            with open(os.path.join(work, name)) as f:
                cpus[name] = set(f.read().split())
    # gen, run and verify each start one rank per node
    check(len(cpus) == 2 and all(v == {"0-1"} for v in cpus.values()),
          f"ranks were not allowed 2 CPUs each: {cpus}")
    print(f"slurm: 2 nodes x 1 rank x 2 threads, CPUs per rank {cpus}; "
          "verify PASS")
    print(f"slurm: scaling-study --launcher slurm inside sbatch: {study}")


def check_slurm_study(ringattn, script, work, env):
    """launch/scaling-study.py --launcher slurm inside a 2-node sbatch
    allocation: a point on 1 node and one on 2, both finished."""
    study = os.path.join(work, "study")
    job = os.path.join(work, "study.sh")
    with open(job, "w") as f:
        f.write("#!/bin/sh\n"
                f"exec {os.path.dirname(script)}/scaling-study.py --launcher "
                "slurm --nodes 1,2 --ranks-per-node 1 --scaling strong "
                f"--seq 1024 --repeats 1 --reps 1 --out-dir {study} "
                f"--build {os.path.dirname(ringattn)} -- --heads 2 --dim 32\n")
    os.chmod(job, 0o755)
    out = os.path.join(work, "study.out")
    r = sbatch_wait(["--nodes", "2", "--ntasks-per-node", "1", "--output",
                     out, job], env, work)
    log = open(out).read() if os.path.exists(out) else ""
    check(r.returncode == 0, f"the study's job: exit {r.returncode}\n{log}")
    with open(os.path.join(study, "scaling.json")) as f:
        rows = json.load(f)
    rows = rows.get("points", rows) if isinstance(rows, dict) else rows
    nodes = sorted(int(x["nodes"]) for x in rows)
    check(nodes == [1, 2], f"study points on nodes {nodes}, not [1, 2]")
    bad = [x.get("status") for x in rows if x.get("status") != "ok"]
    check(not bad, f"study points failed: {bad}\n{log}")
    return f"points on {nodes} nodes"


def namespaces():
    out = sh(["ip", "netns", "list"]).stdout
    return sorted(w.split()[0] for w in out.splitlines()
                  if w.startswith("ra-node"))


def fake_env(work, state):
    return {**os.environ, "RA_FAKE_CLUSTER_DIR": os.path.join(work, state)}


def user(cmd, work, name):
    """Starts another user of the fake cluster: cmd with the state folder
    work/NAME, stderr into work/NAME.err; returns (process, that path)."""
    err = os.path.join(work, f"{name}.err")
    with open(err, "w") as f:
        return subprocess.Popen(cmd, cwd=work, env=fake_env(work, name),
                                stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=f,
                                text=True), err


def waits_for(proc, err, pid):
    """Whether the user proc says it waits for PID pid; watches its stderr
    until it does or proc ends (no clock: ctest's timeout ends a hang)."""
    want = f"waiting for the fake cluster held by PID {pid} ("
    while True:
        ended = proc.poll() is not None
        with open(err) as f:
            if want in f.read():
                return True
        if ended:
            return False
        time.sleep(0.1)


def ended(procs):
    """Ends the users still waiting (SIGTERM)."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        proc.communicate()


def check_users_standalone(ringattn, script, work):
    """A standalone `up 2` holds the fake cluster: a second `up` and a
    study wait for its holder, the nodes stay and carry a job, and SIGTERM
    ends the waiting ones with nothing changed."""
    r = sh([script, "up", "2", "--slots", "1"], env=fake_env(work, "first"))
    check(r.returncode == 0, "the first up failed: " + r.stderr)
    holder = lock_holders()
    check(len(holder) == 1, f"the first up left holders {holder}")
    study_cmd = [os.path.join(os.path.dirname(script), "scaling-study.py"),
                 "--launcher", "fake", "--nodes", "1", "--ranks-per-node",
                 "1", "--scaling", "strong", "--seq", "128", "--repeats", "1",
                 "--reps", "1", "--build", os.path.dirname(ringattn),
                 "--out-dir", "study", "--", "--heads", "2", "--dim", "16"]
    waiting = [user([script, "up", "1", "--slots", "1"], work, "second"),
               user(study_cmd, work, "study")]
    try:
        check_waiting(script, work, waiting, holder[0])
    finally:
        ended([proc for proc, _ in waiting])
    return holder[0]


def check_waiting(script, work, waiting, holder):
    """The waiting users say whom for, the holder's nodes carry a job, and
    SIGTERM ends the waiting users with nothing changed."""
    for proc, err in waiting:
        check(waits_for(proc, err, holder),
              f"{proc.args[:2]} did not wait for PID {holder}: "
              + open(err).read())
    check(namespaces() == ["ra-node1", "ra-node2"],
          f"the first user's nodes changed: {namespaces()}")
    args = sh([script, "mpirun-args"], env=fake_env(work, "first"))
    m = sh(["mpirun", *args.stdout.split(), "-np", "2", "--map-by", "node",
            "hostname"], cwd=work)
    check(m.returncode == 0 and sorted(m.stdout.split()) == ["node1", "node2"],
          f"a job on the first user's nodes: {m.stdout} {m.stderr[-300:]}")
    ended([proc for proc, _ in waiting])
    for (proc, err), rc in zip(waiting, (143, 1)):
        check(proc.returncode == rc, f"{proc.args[:2]} exit "
              f"{proc.returncode}, not {rc}: " + open(err).read())
    check(namespaces() == ["ra-node1", "ra-node2"] and
          lock_holders() == [holder] and
          not {"second", "study"} & set(os.listdir(work)),
          f"the waiting users changed something: {namespaces()}, holders "
          f"{lock_holders()}, {os.listdir(work)}")


# A user as the tests are one: it holds the lock in-process and runs
# fake-cluster.sh under it (argv: the launch folder, fake-cluster.sh).
TEST_USER = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from ra_script import FakeClusterLock
with FakeClusterLock("multinode.py users, as a test"):
    up = subprocess.run([sys.argv[2], "up", "1", "--slots", "1"],
                        stdout=sys.stderr)
    print(up.returncode, flush=True)
    sys.stdin.read()
    subprocess.run([sys.argv[2], "down"])
"""


def check_users_test(script, work):
    """A process holding the lock as the tests do (its own `up 1` under
    it): a standalone `up 2` waits for it, its node stays; once it is done
    the `up 2` builds its nodes."""
    test, _ = user([sys.executable, "-c", TEST_USER,
                    os.path.dirname(script), script], work, "test")
    later = None
    try:
        check(test.stdout.readline().strip() == "0", "the test's up failed")
        later, err = user([script, "up", "2", "--slots", "1"], work, "later")
        check(waits_for(later, err, test.pid),
              f"a standalone up did not wait for the test (PID {test.pid}): "
              + open(err).read())
        check(namespaces() == ["ra-node1"], f"the test's node: "
              f"{namespaces()}")
        test.communicate("")
        check(test.returncode == 0, f"the test user: exit {test.returncode}")
        later.communicate()
        check(later.returncode == 0 and
              namespaces() == ["ra-node1", "ra-node2"],
              f"the later up: exit {later.returncode}, nodes "
              f"{namespaces()}: " + open(err).read())
    finally:  # the test user takes its node down, then the later up ends
        if test.poll() is None:
            test.communicate("")
        if later is not None:
            later.communicate()
    d = sh([script, "down"], env=fake_env(work, "later"))
    check(d.returncode == 0 and not namespaces(),
          f"down: exit {d.returncode}, nodes {namespaces()}")


def check_users(ringattn, script, work):
    """issue 39, class 12: two users of the fake cluster never break each
    other."""
    try:
        holder = check_users_standalone(ringattn, script, work)
    finally:
        d = sh([script, "down"], env=fake_env(work, "first"))
    check(d.returncode == 0 and not namespaces() and
          holder not in lock_holders(),
          f"down: exit {d.returncode}, nodes {namespaces()}, holders "
          f"{lock_holders()}: {d.stderr}")
    print(f"users: a second up and a study waited for PID {holder}, whose "
          "nodes stayed and ran a job; interrupted, they changed nothing")
    check_users_test(script, work)
    print("users: a standalone up waited for a test holding the lock, then "
          "built its nodes")


def local_run(ringattn, work, args, env=None):
    return sh(["mpirun", "-np", "2", "--oversubscribe", ringattn, *args],
              cwd=work, env={**os.environ, **(env or {})})


def check_options(ringattn, work):
    """The global options on one machine (no cluster, no root needed): bad
    values end with exit 2, one 'ringattn:' line and no file left; --align
    puts /o at a multiple of the alignment; the hints reach the table."""
    import h5py
    r = local_run(ringattn, work, ["gen", "--out", "in.h5", "--seq", "3000",
                                   "--heads", "2", "--dim", "16"])
    check(r.returncode == 0, "gen failed: " + r.stderr)
    bad = [
        (["--ring-order", "ring"], {}, "--ring-order: 'ring' is not node "
                                       "or mpirun"),
        (["--align", "-1"], {}, "--align: -1 is outside"),
        (["--mpiio-hint", "cb_nodes"], {}, "MPI-IO hint 'cb_nodes' is not "
                                           "key=value"),
        ([], {"RINGATTN_MPIIO_HINTS": "a=1;=2"}, "MPI-IO hint '=2' is not "
                                                 "key=value"),
    ]
    for flags, env, want in bad:
        r = local_run(ringattn, work, ["run", "--in", "in.h5", "--out",
                                       "bad.h5", *flags], env)
        lines = ours(r.stderr)
        check(r.returncode == 2 and len(lines) == 1 and want in lines[0],
              f"{flags} {env}: exit {r.returncode}, stderr {r.stderr!r}")
        check(sorted(os.listdir(work)) == ["in.h5"],
              f"{flags} {env}: left {os.listdir(work)}")
    align = 1 << 20
    r = local_run(ringattn, work, ["run", "--in", "in.h5", "--out", "al.h5",
                                   "--align", str(align), "--mpiio-hint",
                                   "cb_buffer_size=4194304"],
                  {"RINGATTN_MPIIO_HINTS": "romio_cb_read=enable"})
    check(r.returncode == 0, "aligned run failed: " + r.stderr)
    check("hints romio_cb_read=enable cb_buffer_size=4194304" in r.stdout and
          f"align {align} bytes" in r.stdout,
          "the table does not show the MPI-IO settings:\n" + r.stdout)
    with h5py.File(os.path.join(work, "al.h5"), "r") as f:
        offset = f["o"].id.get_offset()
    check(offset is not None and offset % align == 0,
          f"/o starts at byte {offset}, not a multiple of {align}")
    print(f"options: bad values refused; /o at byte {offset} with --align "
          f"{align}")


API_TEST = None


def in_work(what, fn, *args):
    """fn(*args, work) in a temporary folder of its own: 0 when it passes,
    1 when it fails, with a PASS or FAIL line."""
    try:
        with tempfile.TemporaryDirectory(prefix=f"ra-{what}-") as work:
            fn(*args, work)
    except (Failure, OSError, subprocess.SubprocessError) as e:
        print(f"multinode.py {what}: FAIL: {e}")
        return 1
    print(f"multinode.py {what}: PASS")
    return 0
CHECKS = {"correct": check_correct, "bytes": check_bytes, "kill": check_kill,
          "api": check_api}


def main():
    global API_TEST
    if len(sys.argv) not in (4, 5) or \
            sys.argv[3] not in list(CHECKS) + ["options", "slurm", "users"] or \
            (sys.argv[3] == "api" and len(sys.argv) != 5):
        print("usage: multinode.py RINGATTN FAKE_CLUSTER_SH "
              "correct|bytes|kill|api|slurm|users|options [TEST_NODES]",
              file=sys.stderr)
        return 2
    ringattn, script, what = sys.argv[1:4]
    API_TEST = sys.argv[4] if len(sys.argv) == 5 else None
    if what == "options":
        return in_work(what, check_options, os.path.abspath(ringattn))
    if os.geteuid() != 0:
        print("multinode.py: skipped: the fake cluster needs root")
        return SKIP
    # a ctest timeout sends SIGTERM: leave through the clean-up paths
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if what == "users":
        return in_work(what, check_users, os.path.abspath(ringattn),
                       os.path.abspath(script))
    if what == "slurm":
        import shutil
        missing = [t for t in SLURM_TOOLS if shutil.which(t) is None]
        if missing:
            print(f"multinode.py slurm: skipped: {' '.join(missing)} not "
                  "installed (launch/setup.sh installs Slurm)")
            return SKIP
        return in_work(what, check_slurm, os.path.abspath(ringattn),
                       os.path.abspath(script))
    try:
        with tempfile.TemporaryDirectory(prefix="ra-multinode-") as work, \
                Cluster(script) as cl:
            CHECKS[what](ringattn, cl, work)
    except Failure as e:
        print(f"multinode.py {what}: FAIL: {e}")
        return 1
    except (OSError, subprocess.SubprocessError) as e:
        print(f"multinode.py {what}: FAIL: {e}")
        return 1
    print(f"multinode.py {what}: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
