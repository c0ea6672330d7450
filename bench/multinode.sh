#!/usr/bin/env bash
# multinode.sh [BUILD_DIR]: the multi-node figures of docs/PERFORMANCE.md on
# fake nodes (launch/fake-cluster.sh, root). Records in bench/records/multinode/
# (JSON), charts in docs/.
#   order-*      round-robin ranks with the node-aware ring, with mpirun's
#                order, and --map-by slot; three interleaved rounds
#   crossover-*  exposed wait against N/P and link rate, 2 nodes x 1 rank
#   study/       launch/scaling-study.py over 1-4 fake nodes (its scaling.json;
#                its charts go to docs/scaling-*.png)
#   wire-*       K/V in fp32 and in bf16 on the wire (--wire bf16, and
#                --precision bf16), 2 nodes x 1 rank at 400 Mbit/s, N/P =
#                2048; three interleaved rounds
# Each part can be run alone: multinode.sh BUILD order|order2|crossover|study
# (order2: the 2-node comparison only; ROUNDS=N sets its rounds).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
out=bench/records/multinode
fc=launch/fake-cluster.sh
mkdir -p "$out"
trap '$fc down >/dev/null 2>&1 || true' EXIT

# bench_on NAME NP MAP ORDER BENCH_ARGS...: one bench on the current cluster
bench_on() {
  local name=$1 np=$2 map=$3 order=$4
  shift 4
  # shellcheck disable=SC2046
  mpirun $($fc mpirun-args) -np "$np" --map-by "$map" -x OMP_NUM_THREADS=1 \
    -x OPENBLAS_NUM_THREADS=1 "$R" bench --ring-order "$order" "$@" \
    --json "$out/$name.json" | tail -1
}

order() { # K nodes x 2 ranks at RATE, ROUNDS (3) rounds of three launches
  local k=$1 rate=$2 np=$(($1 * 2))
  $fc up "$k" --rate "$rate" --slots 2
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for v in "node node" "node mpirun" "slot node"; do
      set -- $v
      echo "+ k=$k rate=$rate --map-by $1 --ring-order $2 round $round"
      bench_on "order-k$k-$rate-$1-$2-r$round" "$np" "$1" "$2" \
        --seq 4096 --heads 4 --dim 64 --reps 5
    done
  done
  $fc down
}

crossover() { # 2 nodes x 1 rank: wait against N/P at several link rates
  for rate in 100mbit 400mbit 1gbit; do
    $fc up 2 --rate "$rate" --slots 1
    for n in 1024 2048 4096 8192; do
      echo "+ rate=$rate N=$n (N/P=$((n / 2)))"
      bench_on "crossover-$rate-n$n" 2 node node --seq "$n" --heads 4 \
        --dim 64 --reps 3
    done
    $fc down
  done
  /usr/bin/python3 bench/crossover-plot.py "$out" docs/multinode-crossover.png
}

wire() { # 2 nodes x 1 rank at 400 Mbit/s, N/P = 2048: the wire's bytes
  $fc up 2 --rate 400mbit --slots 1
  for round in 1 2 3; do
    for v in "fp32 fp32" "fp32 bf16" "bf16 auto"; do
      set -- $v
      echo "+ round $round: --precision $1 --wire $2"
      bench_on "wire-p$1-w$2-r$round" 2 node node --seq 4096 --heads 4 \
        --dim 64 --reps 3 --precision "$1" --wire "$2"
    done
  done
  $fc down
}

study() { # the study in a scratch folder; its record and charts kept
  local work
  work=$(mktemp -d)
  /usr/bin/time -f "study wall time %e s" launch/scaling-study.py \
    --launcher fake --nodes 1,2,3,4 --ranks-per-node 2 --rate 1gbit \
    --scaling strong,weak-memory --seq 2048 --repeats 3 --io \
    --out-dir "$work" --build "$build" -- --heads 4 --dim 64
  mkdir -p "$out/study"
  cp "$work/scaling.json" "$out/study/scaling.json"
  cp "$work"/scaling-*.png docs/
  rm -rf "$work"
}

parts=${2:-"order crossover study"}
for p in $parts; do
  case "$p" in
    order) order 2 400mbit; order 3 1gbit ;;
    order2) order 2 400mbit ;;
    crossover) crossover ;;
    study) study ;;
    wire) wire ;;
    *) echo "multinode.sh: unknown part $p" >&2; exit 2 ;;
  esac
done
