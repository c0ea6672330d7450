# prelude.sh: sourced first by every bench/ script (after `set -euo
# pipefail`). Contract: the working folder becomes the repository root,
# $build is the script's first argument (default build), $R the absolute
# path of its ringattn binary, mpirun may run as root, and
# `bench_json NAME MPIRUN_ARGS... -- BENCH_ARGS...` runs one bench whose
# rows go to $out/NAME.json (the script sets $out).
cd "$(dirname "$0")/.."
build=${1:-build}
R=$(realpath -m "$build")/ringattn
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bench_json() {
  local name=$1; shift
  local mpi=()
  while [ "$1" != "--" ]; do mpi+=("$1"); shift; done
  shift
  echo "+ mpirun ${mpi[*]} ringattn bench $* --json $out/$name.json"
  mpirun "${mpi[@]}" "$R" bench "$@" --json "$out/$name.json"
}
