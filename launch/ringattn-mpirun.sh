#!/usr/bin/env bash
# ringattn-mpirun.sh: generate, run and verify one problem with mpirun.
#
#   launch/ringattn-mpirun.sh [-n RANKS] [-b BUILD_DIR] [-w WORKDIR] [-- RUN_OPTIONS...]
#
# Environment: SEQ (default 16384), HEADS (8), DIM (64), SEED (1), and
# MPIRUN_FLAGS for site flags (e.g. "--mca btl self,tcp" or a hostfile).
# Every command is echoed before it runs; the first failure stops the script.
set -euo pipefail

ranks=2
build=build
work=.
while getopts "n:b:w:h" opt; do
  case "$opt" in
    n) ranks=$OPTARG ;;
    b) build=$OPTARG ;;
    w) work=$OPTARG ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift

ringattn=$build/ringattn
[ -x "$ringattn" ] || { echo "ringattn-mpirun.sh: no $ringattn; build first" >&2; exit 2; }
mkdir -p "$work"
in=$work/ringattn-in.h5
out=$work/ringattn-out.h5

# Open MPI refuses root without these; harmless for other users.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
extra=()
if [ "$ranks" -gt "$(nproc)" ]; then extra+=(--oversubscribe); fi
# shellcheck disable=SC2206
site=(${MPIRUN_FLAGS:-})

run() { echo "+ $*"; "$@"; }
run mpirun -np "$ranks" "${extra[@]}" "${site[@]}" "$ringattn" gen --out "$in" --force \
    --seq "${SEQ:-16384}" --heads "${HEADS:-8}" --dim "${DIM:-64}" --seed "${SEED:-1}"
run mpirun -np "$ranks" "${extra[@]}" "${site[@]}" "$ringattn" run --in "$in" --out "$out" --force "$@"
run mpirun -np "$ranks" "${extra[@]}" "${site[@]}" "$ringattn" verify --in "$in" --out "$out"
