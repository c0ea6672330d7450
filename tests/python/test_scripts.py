"""The package's scripts refuse a bad option as the command line does:
exit 2 and exactly one stderr line `ringattn: <script>: ...`, before any
work. The examples are judged in this process (their options() and rank
0's stderr: importing them again would start torch again), at P = 2 only
(rank 0 writes, rank 1 stays silent; the same at every P);
bench/python_overhead.py, which imports neither MPI nor torch before it
has read its options, as a process of its own, at P = 1 only (the same
process at every P). conftest.py: at_p."""
import functools
import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import COMM, agreed

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
RANK = COMM.Get_rank()


@functools.lru_cache(maxsize=None)
def load(relpath):
    """A script of the repository as a module (its main() not run)."""
    spec = importlib.util.spec_from_file_location(
        os.path.splitext(os.path.basename(relpath))[0],
        os.path.join(ROOT, relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE_BAD = [
    (["--seq", "1"], "--seq 1: must be at least 2"),
    (["--print-every", "0"], "--print-every 0: must be at least 1"),
    (["--heads", "0"], "--heads 0: must be at least 1"),
    (["--symbols", "0"], "--symbols 0: must be at least 1"),
    (["--lr", "nan"], "--lr nan: must be above 0"),
    (["--threads", "0"], "--threads 0: must be at least 1"),
    (["--embed", "30", "--heads", "4"], "--embed 30 is not a multiple"),
    (["--stepz", "3"], "unrecognized arguments: --stepz 3"),
]


@pytest.mark.at_p(2)
@pytest.mark.parametrize("argv,text", EXAMPLE_BAD)
def test_example_bad_option(capsys, argv, text):
    """Exit 2, and rank 0 alone writes one `ringattn:` line naming the
    option (before the fix: --print-every 0, --heads 0, --symbols 0 and
    --threads 0 were found only during the work, as a traceback and an
    MPI abort; every message went to stdout)."""
    example = load("examples/train_ringattn.py")
    with pytest.raises(SystemExit) as stop:
        example.options(argv)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    one = (len(lines) == 1 and lines[0].startswith("ringattn: "
                                                    "train_ringattn: ")
           and text in lines[0]) if RANK == 0 else not lines
    agreed(stop.value.code == 2 and one and not out,
           f"exit {stop.value.code}, stderr {lines}, stdout {out!r}")


OVERHEAD_BAD = [
    (["--seq", "0"], "--seq 0: must be at least 1"),
    (["--ranks", "-1"], "--ranks -1: must be at least 1"),
    (["--build", "/nonexistent"], "--build /nonexistent: no ringattn"),
    (["--sek", "8"], "unrecognized arguments: --sek 8"),
]


@pytest.mark.at_p(1)
@pytest.mark.parametrize("argv,text", OVERHEAD_BAD)
def test_overhead_bad_option(argv, text):
    """Exit 2 and one `ringattn:` line on stderr, nothing on stdout (before
    the fix: argparse's two lines, or a traceback and exit 1 once mpirun
    had started)."""
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "python_overhead.py")]
        + argv, capture_output=True, text=True, check=False, timeout=60)
    lines = run.stderr.splitlines()
    agreed(run.returncode == 2 and len(lines) == 1 and not run.stdout
           and lines[0].startswith("ringattn: python_overhead: ")
           and text in lines[0],
           f"exit {run.returncode}, stderr {lines}, stdout {run.stdout!r}")


GPT_BAD = [
    (["--seq", "0"], "--seq 0: expected at least 1"),
    (["--embed", "30", "--heads", "4"], "--embed 30 is not a multiple"),
    (["--text", "/nonexistent"], "--text /nonexistent: no such file"),
    (["--stepz", "3"], "unrecognized arguments: --stepz 3"),
]


@pytest.mark.at_p(2)
@pytest.mark.parametrize("argv,text", GPT_BAD)
def test_gpt_example_bad_option_issue41(capsys, argv, text):
    """examples/gpt_ringattn.py: exit 2 and rank 0 alone writes one
    `ringattn: gpt_ringattn:` line naming the option."""
    example = load("examples/gpt_ringattn.py")
    with pytest.raises(SystemExit) as stop:
        example.options(argv)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    one = (len(lines) == 1 and lines[0].startswith("ringattn: "
                                                    "gpt_ringattn: ")
           and text in lines[0]) if RANK == 0 else not lines
    agreed(stop.value.code == 2 and one and not out,
           f"exit {stop.value.code}, stderr {lines}, stdout {out!r}")


@pytest.mark.at_p(1)
@pytest.mark.parametrize("argv,text", [
    (["--seq", "0"], "--seq 0: expected at least 1"),
    (["--sek", "8"], "unrecognized arguments: --sek 8")])
def test_shard_move_bad_option_issue41(argv, text):
    """bench/shard_move.py: exit 2 and one `ringattn:` line on stderr."""
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "shard_move.py")]
        + argv, capture_output=True, text=True, check=False, timeout=60)
    lines = run.stderr.splitlines()
    agreed(run.returncode == 2 and len(lines) == 1 and not run.stdout
           and lines[0].startswith("ringattn: shard_move: ")
           and text in lines[0],
           f"exit {run.returncode}, stderr {lines}, stdout {run.stdout!r}")
