#!/usr/bin/env python3
"""doc_commands.py SOURCE_DIR BUILD_DIR [FILE.md ...]: every command block
of the README and docs/*.md runs as written (issue 45).

A command block is a fenced block tagged sh or bash. Each runs with
`bash -e -o pipefail` in a scratch copy of the source tree per document,
where `build` is BUILD_DIR, so `build/ringattn` and `launch/...` mean
what they mean in a checkout and nothing is written into the source
(`ringattn` alone is BUILD_DIR's, on PATH); the blocks of one
document share the folder, in order (a later block may read an earlier
one's files). A block that cannot run here says so on the line before its
fence:

    <!-- doc-test skip: NAME (why) -->

NAME is one of SKIP_NAMES; any other name, or a block that exits
non-zero, fails the test, and so does a README or PERFORMANCE.md longer
than LIMITS. It prints one line per block (document:line, PASS, SKIP or
FAIL and seconds) and the output of a failed block.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Why a block may be left out: each needs what CI does not have, or is
# run whole elsewhere.
SKIP_NAMES = {
    "suite": "the whole test suite or a fresh build (.ci/run runs it)",
    "install": "an installed prefix or a venv (the install tests run them)",
    "cluster": "real nodes, a hostfile or a Slurm cluster",
    "root": "root and fake nodes (the multinode tests run these)",
    "long": "a run of minutes: a benchmark or a training run",
    "fuzz": "clang and minutes of fuzzing (CI replays the corpora)",
    "simgrid": "a build with SimGrid (ringattn-sim)",
    "placeholder": "a file or value the reader supplies",
}
FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"^<!-- doc-test skip: ([\w-]+) \((.+)\) -->$")
BLOCK_TIMEOUT = 120  # s: a guard against a hang, never a verdict on speed
# Documents a reader meets first stay short (issue 45): the README gets a
# newcomer to a first run, PERFORMANCE.md holds the current figures only.
LIMITS = {"README.md": 250, "docs/PERFORMANCE.md": 400}


def blocks(path):
    """(line, language, text, skip name or None) of each fenced block."""
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not FENCE.match(lines[j]):
            j += 1
        prev = lines[start - 1] if start > 0 else ""
        m = SKIP.match(prev)
        skip = m.group(1) if m else None
        if prev.startswith("<!-- doc-test") and not m:
            skip = "malformed"
        yield (start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", skip)
        i = j + 1


def scratch(src, build):
    """A copy of the source tree (less builds and .git: a few MB), so that
    no block writes into the source, with `build` linked to BUILD_DIR."""
    d = tempfile.mkdtemp(prefix="ringattn-doc.")
    for name in os.listdir(src):
        if name.startswith(("build", ".")):
            continue
        path = os.path.join(src, name)
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(d, name), symlinks=True)
        else:
            shutil.copy2(path, d)
    os.symlink(os.path.abspath(build), os.path.join(d, "build"))
    return d


def environment(build):
    """The blocks' environment: MPI as root and oversubscribed, one thread
    per rank, and `ringattn` on PATH as an installed one would be."""
    env = dict(os.environ)
    env["PATH"] = os.path.abspath(build) + os.pathsep + env.get("PATH", "")
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    return env


def run_block(text, work, build):
    """(passed, why not, output) of one block; a block still running after
    BLOCK_TIMEOUT is ended with everything it started."""
    p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", text],
                         cwd=work, env=environment(build), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return False, f"no end within {BLOCK_TIMEOUT} s", out
    return p.returncode == 0, f"exit {p.returncode}", out


def run_document(src, build, doc):
    """The number of failed blocks of one document."""
    rel = os.path.relpath(doc, src)
    failed = 0
    work = None
    try:
        for line, lang, text, skip in blocks(doc):
            where = f"{rel}:{line}"
            if lang not in ("sh", "bash"):
                continue
            if skip is not None:
                if skip not in SKIP_NAMES:
                    print(f"FAIL {where}: unknown skip name '{skip}' "
                          f"(known: {', '.join(sorted(SKIP_NAMES))})")
                    failed += 1
                else:
                    print(f"SKIP {where}: {skip}")
                continue
            work = work or scratch(src, build)
            t0 = time.monotonic()
            ok, why, out = run_block(text, work, build)
            dt = time.monotonic() - t0
            if ok:
                print(f"PASS {where} ({dt:.1f} s)")
                continue
            failed += 1
            print(f"FAIL {where} ({why}, {dt:.1f} s):\n{text}--- output:\n"
                  f"{out[-4000:]}")
    finally:
        if work:
            shutil.rmtree(work, ignore_errors=True)
    return failed


def too_long(src):
    """The number of documents over their length (LIMITS)."""
    over = 0
    for name, limit in LIMITS.items():
        with open(os.path.join(src, name)) as f:
            n = len(f.read().splitlines())
        if n > limit:
            print(f"FAIL {name}: {n} lines, more than its {limit}")
            over += 1
    return over


def main():
    src, build = os.path.abspath(sys.argv[1]), sys.argv[2]
    docs = sys.argv[3:] or ([os.path.join(src, "README.md")] +
                            sorted(glob.glob(os.path.join(src, "docs",
                                                          "*.md"))))
    failed = too_long(src)
    failed += sum(run_document(src, build, os.path.abspath(d)) for d in docs)
    print(f"doc commands: {failed} block(s) failed" if failed else
          "doc commands: every block ran")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
