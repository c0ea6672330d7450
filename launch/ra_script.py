"""ra_script.py: the contract every Python script of ringattn keeps, in one
place: bad input ends with exit 2 and one `ringattn:` line, a failure during
the work with exit 1 and one line, and never with a traceback.

A script raises Refused or Failed with its message and hands its main to
run(); Parser is argparse with errors as one refusal line instead of a usage
block; write_atomic() writes every output file whole or not at all, with
the permissions the umask gives a new file."""
import argparse
import os
import sys
import tempfile


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
