#!/usr/bin/env bash
# quickstart.sh: set up, build, and run the main job on the built-in default
# input: generate B=1 N=16384 H=8 D=64, causal ring attention on 2 ranks,
# verify against the fp64 reference. Files go to ./quickstart/, the
# quick start's own folder: a second run replaces them (--force).
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup.sh build
launch/ringattn-mpirun.sh -n 2 -b build -w quickstart --force -- --causal
