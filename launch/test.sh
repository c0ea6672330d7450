#!/usr/bin/env bash
# test.sh [CTEST_ARGS...]: set up, build, and run the test suite: unit, MPI
# at P = 1..4, end to end, reliability, valgrind of the quick kernel tests,
# fuzz replays. Without arguments the 20-minute valgrind run of the whole
# test_kernel (label valgrind_long) and the 2 GiB message tests (label
# large) are left out; arguments go to ctest instead (e.g. -L unit, or
# -L valgrind_long). Tests run one per core (-j nproc; the ranks of an MPI
# test count as its PROCESSORS) unless the arguments or CTEST_PARALLEL_LEVEL
# say otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup.sh build
if [ "$#" -eq 0 ]; then
  set -- -LE 'valgrind_long|large'
fi
# Open MPI's shared session folder kept between the tests' jobs
# shellcheck source=ompi-keep.sh
. launch/ompi-keep.sh
jobs=()
case " $* " in
  *" -j"* | *" --parallel"*) ;;
  *) [ -n "${CTEST_PARALLEL_LEVEL:-}" ] || jobs=(-j "$(nproc)") ;;
esac
ctest --test-dir build --output-on-failure "${jobs[@]}" "$@"
