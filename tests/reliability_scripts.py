#!/usr/bin/python3
"""reliability_scripts.py RINGATTN LAUNCH_DIR [cases|table]

The scripts beside ringattn (LAUNCH_DIR: fake-cluster.sh, ringattn-mpirun.sh,
bench-sweep.sh, ringattn.slurm, scaling-study.py and the plotting scripts)
under bad options, foreign folders, interrupts and umasks
(docs/RELIABILITY.md, "The scripts"). Each named case runs in a folder of
its own and asserts what its docstring says: a refusal exits 2 with exactly
one stderr line naming the script, before any mpirun (no `+ mpirun` echo)
and with every file that existed before unchanged and nothing new; an
interrupt ends the script with exit 128 + the signal's number (1 for the
Python scripts) and nothing left behind; outputs get the permissions the
umask gives a new file. The cases of issue 39 (classes 10, 13, 20) name
their class.

The fake-cluster cases need root (network namespaces) and take
/tmp/ra-fake-cluster.lock, which every user of the fake cluster takes;
without root, or without the lock within 240 s, they are skipped with a
note. Each of them removes its nodes, bridge and state folder, whatever the
script under test left. `table` prints the cases as Markdown.

Needs /usr/bin/python3 with h5py and numpy (python3-h5py) and matplotlib.
"""
import concurrent.futures
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the tests
from tree_md5 import md5s  # noqa: E402
import e2e_util  # noqa: E402

RINGATTN = os.path.abspath(sys.argv[1])
LAUNCH = os.path.abspath(sys.argv[2])
sys.path.insert(0, LAUNCH)  # the fake cluster's lock, as the scripts take it
from ra_script import FakeClusterLock, FAKE_CLUSTER_LOCK  # noqa: E402
MODE = sys.argv[3] if len(sys.argv) > 3 else "cases"
BUILD = os.path.dirname(RINGATTN)
PY = "/usr/bin/python3"
ENV = dict(e2e_util.ENV)
# the scripts' signals as users meet them: Open MPI's default SIGKILL grace
ENV.pop("OMPI_MCA_odls_base_sigkill_timeout", None)
TINY = ["--seq", "128", "--heads", "2", "--dim", "16"]


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def script(name):
    return os.path.join(LAUNCH, name)


def bound(seconds):
    """How long a command may run before it is taken for hung: seconds on
    a machine loaded once, times the load per core beyond."""
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def sh(cmd, cwd, env=None, timeout=120, umask=None):
    """Runs cmd in cwd with ENV (and env on top) under umask, for at most
    bound(timeout) seconds."""
    return subprocess.run(cmd, cwd=cwd, env={**ENV, **(env or {})},
                          capture_output=True, text=True,
                          timeout=bound(timeout),
                          umask=-1 if umask is None else umask)


def refused(r, prefix, before, work):
    """r exited 2 with one stderr line starting with prefix, ran no mpirun,
    and left work as it was (before: its snapshot). Returns the line."""
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2, f"exit {r.returncode}, not 2: {r.stderr[-300:]}")
    check(len(lines) == 1 and lines[0].startswith(prefix),
          f"not one line starting {prefix!r}: {r.stderr[-300:]!r}")
    check("+ mpirun" not in r.stdout, "ran mpirun before refusing")
    after = md5s(work)
    check(after == before, f"files changed or added: "
          f"{sorted(set(after.items()) ^ set(before.items()))}")
    return lines[0]


def mode_of(path):
    return oct(os.stat(path).st_mode & 0o777)


CASES = []  # (name, what, needs the fake cluster, function(work))


def case(name, what, fake=False):
    def add(fn):
        CASES.append((name, what, fake, fn))
        return fn
    return add


# ---- fake-cluster.sh (root) ------------------------------------------------

def namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True,
                         text=True).stdout
    return [w.split()[0] for w in out.splitlines()
            if w.split() and w.split()[0].startswith("ra-node")]


def bridge_up():
    return subprocess.run(["ip", "link", "show", "ra-br0"],
                          capture_output=True).returncode == 0


def net_clean(work):
    """Removes what any version of fake-cluster.sh may have left: the
    namespaces and their processes, the bridge, and plain-name links into
    work."""
    for ns in namespaces():
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", ns])
    subprocess.run(["ip", "link", "del", "ra-br0"], capture_output=True)
    for link in glob.glob("/run/ringattn-fake-cluster.link-*"):
        if os.readlink(link).startswith(work):
            os.unlink(link)


def fake(work, args, state, **kw):
    return sh([script("fake-cluster.sh"), *args], work,
              env={"RA_FAKE_CLUSTER_DIR": state}, **kw)


def nothing_up(state):
    check(not namespaces(), f"namespaces left: {namespaces()}")
    check(not bridge_up(), "bridge ra-br0 left")
    check(not os.path.lexists(state), f"state folder {state} left")
    links = glob.glob("/run/ringattn-fake-cluster.link-*")
    check(not links, f"links left: {links}")


def foreign_folder(work):
    state = os.path.join(work, "mine")
    os.mkdir(state)
    with open(os.path.join(state, "thesis.tex"), "w") as f:
        f.write("years of work\n")
    return state, md5s(work)


@case("fc-down-foreign", "down with RA_FAKE_CLUSTER_DIR on a folder of "
      "the user's (no cluster up)", fake=True)
def fc_down_foreign(work):
    """the folder and its file stay; exit 2, one line"""
    state, before = foreign_folder(work)
    return refused(fake(work, ["down"], state), "fake-cluster.sh:", before,
                   work)


@case("fc-up-foreign", "up 2 with RA_FAKE_CLUSTER_DIR on a folder of the "
      "user's", fake=True)
def fc_up_foreign(work):
    """refused before anything is built; the folder's contents stay"""
    state, before = foreign_folder(work)
    line = refused(fake(work, ["up", "2", "--slots", "1"], state),
                   "fake-cluster.sh:", before, work)
    check(not namespaces() and not bridge_up(), "built nodes anyway")
    return line


@case("fc-empty-folder-kept", "up 1 in an existing empty folder, then down",
      fake=True)
def fc_empty_folder_kept(work):
    """the folder it did not make stays, emptied of what up put there"""
    state = os.path.join(work, "empty")
    os.mkdir(state)
    r = fake(work, ["up", "1", "--slots", "1"], state)
    check(r.returncode == 0, f"up: exit {r.returncode}: {r.stderr}")
    d = fake(work, ["down"], state)
    check(d.returncode == 0, f"down: exit {d.returncode}: {d.stderr}")
    check(os.path.isdir(state) and not os.listdir(state),
          f"folder {'gone' if not os.path.isdir(state) else os.listdir(state)}")
    return "up exit 0, down exit 0; the folder is still there, empty"


def interrupt_up(work, how):
    """`up 16` interrupted once two nodes exist: (exit status, stderr).
    None when up finished before the signal landed."""
    state = os.path.join(work, "state")
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) \
        if how == "INT to an asynchronous job" else None
    p = subprocess.Popen([script("fake-cluster.sh"), "up", "16", "--slots",
                          "1"], cwd=work, env={**ENV,
                                               "RA_FAKE_CLUSTER_DIR": state},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=ignore,
                         start_new_session=how == "INT to the process group")
    deadline = time.time() + bound(30)
    while len(namespaces()) < 2 and p.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    if how == "INT to the process group":
        os.killpg(p.pid, signal.SIGINT)
    else:
        os.kill(p.pid, signal.SIGTERM if how.startswith("TERM")
                else signal.SIGINT)
    _, err = p.communicate(timeout=bound(60))
    if p.returncode == 0 and len(namespaces()) == 16:
        return None
    nothing_up(state)
    return p.returncode, err


def fc_interrupt(work, how):
    for attempt in range(3):
        got = interrupt_up(work, how)
        if got is not None:
            break
        net_clean(work)
        shutil.rmtree(os.path.join(work, "state"), ignore_errors=True)
    check(got is not None, "up finished before the signal, three times")
    code, err = got
    want = 143 if how.startswith("TERM") else 130
    check(code == want, f"exit {code}, not {want}: {err[-300:]}")
    return f"exit {code}, nothing left: {err.strip()}"


def interrupt_case(name, how, what):
    def fn(work):
        """exit 130 (INT) or 143 (TERM); no namespace, bridge or state
        folder left"""
        return fc_interrupt(work, how)
    case(name, what, fake=True)(fn)


for _name, _how, _what in (
        ("fc-interrupt-async", "INT to an asynchronous job",
         "SIGINT to `up 16` run as an asynchronous job (SIGINT ignored on "
         "entry) once two nodes exist"),
        ("fc-interrupt-ctrl-c", "INT to the process group",
         "SIGINT to the process group of `up 16` (Ctrl-C) once two nodes "
         "exist"),
        ("fc-interrupt-term", "TERM to the script",
         "SIGTERM to `up 16` once two nodes exist")):
    interrupt_case(_name, _how, _what)


def full_pipe():
    """A pipe whose buffer is full: a write to it blocks until the read
    end is drained. Returns (read end, write end)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    return r, w


def drain(fd):
    """Reads fd to its end (its writers all gone)."""
    while os.read(fd, 1 << 16):
        pass
    os.close(fd)


def writing_pipe(pid):
    """Whether pid is blocked writing to a pipe (its kernel wait channel)."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return "pipe_write" in f.read()
    except OSError:  # ended
        return False


def running(pid):
    """Whether pid runs (exists and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def interrupt_at_end(work, sig):
    """`up 2` whose last line (the cluster is complete) blocks on a full
    standard output, signalled there: (exit status, stderr)."""
    state = os.path.join(work, f"state-{sig}")
    r, w = full_pipe()
    p = subprocess.Popen([script("fake-cluster.sh"), "up", "2", "--slots",
                          "1"], cwd=work, env={**ENV,
                                               "RA_FAKE_CLUSTER_DIR": state},
                         stdout=w, stderr=subprocess.PIPE, text=True)
    os.close(w)
    try:
        while not writing_pipe(p.pid) and p.poll() is None:
            time.sleep(0.01)
        p.send_signal(sig)
    finally:
        drain(r)
    _, err = p.communicate(timeout=bound(60))
    nothing_up(state)
    return p.returncode, err


@case("fc-interrupt-at-end", "SIGINT, then SIGTERM, to `up 2` while it "
      "writes its last line (the cluster complete; issue 39, class 13)",
      fake=True)
def fc_interrupt_at_end(work):
    """exit 130, then 143 (was 0, nodes left up); no namespace, bridge or
    state folder left"""
    got = []
    for sig, want in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        code, err = interrupt_at_end(work, sig)
        check(code == want, f"{sig.name}: exit {code}, not {want}: "
              f"{err[-300:]}")
        got.append(f"{sig.name} exit {code}")
    return ", ".join(got) + ", nothing left"


def fc_rate_refused(work, rate):
    state = os.path.join(work, "state")
    line = refused(fake(work, ["up", "1", "--rate", rate], state),
                   "fake-cluster.sh:", md5s(work), work)
    nothing_up(state)
    return line


@case("fc-rate-negative", "up 1 --rate -1gbit", fake=True)
def fc_rate_negative(work):
    """refused (tc took it as 18446744Tbit); nothing built"""
    return fc_rate_refused(work, "-1gbit")


@case("fc-rate-too-fine", "up 1 --rate 1.0005kbit (finer than 1 bit/s)",
      fake=True)
def fc_rate_too_fine(work):
    """refused; nothing built"""
    return fc_rate_refused(work, "1.0005kbit")


@case("fc-rate-decimal", "up 1 --rate 1.5gbit", fake=True)
def fc_rate_decimal(work):
    """built, each direction limited to 1500 Mbit/s"""
    state = os.path.join(work, "state")
    r = fake(work, ["up", "1", "--rate", "1.5gbit", "--slots", "1"], state)
    check(r.returncode == 0 and not r.stderr,
          f"exit {r.returncode}: {r.stderr[-300:]}")
    status = fake(work, ["status"], state).stdout
    check("tbf 1500Mbit" in status, f"status: {status}")
    fake(work, ["down"], state)
    nothing_up(state)
    return status.splitlines()[-1]


@case("fc-state-blanks", "state folder `a b/state` (a blank): up 2, "
      "mpirun $(mpirun-args) -np 2 hostname, down", fake=True)
def fc_state_blanks(work):
    """mpirun reaches both nodes; down removes the folder and its link"""
    os.mkdir(os.path.join(work, "a b"))
    state = os.path.join(work, "a b", "state")
    r = fake(work, ["up", "2", "--slots", "1"], state)
    check(r.returncode == 0, f"up: exit {r.returncode}: {r.stderr}")
    args = fake(work, ["mpirun-args"], state).stdout.split()
    m = sh(["mpirun", *args, "-np", "2", "--map-by", "node", "hostname"],
           work, timeout=60)
    hosts = sorted(m.stdout.split())
    check(m.returncode == 0 and hosts == ["node1", "node2"],
          f"mpirun: exit {m.returncode}, hosts {hosts}: {m.stderr[-300:]}")
    d = fake(work, ["down"], state)
    check(d.returncode == 0, f"down: exit {d.returncode}: {d.stderr}")
    nothing_up(state)
    return f"mpirun ran on {', '.join(hosts)}; down left nothing"


@case("study-fake-rate", "scaling-study.py --launcher fake --rate=-1gbit",
      fake=True)
def study_fake_rate(work):
    """refused before the study (fake-cluster.sh up --dry-run): no output
    folder, no cluster"""
    state = os.path.join(work, "state")
    r = sh([PY, script("scaling-study.py"), "--launcher", "fake", "--nodes",
            "1,2", "--rate=-1gbit", "--build", BUILD, "--out-dir", "st"],
           work, env={"RA_FAKE_CLUSTER_DIR": state})
    line = refused(r, "ringattn: fake-cluster.sh:", {}, work)
    nothing_up(state)
    return line


# ---- ringattn-mpirun.sh -----------------------------------------------------

def wrapper(work, *args, env=None):
    return sh([script("ringattn-mpirun.sh"), "-b", BUILD, "-n", "1", *args],
              work, env={"SEQ": "128", "HEADS": "2", "DIM": "16",
                         **(env or {})})


def verify_line(r):
    return [x for x in r.stdout.splitlines() if x.startswith("+ mpirun")
            and " verify " in x][-1]


@case("mpirun-out-option", "ringattn-mpirun.sh -- --out mine.h5, and "
      "-i ringattn-in.h5 -- --out=mine2.h5, beside an older ringattn-out.h5")
def mpirun_out_option(work):
    """each run writes and verifies its own file; the older output stays"""
    with open(os.path.join(work, "ringattn-out.h5"), "w") as f:
        f.write("an older output\n")
    old = md5s(work)["ringattn-out.h5"]
    for opt, name in ((["--", "--out", "mine.h5"], "mine.h5"),
                      (["-i", "ringattn-in.h5", "--", "--out=mine2.h5"],
                       "mine2.h5")):
        r = wrapper(work, *opt)
        check(r.returncode == 0, f"{opt}: exit {r.returncode}: {r.stderr}")
        check(verify_line(r).endswith(f"--out {name}"),
              f"{opt}: verified another file: {verify_line(r)}")
        check(os.path.exists(os.path.join(work, name)), f"no {name}")
    check(md5s(work)["ringattn-out.h5"] == old,
          "the older ringattn-out.h5 was rewritten")
    return verify_line(r)


@case("mpirun-out-exists", "ringattn-mpirun.sh -- --out mine.h5 onto an "
      "existing mine.h5 without --force")
def mpirun_out_exists(work):
    """refused before gen"""
    with open(os.path.join(work, "mine.h5"), "w") as f:
        f.write("the user's\n")
    return refused(wrapper(work, "--", "--out", "mine.h5"),
                   "ringattn-mpirun.sh:", md5s(work), work)


@case("mpirun-in-option", "ringattn-mpirun.sh -- --in x.h5 (the input "
      "verify would not read)")
def mpirun_in_option(work):
    """refused: the input is -i's"""
    return refused(wrapper(work, "--", "--in", "x.h5"), "ringattn-mpirun.sh:",
                   {}, work)


@case("mpirun-gemm-env", "ringattn-mpirun.sh with RINGATTN_GEMM=openblas")
def mpirun_gemm_env(work):
    """every mpirun passes the variable on (-x RINGATTN_GEMM), the run's
    table names OpenBLAS, verify passes"""
    r = wrapper(work, env={"RINGATTN_GEMM": "openblas"})
    cmds = [l for l in r.stdout.splitlines() if l.startswith("+ mpirun")]
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr[-300:]}")
    check(len(cmds) == 3 and all(" -x RINGATTN_GEMM " in c for c in cmds),
          f"commands: {cmds}")
    check(re.search(r"^# gemm +openblas$", r.stdout, re.M) is not None,
          "the run's table does not name openblas")
    return "3 commands with -x RINGATTN_GEMM, run on openblas"


@case("mpirun-slurm-ntasks", "ringattn-mpirun.sh with SLURM_NTASKS=abc")
def mpirun_slurm_ntasks(work):
    """refused, no bash error"""
    return refused(wrapper(work, env={"SLURM_NTASKS": "abc"}),
                   "ringattn-mpirun.sh:", {}, work)


@case("mpirun-hostfile-slots", "ringattn-mpirun.sh -f with a line "
      "`localhost slots=two`")
def mpirun_hostfile_slots(work):
    """refused, naming the line"""
    with open(os.path.join(work, "hosts"), "w") as f:
        f.write("localhost slots=two\n")
    return refused(wrapper(work, "-f", "hosts"), "ringattn-mpirun.sh:",
                   md5s(work), work)


@case("mpirun-seq-text", "ringattn-mpirun.sh with SEQ=1.5")
def mpirun_seq_text(work):
    """refused before gen"""
    return refused(wrapper(work, env={"SEQ": "1.5"}), "ringattn-mpirun.sh:",
                   {}, work)


@case("mpirun-input-exists", "ringattn-mpirun.sh beside an existing "
      "ringattn-in.h5, then an existing ringattn-out.h5 (issue 39, class 10)")
def mpirun_input_exists(work):
    """each refused before gen, the file unchanged (was: replaced); with
    --force both are replaced and verify passes"""
    lines = []
    for name in ("ringattn-in.h5", "ringattn-out.h5"):
        with open(os.path.join(work, name), "w") as f:
            f.write("the user's\n")
        lines.append(refused(wrapper(work), "ringattn-mpirun.sh:",
                             md5s(work), work))
        os.rename(os.path.join(work, name), os.path.join(work, "kept"))
    for name in ("ringattn-in.h5", "ringattn-out.h5"):
        with open(os.path.join(work, name), "w") as f:
            f.write("the user's\n")
    r = wrapper(work, "--force")
    check(r.returncode == 0 and ": PASS" in r.stdout,
          f"--force: exit {r.returncode}: {r.stderr[-300:]}")
    return lines[0]


def shim(work, name, then):
    """A folder holding a launcher `name` that, for a `run` step, writes
    its pid into work/run.pid and waits until it is signalled, and
    otherwise runs the shell text `then` (its arguments in "$@")."""
    folder = os.path.join(work, "shim")
    os.mkdir(folder)
    with open(os.path.join(folder, name), "w") as f:
        f.write("#!/bin/sh\n"
                'case " $* " in *" run "*)\n'
                f'  echo $$ > {work}/run.pid; exec sleep infinity ;;\n'
                f"esac\n{then}\n")
    os.chmod(os.path.join(folder, name), 0o755)
    return folder


def interrupt_run_step(work, cmd, env):
    """cmd (with env) signalled (SIGTERM) while its run step runs (a shim's
    `run`): (exit status, stderr, whether the step was left running)."""
    pid_file, err_file = (os.path.join(work, n) for n in ("run.pid", "err"))
    with open(err_file, "w") as err:  # not a pipe: a step left holds it
        p = subprocess.Popen(cmd, cwd=work, env=env,
                             stdout=subprocess.DEVNULL, stderr=err)
    try:
        while not os.path.exists(pid_file) and p.poll() is None:
            time.sleep(0.01)
        check(p.poll() is None, f"ended before its run step: {p.returncode}")
        while not open(pid_file).read().endswith("\n"):
            time.sleep(0.01)
        step = int(open(pid_file).read())
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=bound(60))
        alive = running(step)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if os.path.exists(pid_file):
            subprocess.run(["pkill", "-KILL", "-F", pid_file])
    return p.returncode, open(err_file).read(), alive


@case("mpirun-interrupt", "SIGTERM to ringattn-mpirun.sh while its run "
      "step runs, on the input it generated (issue 39, class 10)")
def mpirun_interrupt(work):
    """exit 143; the run step ends, the generated input goes (was: the
    script ended at once, the input and the step left)"""
    folder = shim(work, "mpirun", f'exec {shutil.which("mpirun")} "$@"')
    env = {**ENV, "SEQ": "128", "HEADS": "2", "DIM": "16",
           "PATH": folder + os.pathsep + ENV["PATH"]}
    code, err, alive = interrupt_run_step(
        work, [script("ringattn-mpirun.sh"), "-b", BUILD, "-n", "1", "-w",
               "out"], env)
    check(code == 143, f"exit {code}, not 143: {err[-300:]}")
    check(not alive, "the run step was left running")
    left = os.listdir(os.path.join(work, "out"))
    check(not left, f"left in the work folder: {left}")
    return err.strip().splitlines()[-1]


@case("mpirun-bad-flag", "ringattn-mpirun.sh -x")
def mpirun_bad_flag(work):
    """one line, not getopts' message and the usage"""
    return refused(wrapper(work, "-x"), "ringattn-mpirun.sh:", {}, work)


# ---- bench-sweep.sh ---------------------------------------------------------

def sweep(work, *args, **kw):
    return sh([script("bench-sweep.sh"), "-b", BUILD, *args], work, **kw)


@case("sweep-ranks-text", "bench-sweep.sh -r two")
def sweep_ranks_text(work):
    """refused, no bash error"""
    return refused(sweep(work, "-r", "two"), "bench-sweep.sh:", {}, work)


@case("sweep-ranks-zero", "bench-sweep.sh -r 0 (mpirun -np 0 takes every "
      "slot)")
def sweep_ranks_zero(work):
    """refused"""
    return refused(sweep(work, "-r", "0"), "bench-sweep.sh:", {}, work)


@case("sweep-out-missing", "bench-sweep.sh -o missing/x.json")
def sweep_out_missing(work):
    """refused before the first point"""
    return refused(sweep(work, "-r", "1", "-o", "missing/x.json", "--",
                         *TINY), "bench-sweep.sh:", {}, work)


@case("sweep-json-option", "bench-sweep.sh -- --json x.json")
def sweep_json_option(work):
    """refused: the sweep writes the JSON itself"""
    return refused(sweep(work, "-r", "1", "--", "--json", "x.json"),
                   "bench-sweep.sh:", {}, work)


@case("sweep-out-exists", "bench-sweep.sh -o sw.json onto an existing "
      "sw.json, and -- --csv all.csv onto an existing all.csv (issue 39, "
      "class 10)")
def sweep_out_exists(work):
    """each refused before the first point, the file unchanged"""
    lines = []
    for name, opts in (("sw.json", []), ("all.csv", ["--csv", "all.csv"])):
        with open(os.path.join(work, name), "w") as f:
            f.write("the user's\n")
        lines.append(refused(sweep(work, "-r", "1", "-o", "x.json", "--",
                                   *TINY, *opts) if opts else
                             sweep(work, "-r", "1", "-o", name, "--", *TINY),
                             "bench-sweep.sh:", md5s(work), work))
    return lines[0]


@case("sweep-plot-names", "bench-sweep.sh -o x.json -p in a folder holding "
      "bench-gflops.png and bench-scaling.png (issue 39, class 10)")
def sweep_plot_names(work):
    """the charts are x-gflops.png and x-scaling.png; the folder's charts
    stay (was: replaced); a second sweep refuses the existing charts"""
    for name in ("bench-gflops.png", "bench-scaling.png"):
        with open(os.path.join(work, name), "w") as f:
            f.write("the project's figure\n")
    before = md5s(work)
    r = sweep(work, "-r", "1", "-o", "x.json", "-p", "--", *TINY, "--reps",
              "1")
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr[-300:]}")
    after = md5s(work)
    check(all(after[k] == v for k, v in before.items()),
          "the folder's charts were rewritten")
    check({"x-gflops.png", "x-scaling.png"} <= set(after),
          f"charts: {sorted(after)}")
    os.unlink(os.path.join(work, "x.json"))
    return refused(sweep(work, "-r", "1", "-o", "x.json", "-p", "--", *TINY),
                   "bench-sweep.sh:", md5s(work), work)


@case("sweep-csv", "bench-sweep.sh -r \"1 2\" -- --csv all.csv (issue 39, "
      "class 10)")
def sweep_csv(work):
    """all.csv holds one header and the rows of both points (was: the
    last point's alone)"""
    r = sweep(work, "-r", "1 2", "-o", "sw.json", "--", *TINY, "--reps", "1",
              "--no-yardsticks", "--csv", "all.csv")
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr[-300:]}")
    with open(os.path.join(work, "all.csv")) as f:
        lines = f.read().splitlines()
    check(len(lines) == 3 and lines[0].startswith("ranks,") and
          [l.split(",")[0] for l in lines[1:]] == ["1", "2"],
          f"all.csv: {lines}")
    return f"{len(lines)} lines: header, P = 1, P = 2"


@case("sweep-plot-no-yardsticks", "bench-sweep.sh -p -- --no-yardsticks "
      "(issue 39, class 20)")
def sweep_plot_no_yardsticks(work):
    """refused before the first point (was: every point ran, then the
    plot refused)"""
    return refused(sweep(work, "-r", "1 2", "-o", "sw.json", "-p", "--",
                         *TINY, "--no-yardsticks"), "bench-sweep.sh:", {},
                   work)


# ---- ompi-keep.sh -----------------------------------------------------------

@case("ompi-keep-trap", "a bash script with an EXIT trap of its own that "
      "sources ompi-keep.sh and exits 3 (issue 39, class 20)")
def ompi_keep_trap(work):
    """the script's trap runs, with status 3 (was: replaced), and
    ompi-keep's folder goes"""
    body = ("trap 'echo \"own trap, status $?\"' EXIT\n"
            f". {script('ompi-keep.sh')}\n"
            '[ -d "$ra_ompi_keep" ] && echo kept\n'
            "exit 3\n")
    r = sh(["bash", "-c", body], work, env={"TMPDIR": work})
    check(r.returncode == 3 and r.stdout.split("\n")[:2] ==
          ["kept", "own trap, status 3"],
          f"exit {r.returncode}, stdout {r.stdout!r}: {r.stderr[-300:]}")
    check(not os.listdir(work), f"left: {os.listdir(work)}")
    return "kept, then: own trap, status 3"


# ---- bench-ab.sh ------------------------------------------------------------

def ab(work, *args):
    return sh([script("bench-ab.sh"), *args], work)


@case("ab-missing-binary", "bench-ab.sh -a missing -b ringattn")
def ab_missing_binary(work):
    """refused before any run"""
    return refused(ab(work, "-a", "missing", "-b", RINGATTN, "--", *TINY),
                   "bench-ab.sh:", {}, work)


@case("ab-rounds-text", "bench-ab.sh -n two")
def ab_rounds_text(work):
    """refused, no bash error"""
    return refused(ab(work, "-a", RINGATTN, "-b", RINGATTN, "-n", "two"),
                   "bench-ab.sh:", {}, work)


@case("ab-alternates", "bench-ab.sh -a X -b X -n 2 -r 1 (one binary twice)")
def ab_alternates(work):
    """two rounds, each A then B, and the median of B/A (the benches
    without their yardsticks, which bench-ab.sh does not read: a few
    seconds each)"""
    r = ab(work, "-a", RINGATTN, "-b", RINGATTN, "-n", "2", "-r", "1", "--",
           *TINY, "--no-yardsticks", "--reps", "1")
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr[-300:]}")
    rounds = [l for l in r.stdout.splitlines() if l.startswith("round ")]
    check(len(rounds) == 2, f"not two rounds: {r.stdout!r}")
    check("B/A median" in r.stdout, f"no median: {r.stdout!r}")
    check(os.listdir(work) == [], "left files behind")
    return rounds[-1]


@case("sweep-interrupt", "SIGTERM to bench-sweep.sh during a point")
def sweep_interrupt(work):
    """exit 143, the point's ranks end, the temporary folder goes (a
    point that outlives the signal is caught by the wait's bound, which is
    far above the time a loaded machine needs)"""
    tmp = os.path.join(work, "tmp")
    os.mkdir(tmp)
    p = subprocess.Popen([script("bench-sweep.sh"), "-b", BUILD, "-r", "1",
                          "-o", "sw.json", "--", "--seq", "16384", "--heads",
                          "8", "--dim", "64", "--reps", "20"], cwd=work,
                         env={**ENV, "TMPDIR": tmp}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    check(line.startswith("+ mpirun"), f"no point started: {line!r}")
    time.sleep(1.5)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=bound(120))
    except subprocess.TimeoutExpired:
        # the point's mpirun holds the pipes open: it goes first
        subprocess.run(["pkill", "-KILL", "-f", tmp])
        p.kill()
        p.communicate()
        raise Failure("still running 120 s after SIGTERM")
    secs = time.time() - t0
    time.sleep(0.5)
    ranks = subprocess.run(["pgrep", "-f", tmp], capture_output=True,
                           text=True).stdout.split()
    subprocess.run(["pkill", "-KILL", "-f", tmp])
    check(p.returncode == 143, f"exit {p.returncode}, not 143: "
          f"{err[-300:]}")
    check(not ranks, f"processes of the point left: {ranks}")
    check(not os.listdir(tmp), f"left in TMPDIR: {os.listdir(tmp)}")
    return f"exit 143 after {secs:.1f} s: {err.strip().splitlines()[-1]}"


# ---- ringattn.slurm, scaling-study.py ----------------------------------------

@case("slurm-outside", "ringattn.slurm run outside an allocation")
def slurm_outside(work):
    """refused, no unbound-variable error"""
    env = {k: v for k, v in ENV.items() if not k.startswith("SLURM_")}
    r = subprocess.run(["bash", script("ringattn.slurm")], cwd=work, env=env,
                       capture_output=True, text=True, timeout=bound(60))
    return refused(r, "ringattn.slurm:", {}, work)


@case("slurm-interrupt", "SIGTERM (scancel) to ringattn.slurm while its run "
      "step runs, on the input it generated (srun: a stand-in; issue 39, "
      "class 10)")
def slurm_interrupt(work):
    """exit 143; the step ends, the generated input goes (was: left)"""
    folder = shim(work, "srun", 'case "$*" in --mpi=list) exit 0 ;; esac\n'
                  'while [ $# -gt 0 ]; do case "$1" in -*) shift ;; '
                  '*) break ;; esac; done\nexec "$@"')
    env = {**ENV, "SLURM_JOB_ID": "1", "SEQ": "128", "RINGATTN": RINGATTN,
           "IN": os.path.join(work, "out", "in.h5"),
           "OUT": os.path.join(work, "out", "out.h5"),
           "PATH": folder + os.pathsep + ENV["PATH"]}
    os.mkdir(os.path.join(work, "out"))
    code, err, alive = interrupt_run_step(
        work, ["bash", script("ringattn.slurm")], env)
    check(code == 143, f"exit {code}, not 143: {err[-300:]}")
    check(not alive, "the run step was left running")
    left = os.listdir(os.path.join(work, "out"))
    check(not left, f"left in the job's folder: {left}")
    return err.strip().splitlines()[-1]


# The bench options of every study here: its points' yardsticks (seconds
# each) are no part of what a study does with its points (issue 45).
STUDY_BENCH = ["--no-yardsticks"]


def study(work, *args):
    return sh([PY, script("scaling-study.py"), "--launcher", "local",
               "--nodes", "1", "--ranks-per-node", "1", "--scaling", "strong",
               "--seq", "128", "--repeats", "1", "--reps", "1", "--build",
               BUILD, *args, "--", *STUDY_BENCH, "--heads", "2", "--dim",
               "16"], work)


@case("study-timeout", "scaling-study.py --timeout=-1")
def study_timeout(work):
    """refused (exit 2), not a study of timed-out points (exit 1)"""
    return refused(study(work, "--timeout=-1", "--out-dir", "st"),
                   "ringattn:", {}, work)


@case("study-outdir-file", "scaling-study.py --out-dir on a regular file")
def study_outdir_file(work):
    """refused (exit 2) before the study, the file untouched"""
    with open(os.path.join(work, "st"), "w") as f:
        f.write("the user's\n")
    return refused(study(work, "--out-dir", "st"), "ringattn:",
                   md5s(work), work)


def study_json(work, out_dir="st"):
    with open(os.path.join(work, out_dir, "scaling.json")) as f:
        return json.load(f)["points"]


@case("study-outputs-exist", "scaling-study.py --out-dir st where st holds "
      "a study's scaling.json; scaling-plot.py --out-dir onto existing "
      "charts (issue 39, class 10)")
def study_outputs_exist(work):
    """each refused before any work, the files unchanged (was: replaced)"""
    os.mkdir(os.path.join(work, "st"))
    with open(os.path.join(work, "st", "scaling.json"), "w") as f:
        json.dump({"meta": {}, "points": []}, f)
    line = refused(study(work, "--out-dir", "st"), "ringattn:", md5s(work),
                   work)
    with open(os.path.join(work, "st", "scaling-speedup.png"), "w") as f:
        f.write("the project's figure\n")
    refused(sh([PY, script("scaling-plot.py"), "st/scaling.json"], work),
            "ringattn: scaling-plot:", md5s(work), work)
    return line


@case("study-root", "scaling-study.py as root, without Open MPI's "
      "OMPI_ALLOW_RUN_AS_ROOT variables in the environment")
def study_root(work):
    """every point finishes: the study gives its mpirun the variables, as
    ringattn-mpirun.sh does (was: every point failed)"""
    if os.geteuid() != 0:
        return "not root: nothing to show"
    env = {k: v for k, v in ENV.items()
           if not k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}
    r = subprocess.run([PY, script("scaling-study.py"), "--launcher",
                        "local", "--nodes", "1", "--ranks-per-node", "1,2",
                        "--scaling", "strong", "--seq", "128", "--repeats",
                        "1", "--reps", "1", "--build", BUILD, "--out-dir",
                        "st", "--", *STUDY_BENCH, "--heads", "2", "--dim",
                        "16"], cwd=work, env=env, capture_output=True,
                       text=True, timeout=bound(300))
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr[-500:]}")
    status = [p["status"] for p in study_json(work)]
    check(status == ["ok", "ok"], f"points: {status}")
    return "2 points ok"


@case("study-failed-point", "scaling-study.py where the P = 2 point fails "
      "(ulysses over 1 head)")
def study_failed_point(work):
    """exit 1; the failed row keeps the bench's own `ringattn:` line whole
    (was: the last 300 characters of mpirun's banner, cut mid-word); the
    charts are drawn with the failed point marked"""
    bench = ["bench", "--seq", "128", "--threads", "1", "--reps", "1",
             "--heads", "1", "--dim", "16", "--strategy", "ulysses"]
    own = sh(["mpirun", "-np", "2", RINGATTN, *bench], work)
    line = e2e_util.ours(own.stderr)
    check(own.returncode == 2 and len(line) == 1,
          f"bench at P = 2 is refused: {own.stderr[-300:]}")
    r = sh([PY, script("scaling-study.py"), "--launcher", "local", "--nodes",
            "1", "--ranks-per-node", "1,2", "--scaling", "strong", "--seq",
            "128", "--repeats", "1", "--reps", "1", "--build", BUILD,
            "--out-dir", "st", "--", *STUDY_BENCH, "--heads", "1", "--dim",
            "16", "--strategy", "ulysses"], work, timeout=300)
    check(r.returncode == 1, f"exit {r.returncode}: {r.stderr[-300:]}")
    status = {p["ranks"]: p["status"] for p in study_json(work)}
    check(status == {1: "ok", 2: f"exit 2: {line[0]}"},
          f"rows: {status}, want P = 2 to say 'exit 2: {line[0]}'")
    check("the charts mark 1 failed point" in r.stdout and
          os.path.exists(os.path.join(work, "st", "scaling-speedup.png")),
          f"charts with the failed point marked: {r.stdout[-300:]}")
    return status[2]


@case("study-gemm-env", "scaling-study.py with RINGATTN_GEMM=openblas, its "
      "P = 2 point failing (ulysses over 1 head)")
def study_gemm_env(work):
    """every mpirun passes the variable on (-x RINGATTN_GEMM: on other
    nodes it would be unset, and the ranks refuse mixed engines); the rows
    name the engine and precision that ran"""
    r = sh([PY, script("scaling-study.py"), "--launcher", "local", "--nodes",
            "1", "--ranks-per-node", "1,2", "--scaling", "strong", "--seq",
            "128", "--repeats", "1", "--reps", "1", "--build", BUILD,
            "--out-dir", "st", "--", *STUDY_BENCH, "--heads", "1", "--dim",
            "16", "--strategy", "ulysses"], work,
           env={"RINGATTN_GEMM": "openblas"},
           timeout=300)
    check(r.returncode == 1, f"exit {r.returncode}: {r.stderr[-300:]}")
    rows = {p["ranks"]: p for p in study_json(work)}
    check(rows[1].get("gemm") == "openblas" and
          rows[1].get("precision") == "fp32",
          f"P = 1 row: gemm {rows[1].get('gemm')}, precision "
          f"{rows[1].get('precision')}")
    check(" -x RINGATTN_GEMM " in rows[2].get("command", ""),
          f"P = 2 command: {rows[2].get('command')}")
    with open(os.path.join(work, "st", "scaling.csv")) as f:
        head = f.readline().strip().split(",")
    check("gemm" in head and "precision" in head, f"CSV columns: {head}")
    return "rows say openblas, fp32; mpirun -x RINGATTN_GEMM"


@case("study-oversubscribed", "scaling-study.py with more ranks on the node "
      "than it has cores")
def study_oversubscribed(work):
    """one `ringattn: warning:` line on stderr naming the point, the row
    says oversubscribed, the study goes on"""
    R = (os.cpu_count() or 1) + 1
    r = study(work, "--ranks-per-node", str(R), "--out-dir", "st")
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr[-300:]}")
    check(len(lines) == 1 and lines[0].startswith("ringattn: warning: "
                                                  "scaling-study:") and
          f"1x{R}x1" in lines[0], f"stderr: {lines}")
    check([p["oversubscribed"] for p in study_json(work)] == [True],
          "the row says oversubscribed")
    return lines[0]


# ---- permissions -------------------------------------------------------------

def modes_under(umask, paths):
    want = oct(0o666 & ~umask)
    got = {os.path.basename(p): mode_of(p) for p in paths}
    check(all(m == want for m in got.values()),
          f"umask {oct(umask)}: modes {got}, not {want}")
    return got


@case("perm-plot-map", "plot-map.py under umask 002 and 027")
def perm_plot_map(work):
    """the PNG is 0664, then 0640, as open() would make it"""
    for args in (["gen", "--out", "in.h5", *TINY],
                 ["run", "--in", "in.h5", "--out", "out.h5", "--attn-map",
                  "0:8"]):
        r = sh([RINGATTN, *args], work)
        check(r.returncode == 0, f"{args[0]}: {r.stderr}")
    for umask in (0o002, 0o027):
        r = sh([PY, script("plot-map.py"), "out.h5", "map.png", "--force"],
               work, umask=umask)
        check(r.returncode == 0, f"plot-map: {r.stderr}")
        modes_under(umask, [os.path.join(work, "map.png")])
    return "map.png 0o664 under 002, 0o640 under 027"


@case("perm-sweep-plot", "bench-sweep.sh -p (its JSON, bench-plot.py's "
      "PNGs) under umask 027")
def perm_sweep_plot(work):
    """the JSON and both charts are 0640, as open() would make them"""
    r = sweep(work, "-r", "1", "-o", "sw.json", "-p", "--", *TINY, "--reps",
              "1", umask=0o027)
    check(r.returncode == 0, f"sweep: exit {r.returncode}: {r.stderr}")
    got = modes_under(0o027, [os.path.join(work, n) for n in
                              ("sw.json", "sw-gflops.png", "sw-scaling.png")])
    return ", ".join(f"{k} {v}" for k, v in got.items())


@case("perm-study", "scaling-study.py (JSON, CSV, scaling-plot's charts) "
      "under umask 027")
def perm_study(work):
    """every output gets the umask's permissions"""
    r = sh([PY, script("scaling-study.py"), "--launcher", "local", "--nodes",
            "1", "--ranks-per-node", "1", "--scaling", "strong", "--seq",
            "128", "--repeats", "1", "--reps", "1", "--build", BUILD,
            "--out-dir", "st", "--", *STUDY_BENCH, "--heads", "2", "--dim",
            "16"], work, umask=0o027)
    check(r.returncode == 0, f"study: exit {r.returncode}: {r.stderr}")
    outs = sorted(glob.glob(os.path.join(work, "st", "*")))
    check(len(outs) >= 3, f"outputs: {outs}")
    modes_under(0o027, outs)
    return f"{len(outs)} files, each 0o640"


# ---- driver ------------------------------------------------------------------

def fake_lock():
    """The fake cluster's lock, taken, or None (not root, or held by
    another user for 240 s)."""
    if os.geteuid() != 0:
        return None
    lock = FakeClusterLock("reliability_scripts.py", wait=240)
    try:
        return lock.__enter__()
    except TimeoutError:
        return None


def run_case(name, what, fake_case, fn):
    work = tempfile.mkdtemp(prefix=f"ra_scripts_{name}_")
    t0 = time.time()
    try:
        result, ok = fn(work), True
    except (Failure, subprocess.TimeoutExpired) as e:
        result, ok = str(e), False
    finally:
        if fake_case:
            net_clean(work)
        shutil.rmtree(work, ignore_errors=True)
    result = result.replace(work, "WORK")
    print(f"{'ok' if ok else 'FAIL':4} {name} ({time.time() - t0:.1f} s): "
          f"{result}", flush=True)
    return ok, result


def run_all():
    """Every case: (name, what, docstring, ok, result) in CASES' order. The
    cases without the fake cluster run two at a time in threads (each in
    its own folder, its processes its own), the fake cluster's one after
    the other beside them, under its lock."""
    lock = fake_lock() if any(c[2] for c in CASES) else None
    results = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            local = {i: pool.submit(run_case, *c) for i, c in
                     enumerate(CASES) if not c[2]}
            for i, (name, what, fake_case, fn) in enumerate(CASES):
                if not fake_case:
                    continue
                if lock is None:
                    print(f"SKIP {name}: the fake cluster needs root and "
                          f"{FAKE_CLUSTER_LOCK}")
                    continue
                results[i] = run_case(name, what, fake_case, fn)
            results.update({i: f.result() for i, f in local.items()})
    finally:
        if lock is not None:
            lock.__exit__()
    return [(CASES[i][0], CASES[i][1], CASES[i][3].__doc__, *results[i])
            for i in sorted(results)]


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    t0 = time.time()
    results = run_all()
    failed = [r[0] for r in results if not r[3]]
    if MODE == "table":
        print("\n| # | case | input or fault | asserted | result |")
        print("|---|------|----------------|----------|--------|")
        for i, (name, what, doc, ok, result) in enumerate(results, 1):
            cell = result.replace("|", "\\|")
            print(f"| {i} | `{name}` | {what} | {' '.join(doc.split())} | "
                  f"{'' if ok else 'FAIL: '}`{cell}` |")
    print(f"reliability_scripts: {len(results)} cases, {len(failed)} failed, "
          f"{time.time() - t0:.0f} s")
    for name in failed:
        print("FAIL", name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
