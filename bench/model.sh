#!/usr/bin/env bash
# model.sh [BUILD_DIR]: the performance model's accuracy matrix of
# docs/PERFORMANCE.md ("The performance model"). For each allocation,
# `ringattn probe` first measures its machine profile there, as a user
# would; then per configuration `ringattn bench --strategy all` measures
# every applicable strategy and `ringattn plan --profile` predicts the same
# problem from that profile. bench/model-table.py writes predicted,
# measured and their ratio per case, the median and worst
# |measured/predicted - 1|, and whether the plan's pick is within 10% of the
# fastest measured (docs/model-table.md). Records in bench/records/model/.
#
# Allocations: P = 1, 2, 4 on shared memory (causal and not, N 4096 to
# 131072; the largest with one head and ring only), and 2 and 4 fake nodes
# (launch/fake-cluster.sh, root; one rank per node) at 400 Mbit/s and
# 1 Gbit/s. The fake nodes share this machine's cores, which MPI cannot
# see; their probe measures the kernel with every rank running, so their
# profile's rate per core is the rate a rank gets there.
#
# PLAN_ONLY=1 keeps the probes and bench outputs of an earlier run and
# redoes only the predictions (after a change to the model). The records
# of docs/model-*table.md live on the branch `records`, not on main: bring
# them back first with `git archive records bench/records/model
# bench/records/model-engine bench/records/model-bf16 | tar -x`.
#
# MODEL_SET=engine runs instead the short set of the tile engines and
# classes (docs/PERFORMANCE.md, "Probing the tile engines"): one probe per
# allocation of both engines and every tile class, then the ring alone on
# cases no rate was measured on: P = 1, N not a multiple of the tile,
# causal windows of 512 and 4096 keys, D = 128, and OpenBLAS by --gemm.
# Records in bench/records/model-engine, the table in
# docs/model-engine-table.md.
#
# MODEL_SET=bf16: one probe at P = 2 of the oneDNN engine in fp32 and bf16,
# then the ring in bf16 (K/V on a bf16 wire) on cases no rate was measured
# on: N = 12000 causal, D = 128 full, a 4096-key window, P = 2 and N =
# 16384 at D = 64, and P = 1. Records in bench/records/model-bf16, the
# table in docs/model-bf16-table.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
set_name=${MODEL_SET:-all}
out=bench/records/model
table=docs/model-table.md
if [ "$set_name" = engine ] || [ "$set_name" = bf16 ]; then
  out=bench/records/model-$set_name
  table=docs/model-$set_name-table.md
fi
fc=launch/fake-cluster.sh
if [ "${PLAN_ONLY:-0}" = 1 ] && ! compgen -G "$out/*.probe.json" > /dev/null; then
  echo "model.sh: PLAN_ONLY=1 needs an earlier run's records in $out" \
       "(git archive records $out | tar -x)" >&2
  exit 2
fi
mkdir -p "$out"
[ "${PLAN_ONLY:-0}" = 1 ] || rm -f "$out"/*.json
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
common=(--heads 4 --dim 64 --reps 5 --warmup 1 --check-rows 1)
profile=
probe_args=(--dim 64 --score dot)

# probe NAME LAUNCH...: the profile of the allocation LAUNCH starts, for
# the configurations that follow
probe() {
  local name=$1
  shift
  profile=$out/$name.probe.json
  [ "${PLAN_ONLY:-0}" = 1 ] && return 0
  echo "+ probe $name"
  "$@" "$R" probe "${probe_args[@]}" --dir "$out" --out "$profile" --force
}

# one NAME NP NODES BENCH_LAUNCH... -- ARGS...: bench, then plan of the
# same problem at the layout bench used
one() {
  local name=$1 np=$2 nodes=$3
  shift 3
  local launch=()
  while [ "$1" != "--" ]; do launch+=("$1"); shift; done
  shift
  echo "+ $name: P=$np nodes=$nodes $*"
  if [ "${PLAN_ONLY:-0}" != 1 ]; then
    "${launch[@]}" "$R" bench "$@" --json "$out/$name.bench.json"
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
  "$R" plan --ranks "$np" --nodes "$nodes" --profile "$profile" \
    --layout "$lay" "${pargs[@]}" --json "$out/$name.plan.json"
  # plan's own pick over every layout, for the chosen-vs-fastest column
  "$R" plan --ranks "$np" --nodes "$nodes" --profile "$profile" \
    "${pargs[@]}" --json "$out/$name.pick.json" > /dev/null
}

shm() { # shm NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  one "$name" "$np" 1 mpirun -np "$np" --oversubscribe -- \
    --strategy all "${common[@]}" "$@"
}
ring() { # ring NAME NP ARGS...: the ring alone
  local name=$1 np=$2
  shift 2
  one "$name" "$np" 1 mpirun -np "$np" -- --strategy ring --heads 4 \
    --reps 3 --warmup 1 --check-rows 1 "$@"
}
if [ "$set_name" = bf16 ]; then
  probe_args=(--gemm onednn --dim 64,128 --score dot --precision fp32,bf16)
  probe b2 mpirun -np 2
  ring b2-n12000-causal 2 --seq 12000 --dim 64 --causal --precision bf16
  ring b2-n16384-d128 2 --seq 16384 --dim 128 --precision bf16
  ring b2-n16384-d64 2 --seq 16384 --dim 64 --precision bf16
  ring b2-n16384-w4096 2 --seq 16384 --dim 64 --causal --window 4096 \
    --precision bf16
  probe b1 mpirun -np 1
  ring b1-n5000-causal 1 --seq 5000 --dim 64 --causal --precision bf16
  /usr/bin/python3 bench/model-table.py "$out" | tee "$table"
  exit 0
fi
if [ "$set_name" = engine ]; then
  probe_args=(--gemm openblas,onednn --dim 64,128 --score dot)
  probe e1 mpirun -np 1
  ring e1-n5000 1 --seq 5000 --dim 64
  ring e1-n5000-causal 1 --seq 5000 --dim 64 --causal
  probe e2 mpirun -np 2
  ring e2-n12000-causal 2 --seq 12000 --dim 64 --causal
  ring e2-n16384-d128 2 --seq 16384 --dim 128
  ring e2-n16384-w512 2 --seq 16384 --dim 64 --causal --window 512
  ring e2-n16384-w4096 2 --seq 16384 --dim 64 --causal --window 4096
  ring e2-n12000-causal-openblas 2 --seq 12000 --dim 64 --causal \
    --gemm openblas
  /usr/bin/python3 bench/model-table.py "$out" | tee "$table"
  exit 0
fi
probe p1 mpirun -np 1
shm p1-n4096 1 --seq 4096
shm p1-n4096-causal 1 --seq 4096 --causal
probe p2 mpirun -np 2
shm p2-n8192 2 --seq 8192
shm p2-n8192-causal 2 --seq 8192 --causal
shm p2-n16384-causal 2 --seq 16384 --causal
one p2-n131072-causal-ring 2 1 mpirun -np 2 -- --strategy ring \
  --seq 131072 --heads 1 --dim 64 --reps 1 --warmup 0 --check-rows 1 --causal
probe p4 mpirun -np 4 --oversubscribe
shm p4-n8192-causal 4 --seq 8192 --causal

up=0
trap 'if [ "$up" = 1 ]; then $fc down >/dev/null 2>&1 || true; fi' EXIT
nodes() { # nodes K RATE: K fake nodes x 1 rank, N = 8192, holding the
          # fake cluster's lock only meanwhile
  local k=$1 rname=$2
  exec 9> /tmp/ra-fake-cluster.lock
  flock 9
  if [ "${PLAN_ONLY:-0}" != 1 ]; then
    $fc up "$k" --rate "$rname" --slots 1 > /dev/null
    up=1
  fi
  # (mpirun-args: --bind-to none, and yielding when idle where the nodes
  # together have more slots than this machine has cores)
  # shellcheck disable=SC2046,SC2207
  local mpi=(mpirun $([ "$up" = 1 ] && $fc mpirun-args) -np "$k" --map-by node
             -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
  probe "fake$k-$rname" "${mpi[@]}"
  for c in "" --causal; do
    one "fake$k-$rname-n8192${c:+-causal}" "$k" "$k" "${mpi[@]}" \
      -- --strategy all "${common[@]}" --seq 8192 $c
  done
  if [ "$up" = 1 ]; then $fc down > /dev/null; fi
  up=0
  flock -u 9
}
if [ "$(id -u)" = 0 ] && [ "${SKIP_NODES:-0}" != 1 ]; then
  nodes 2 400mbit
  nodes 2 1gbit
  nodes 4 400mbit
  nodes 4 1gbit
else
  echo "+ fake nodes skipped (needs root, or SKIP_NODES=1)"
fi

/usr/bin/python3 bench/model-table.py "$out" | tee "$table"
