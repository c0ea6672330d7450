#!/usr/bin/env python3
"""launch_thin.py RINGATTN SOURCE_DIR [CHECK]: the command line kept plain
and thin, and the records kept out of the source (issue 24, items 3 and 4).

  json     the command links jansson (ldd) and launch/ writes no JSON by
           hand (no fprintf of an escaped quote) nor parses it (none of
           the hand-written reader's json_space/json_expect helpers).
  driver   launch/driver.h holds no runner macros (no #define with token
           pasting, no cli_pass table).

Each check prints what it found and exits 1 on the first failure.
"""
import os
import re
import subprocess
import sys

RINGATTN = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])
ONLY = sys.argv[3] if len(sys.argv) > 3 else ""


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


CHECKS = {"json": check_json, "driver": check_driver}
for key, check in CHECKS.items():
    if not ONLY or ONLY == key:
        check()
