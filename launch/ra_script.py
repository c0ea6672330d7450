"""ra_script.py: the contract every Python script of ringattn keeps, in one
place: bad input ends with exit 2 and one `ringattn:` line, a failure during
the work with exit 1 and one line, and never with a traceback.

A script raises Refused or Failed with its message and hands its main to
run(); Parser is argparse with errors as one refusal line instead of a usage
block."""
import argparse
import os
import sys


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


def here():
    """The folder of the scripts (source tree or install), for imports."""
    return os.path.dirname(os.path.abspath(__file__))
