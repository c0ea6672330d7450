#!/usr/bin/env bash
# xnode.sh [BUILD_DIR]: bytes across nodes of every strategy, measured on 2
# fake nodes of 2 ranks (launch/fake-cluster.sh, root), for the table in
# docs/PERFORMANCE.md ("Strategies across nodes"). For each link rate
# (400mbit, 1gbit), mpirun mapping (--map-by node: ranks dealt round-robin;
# --map-by slot: neighbours share a node) and mask (full, causal), one
# `bench --strategy all` at N = M = 8192, H = G = 4, D = 64. Output:
# bench/records/strategies/xnode-RATE-MAP-MASK.json. Each cluster is held
# under the shared lock for one rate's four runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
R=$(cd "$build" && pwd)/ringattn
out=bench/records/strategies
fc=launch/fake-cluster.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

one_rate() { # RATE: bring the cluster up, run the four benches, take it down
  local rate=$1
  trap '$fc down >/dev/null 2>&1 || true' EXIT
  $fc up 2 --rate "$rate" --slots 2 >/dev/null
  for map in node slot; do
    for mask in full causal; do
      local name=xnode-$rate-$map-$mask causal=()
      [ "$mask" = causal ] && causal=(--causal)
      echo "+ rate $rate, --map-by $map, $mask"
      # shellcheck disable=SC2046
      mpirun $($fc mpirun-args) -np 4 --map-by "$map" \
        -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 "$R" bench \
        --seq 8192 --heads 4 --dim 64 "${causal[@]}" --strategy all \
        --warmup 1 --reps 3 --json "$out/$name.json"
    done
  done
  $fc down >/dev/null
}

for rate in 400mbit 1gbit; do
  export -f one_rate
  export R out fc
  flock /tmp/ra-fake-cluster.lock bash -c "one_rate $rate"
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, sys
print("| link | mpirun map | mask | strategy | time_s | wait% | MB sent per "
      "rank | MB across nodes, all ranks | verdict |")
print("|---|---|---|---|---|---|---|---|---|")
for rate in ("400mbit", "1gbit"):
    for mp in ("node", "slot"):
        for mask in ("full", "causal"):
            path = os.path.join(sys.argv[1], f"xnode-{rate}-{mp}-{mask}.json")
            for r in json.load(open(path)):
                print(f"| {rate} | {mp} | {mask} | {r['mode']} | "
                      f"{r['seconds_median']:.3f} | "
                      f"{100 * r['comm_wait_fraction']:.1f} | "
                      f"{r['bytes_sent'] / 1e6:.2f} | "
                      f"{r['cross_node_bytes_total'] / 1e6:.2f} | "
                      f"{r['verdict']} |")
PY
