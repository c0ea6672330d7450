#!/usr/bin/env bash
# probe.sh [BUILD_DIR]: the machine profiles quoted in docs/PERFORMANCE.md
# ("Machine profile"), on an otherwise idle machine: `ringattn probe` at
# P = 1, 2 and 4 over shared memory, then on 2 fake nodes of 2 ranks at
# 400 Mbit/s (root; skipped otherwise). Each profile goes to
# bench/records/probe-<name>.json, the printed table to the terminal; the
# I/O rates are those of bench/records (a scratch file, removed).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
out=bench/records
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
p() { # p NAME MPIRUN_ARGS...
  local name=$1; shift
  local args=(probe --dim 64,128 --score dot,gaussian,additive --dir "$out"
              --out "$out/probe-$name.json" --force)
  echo "+ mpirun $* ringattn ${args[*]}"
  mpirun "$@" "$R" "${args[@]}"
}
p p1 -np 1
p p2 -np 2
p p4 -np 4 --oversubscribe
if [ "$(id -u)" = 0 ]; then
  flock /tmp/ra-fake-cluster.lock bash -c '
    set -e
    fc=launch/fake-cluster.sh
    trap "$fc down >/dev/null" EXIT
    $fc up 2 --rate 400mbit --slots 2 >/dev/null
    '"$(declare -f p); R=$R; out=$out"'
    p 2nodes-400mbit $($fc mpirun-args) -np 4 --map-by node'
fi
