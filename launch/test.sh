#!/usr/bin/env bash
# test.sh: set up, build, and run the whole test suite (unit, MPI at
# P = 1..4, end to end). Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup.sh build
ctest --test-dir build --output-on-failure "$@"
