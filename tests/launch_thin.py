#!/usr/bin/env python3
"""launch_thin.py RINGATTN SOURCE_DIR [CHECK]: the command line kept plain
and thin, and the records kept out of the source (issue 24, items 3 and 4).

  json     the command links jansson (ldd) and launch/ writes no JSON by
           hand (no fprintf of an escaped quote) nor parses it (none of
           the hand-written reader's json_space/json_expect helpers).
  driver   launch/driver.h holds no runner macros (no #define with token
           pasting, no cli_pass table).
  help     every option of every subcommand's --help is one row (its text
           on one line, at most a default below it), no line over 79
           characters; run, bench and plan --help hold at most 32 lines
           besides their option rows (a new option adds its row and nothing
           else) and list the global options they honour.
  records  bench/records holds JSON only, each file parses, none names an
           absolute machine path (/tmp/..., /work/...); docs/ holds prose
           (Markdown) and pictures (PNG) only, and the README's API example.
  params   no function of launch/ takes more than 8 parameters
           (.ci/longest-functions.py --max-params 8).
  features every score feature of RA_SCORE_FEATURES (ringattn.h) is
           named, in the product's code, only by ringattn.h,
           engine/score_features.c and Python's flash-attention shim
           (issue 42: a feature is one row that everything reads).

Each check prints what it found and exits 1 on the first failure.
"""
import json
import os
import re
import subprocess
import sys

RINGATTN = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])
ONLY = sys.argv[3] if len(sys.argv) > 3 else ""

COMMANDS = ["", "gen", "run", "run --mha", "run --backward", "verify",
            "verify --backward", "info", "bench", "bench --backward",
            "plot-map", "probe", "plan"]
# lines of a --help besides its option rows (bench: 30, its columns and
# the names the forward options point to)
PROSE_MAX = 32
# the global options each command's --help must list
GLOBALS = {"run": ["--ring-order", "--align", "--mpiio-hint"],
           "bench": ["--ring-order"], "plan": ["--align", "--mpiio-hint"]}
HELP_COLUMN = 25


def fail(what):
    print(f"FAIL: {what}")
    sys.exit(1)


def launch_sources():
    d = os.path.join(SRC, "launch")
    for name in sorted(os.listdir(d)):
        if name.endswith((".c", ".h")):
            with open(os.path.join(d, name)) as f:
                yield name, f.read()


def check_json():
    libs = subprocess.run(["ldd", RINGATTN], capture_output=True,
                          text=True).stdout
    if "libjansson" not in libs:
        fail(f"{RINGATTN} does not link libjansson")
    for name, text in launch_sources():
        if re.search(r'fprintf\([^;]*\\"', text):
            fail(f"launch/{name}: JSON written by hand (fprintf of \\\")")
        if re.search(r"json_(space|expect|hex4|utf8)\b", text):
            fail(f"launch/{name}: a hand-written JSON reader")
    print("json: ringattn links jansson; no hand JSON in launch/")


def check_driver():
    with open(os.path.join(SRC, "launch", "driver.h")) as f:
        text = f.read()
    if re.search(r"#define\s+\w+\(.*##", text, re.S) or "cli_pass_run" in text:
        fail("launch/driver.h: a driver-runner macro or cli_pass_run")
    for name, body in launch_sources():
        if "CLI_PASS_STEP" in body:
            fail(f"launch/{name}: uses CLI_PASS_STEP")
    print("driver: no runner macros")


def option_rows(text):
    """Help lines that continue an option's text onto a second line. A
    line indented to the help column is allowed only as a default put
    below, or as the text of an option whose name and value filled the
    line above."""
    bad = []
    lines = text.splitlines()
    for above, line in zip(lines, lines[1:]):
        if not line.startswith(" " * HELP_COLUMN) or not line.strip():
            continue
        if not above.startswith(("  -", " " * HELP_COLUMN)):
            continue  # not a table (a usage line going on)
        named_above = above.strip().startswith("--") and \
            len(above.split()) <= 2
        if not line.strip().startswith("(default") and not named_above:
            bad.append(line.strip())
    return bad


def check_help():
    for cmd in COMMANDS:
        r = subprocess.run([RINGATTN] + cmd.split() + ["--help"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{cmd} --help: exit {r.returncode}")
        n = len(r.stdout.splitlines())
        bad = option_rows(r.stdout)
        if bad:
            fail(f"{cmd} --help: an option's help runs over lines: {bad[0]!r}")
        wide = [l for l in r.stdout.splitlines() if len(l) > 79]
        if wide:
            fail(f"{cmd} --help: a line over 79 characters: {wide[0]!r}")
        prose = n - len(re.findall(r"^  --", r.stdout, re.M))
        if cmd in GLOBALS and prose > PROSE_MAX:
            fail(f"{cmd} --help: {prose} lines besides the option rows "
                 f"(at most {PROSE_MAX} wanted)")
        for g in GLOBALS.get(cmd, []):
            if not re.search(rf"^  {g} ", r.stdout, re.M):
                fail(f"{cmd} --help: no global option {g}")
        print(f"help: {cmd}: {n} lines, one row per option")


def check_records():
    records = os.path.join(SRC, "bench", "records")
    count = 0
    for root, _, files in os.walk(records):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, SRC)
            if not name.endswith(".json"):
                fail(f"{rel}: a record that is not JSON")
            with open(path) as f:
                text = f.read()
            json.loads(text)
            m = re.search(r"(/tmp/|/work/|/home/|/root/)\S*", text)
            if m:
                fail(f"{rel}: names a machine path {m.group(0)}")
            count += 1
    if count == 0:
        fail("bench/records holds no record")
    for root, _, files in os.walk(os.path.join(SRC, "docs")):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), SRC)
            # the README's API example, which the install test builds
            if not name.endswith((".md", ".png")) and \
                    rel != "docs/examples/api_forward.c":
                fail(f"{rel}: docs/ holds prose and pictures only")
    print(f"records: {count} JSON records, no machine paths; docs/ prose "
          "and pictures")


def check_params():
    r = subprocess.run([sys.executable,
                        os.path.join(SRC, ".ci", "longest-functions.py"),
                        "--max-params", "8", os.path.join(SRC, "launch")],
                       capture_output=True, text=True)
    over = [l for l in r.stdout.splitlines() if "parameters, over" in l]
    if r.returncode != 0 or over:
        fail(f"launch/: {over[0] if over else r.stderr.strip()}")
    print("params: no launch/ function takes more than 8 parameters")


# The product files that may name a score feature (docs/DESIGN.md,
# "A score feature"); _compat.py names flash-attention's own keywords.
FEATURE_HOMES = {"include/ringattn.h", "engine/score_features.c",
                 "python/ringattn/_compat.py"}


def check_features():
    with open(os.path.join(SRC, "include", "ringattn.h")) as f:
        table = re.search(r"#define RA_SCORE_FEATURES\(X\)(.*?)\n\n",
                          f.read(), re.S)
    names = re.findall(r"X\((\w+),", table.group(1) if table else "")
    if not names:
        fail("include/ringattn.h: no row in RA_SCORE_FEATURES")
    for name in names:
        word = re.compile(r"\b" + name + r"\b", re.I)
        homes = set()
        for part in ("include", "engine", "comm", "io", "launch", "python"):
            for root, _, files in os.walk(os.path.join(SRC, part)):
                for fn in files:
                    if not fn.endswith((".c", ".h", ".py")):
                        continue
                    path = os.path.join(root, fn)
                    with open(path, errors="replace") as f:
                        if word.search(f.read()):
                            homes.add(os.path.relpath(path, SRC))
        extra = sorted(homes - FEATURE_HOMES)
        if extra:
            fail(f"score feature {name} named outside its row: {extra}")
        print(f"features: {name} named only in {sorted(homes)}")


CHECKS = {"json": check_json, "driver": check_driver, "help": check_help,
          "records": check_records, "params": check_params,
          "features": check_features}
for key, check in CHECKS.items():
    if not ONLY or ONLY == key:
        check()
