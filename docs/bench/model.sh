#!/usr/bin/env bash
# model.sh [BUILD_DIR]: the performance model's accuracy matrix of
# docs/PERFORMANCE.md ("The performance model"): `ringattn bench --strategy
# all` measures every applicable strategy per configuration, `ringattn plan
# --json` predicts the same configuration, and docs/bench/model-table.py
# writes predicted, measured and their ratio per case, the median and worst
# |measured/predicted - 1|, and whether the plan's pick is within 10% of the
# fastest measured. Output in docs/bench/model/.
#
# Configurations: P = 1, 2, 4 on shared memory (causal and not, N 4096 to
# 131072; the largest with one head and ring only), and 2 and 4 fake nodes
# (launch/fake-cluster.sh, root; one rank per node) at 400 Mbit/s and
# 1 Gbit/s. The fake nodes share this machine's cores: plan gets --cores.
#
# PLAN_ONLY=1 keeps the bench outputs of an earlier run and redoes only the
# predictions (after a change to the model's constants).
#
# The rates: PROFILE=FILE (a `ringattn probe` profile) when given; else the
# kernel's rate per core measured here first (a one-rank bench) and passed
# as --kernel-rate, with the built-in profile's other figures.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
out=docs/bench/model
fc=launch/fake-cluster.sh
cores=$(nproc)
mkdir -p "$out"
[ "${PLAN_ONLY:-0}" = 1 ] || rm -f "$out"/*.json "$out"/*.txt
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
common=(--heads 4 --dim 64 --reps 3 --warmup 1 --check-rows 1)

if [ -n "${PROFILE:-}" ]; then
  rate=(--profile "$PROFILE")
else # the kernel's rate now: ring at P = 1 over the model's ring efficiency
  "$R" bench --seq 4096 "${common[@]}" --json "$out/kernel-rate.json" \
    > "$out/kernel-rate.txt"
  g=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[0]['gflops'] / 0.95)" "$out/kernel-rate.json")
  rate=(--kernel-rate "$g")
  echo "+ kernel rate per core: $g GFLOP/s"
fi

# one NAME NP NODES LINK PLAN_EXTRA -- BENCH_LAUNCH... -- ARGS...:
# bench, then plan of the same problem at the layout bench used
one() {
  local name=$1 np=$2 nodes=$3 link=$4
  shift 4
  local launch=()
  while [ "$1" != "--" ]; do launch+=("$1"); shift; done
  shift
  echo "+ $name: P=$np nodes=$nodes link=$link $*"
  if [ "${PLAN_ONLY:-0}" != 1 ]; then
    "${launch[@]}" "$R" bench "$@" --json "$out/$name.bench.json" \
      > "$out/$name.bench.txt"
  fi
  local pargs=() skip=0 a # the problem's flags only (not bench's own)
  for a in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$a" in
      --strategy|--reps|--warmup|--check-rows) skip=1 ;;
      *) pargs+=("$a") ;;
    esac
  done
  local lay
  lay=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[0]['layout'])" "$out/$name.bench.json")
  local lr=()
  [ "$link" = none ] || lr=(--link-rate "$link")
  "$R" plan --ranks "$np" --nodes "$nodes" --cores "$cores" "${rate[@]}" \
    "${lr[@]}" --layout "$lay" "${pargs[@]}" --json "$out/$name.plan.json" \
    > "$out/$name.plan.txt"
  # plan's own pick over every layout, for the chosen-vs-fastest column
  "$R" plan --ranks "$np" --nodes "$nodes" --cores "$cores" "${rate[@]}" \
    "${lr[@]}" "${pargs[@]}" --json "$out/$name.pick.json" > /dev/null
}

shm() { # shm NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  one "$name" "$np" 1 none mpirun -np "$np" --oversubscribe -- \
    --strategy all "${common[@]}" "$@"
}
shm p1-n4096 1 --seq 4096
shm p1-n4096-causal 1 --seq 4096 --causal
shm p2-n8192 2 --seq 8192
shm p2-n8192-causal 2 --seq 8192 --causal
shm p4-n8192-causal 4 --seq 8192 --causal
shm p2-n16384-causal 2 --seq 16384 --causal
one p2-n131072-causal-ring 2 1 none mpirun -np 2 -- --strategy ring \
  --seq 131072 --heads 1 --dim 64 --reps 1 --warmup 0 --check-rows 1 --causal

up=0
trap 'if [ "$up" = 1 ]; then $fc down >/dev/null 2>&1 || true; fi' EXIT
nodes() { # nodes K RATE_NAME RATE_BITS: K fake nodes x 1 rank, N = 8192,
          # holding the fake cluster's lock only meanwhile
  local k=$1 rname=$2 bits=$3
  exec 9> /tmp/ra-fake-cluster.lock
  flock 9
  if [ "${PLAN_ONLY:-0}" != 1 ]; then
    $fc up "$k" --rate "$rname" --slots 1 > /dev/null
    up=1
  fi
  # shellcheck disable=SC2046
  # (mpirun-args has --bind-to none: every fake node sees all cores)
  local mpi=(mpirun $([ "$up" = 1 ] && $fc mpirun-args) -np "$k" --map-by node
             -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
  for c in "" --causal; do
    one "fake$k-$rname-n8192${c:+-causal}" "$k" "$k" "$bits" "${mpi[@]}" \
      -- --strategy all "${common[@]}" --seq 8192 $c
  done
  if [ "$up" = 1 ]; then $fc down > /dev/null; fi
  up=0
  flock -u 9
}
if [ "$(id -u)" = 0 ] && [ "${SKIP_NODES:-0}" != 1 ]; then
  nodes 2 400mbit 4e8
  nodes 2 1gbit 1e9
  nodes 4 1gbit 1e9
else
  echo "+ fake nodes skipped (needs root, or SKIP_NODES=1)"
fi

/usr/bin/python3 docs/bench/model-table.py "$out" | tee "$out/table.md"
