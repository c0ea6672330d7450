#!/usr/bin/python3
"""covering.py CTEST BUILD TESTING_MD: the covering design of
docs/TESTING.md ("The covering design") against the tests ctest lists in
BUILD (the default suite: without the labels valgrind_long and large).

Each table row names test families and the rank counts they run at on
each tile engine; a family NAME runs at P as NAME_pP (oneDNN, the default
engine) or NAME_pP_openblas. Checked: every row's families exist and, taken
together, run at every rank count the row states on each engine; every MPI
test (test_*_mpi) is in some row; OpenBLAS meets each P = 1..4 in some row.
A build without oneDNN runs only the oneDNN column's rank counts (on its
one engine). Prints what fails; exit 1 then, else 0.
"""
import re
import subprocess
import sys

INSTANCE = re.compile(r"(\w+?)_p(\d+)(_openblas)?")
# Families a build may leave out: the Python package (RA_PYTHON=OFF, the
# sanitizer build) and the PyTorch comparison (no torch).
OPTIONAL = {"python", "python_example", "posenc_torch"}


def instances(ctest, build):
    """{family: {engine: set of P}} of the default suite."""
    out = subprocess.run([ctest, "--test-dir", build, "-N", "-LE",
                          "valgrind_long|large"], capture_output=True,
                         text=True, check=True).stdout
    found = {}
    for name in re.findall(r"Test +#\d+: (\S+)", out):
        m = INSTANCE.fullmatch(name)
        if m:
            engine = "openblas" if m[3] else "onednn"
            found.setdefault(m[1], {}).setdefault(engine, set()).add(int(m[2]))
    return found


def ranks(text):
    """'1-4' or '1, 3' as a set of rank counts; '-' none."""
    got = set()
    if text == "-":
        return got
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        got |= set(range(int(lo), int(hi or lo) + 1))
    return got


def rows(path):
    """(feature, oneDNN P, OpenBLAS P, families) of the table."""
    with open(path) as f:
        text = f.read().split("## The covering design", 1)[1]
    table = [l for l in text.split("\n## ", 1)[0].splitlines()
             if l.startswith("| ") and not l.startswith("| feature")]
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        yield (cells[0], ranks(cells[2]), ranks(cells[3]),
               [t.strip() for t in cells[4].split(",")])


def main():
    ctest, build, doc = sys.argv[1:4]
    found = instances(ctest, build)
    both = any("openblas" in e for e in found.values())
    problems, listed, openblas = [], set(), set()
    for feature, onednn, blas, families in rows(doc):
        have = {"onednn": set(), "openblas": set()}
        left_out = [fam for fam in families
                    if fam in OPTIONAL and fam not in found]
        for fam in families:
            listed.add(fam)
            if fam not in found and fam not in OPTIONAL:
                problems.append(f"{feature}: no test {fam}_pP")
            for engine, ps in found.get(fam, {}).items():
                have[engine if both else "onednn"] |= ps
        if left_out:  # the row's rank counts are those of a full build
            print(f"note: {', '.join(left_out)} not in this build")
            continue
        want = {"onednn": onednn, "openblas": blas if both else set()}
        for engine, ps in want.items():
            if not ps <= have[engine]:
                problems.append(f"{feature}: {engine} at P = "
                                f"{sorted(ps - have[engine])} not run by "
                                f"{', '.join(families)}")
        openblas |= blas
    problems += [f"{fam}: an MPI test in no row" for fam in sorted(found)
                 if fam.startswith("test_") and fam.endswith("_mpi") and
                 fam not in listed]
    if both and openblas != {1, 2, 3, 4}:
        problems.append(f"OpenBLAS only at P = {sorted(openblas)}")
    for p in problems:
        print("FAIL", p)
    print(f"covering design: {len(listed)} test families, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
