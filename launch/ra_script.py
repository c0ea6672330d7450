"""ra_script.py: the contract every Python script of ringattn keeps, in one
place: bad input ends with exit 2 and one `ringattn:` line, a failure during
the work with exit 1 and one line, and never with a traceback.

A script raises Refused or Failed with its message and hands its main to
run(); Parser is argparse with errors as one refusal line instead of a usage
block; write_atomic() writes every output file whole or not at all, with
the permissions the umask gives a new file; FakeClusterLock is the lock
every user of launch/fake-cluster.sh's nodes holds."""
import argparse
import fcntl
import os
import sys
import tempfile
import time


class Refused(Exception):
    """Bad input: exit 2."""


class Failed(Exception):
    """A failure during the work: exit 1."""


class Parser(argparse.ArgumentParser):
    """argparse whose mistakes are refusals (one line, exit 2)."""

    def error(self, message):
        raise Refused(f"{self.prog}: {message}")


def run(main, prog):
    """Calls main(argv) and exits under the contract; main returns 0 or
    None on success, or another exit code."""
    try:
        code = main(sys.argv[1:])
    except Refused as e:
        code, line = 2, str(e)
    except Failed as e:
        code, line = 1, str(e)
    except KeyboardInterrupt:
        code, line = 1, f"{prog}: interrupted"
    except Exception as e:  # the promise: never a traceback
        code, line = 1, f"{prog}: failed: {type(e).__name__}: {e}"
    else:
        sys.exit(code or 0)
    print(f"ringattn: {line}", file=sys.stderr)
    sys.exit(code)


def new_file_mode():
    """The mode open() gives a new file under this process's umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path, write, binary=False):
    """Writes path whole or not at all: write(f) fills a temporary file
    beside it (same folder, so the rename is atomic), which is flushed to
    disk, given the umask's permissions (mkstemp makes it 0600) and renamed
    onto path, then the folder is flushed. On any failure or interrupt the
    temporary file is removed and path keeps what it held. Raises OSError
    or whatever write raises."""
    folder, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.tmp.", dir=folder or ".")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), new_file_mode())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_folder(folder or ".")


def fsync_folder(folder):
    """Flushes a folder's entries (a rename in it) to disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def here():
    """The folder of the scripts (source tree or install), for imports."""
    return os.path.dirname(os.path.abspath(__file__))


# Held by whoever uses the fake cluster (docs/MULTINODE.md, "One user at a
# time"); launch/fake-cluster.sh names the same file.
FAKE_CLUSTER_LOCK = "/tmp/ra-fake-cluster.lock"
LOCK_POLL_S = 0.2


def lock_holders(path=FAKE_CLUSTER_LOCK):
    """The pids holding flock on path, as /proc/locks lists them."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    want = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev),
                             st.st_ino)
    return [int(w[4]) for w in map(str.split, lines)
            if len(w) > 5 and w[1] == "FLOCK" and w[5] == want]


def ancestors():
    """This process and its ancestors, nearest first."""
    pid, seen = os.getpid(), []
    while pid > 1:
        seen.append(pid)
        try:
            with open(f"/proc/{pid}/status") as f:
                pid = int(next(l for l in f if l.startswith("PPid:"))
                          .split()[1])
        except (OSError, StopIteration, ValueError):
            break
    return seen


def holder_text(pid, path=FAKE_CLUSTER_LOCK):
    """Who pid is: what it wrote into the lock file ("PID WHAT"), else its
    command line."""
    try:
        with open(path) as f:
            first, _, what = f.readline().strip().partition(" ")
        if first == str(pid) and what:
            return what
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            text = f.read().decode(errors="replace")
        return " ".join(text.replace("\0", " ").split())[:160]
    except OSError:
        return "ended"


class FakeClusterLock:
    """The fake cluster's lock for a with-block, taken as `what` (a short
    description others see while they wait). Waits for another user,
    saying so on stderr each time the holder changes; gives up after
    `wait` seconds (None: never) with TimeoutError. A process whose caller
    already holds the lock (an ancestor) works under it."""

    def __init__(self, what, wait=None, path=FAKE_CLUSTER_LOCK):
        self.what, self.wait, self.path = what, wait, path
        self.file = None

    def __enter__(self):
        if set(lock_holders(self.path)) & set(ancestors()):
            return self
        self.file = open(self.path, "a+")
        deadline = None if self.wait is None else time.monotonic() + self.wait
        said = None
        while True:
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            if deadline is not None and time.monotonic() > deadline:
                self.file.close()
                self.file = None
                raise TimeoutError(f"the fake cluster is still held after "
                                   f"{self.wait:g} s")
            holders = lock_holders(self.path)
            if holders and holders[0] != said:
                said = holders[0]
                print(f"{os.path.basename(sys.argv[0])}: waiting for the "
                      f"fake cluster held by PID {said} "
                      f"({holder_text(said, self.path)})", file=sys.stderr,
                      flush=True)
            time.sleep(LOCK_POLL_S)
        self.file.truncate(0)
        self.file.write(f"{os.getpid()} {self.what}\n")
        self.file.flush()
        return self

    def __exit__(self, *exc):
        if self.file is not None:
            self.file.close()
            self.file = None
        return False
