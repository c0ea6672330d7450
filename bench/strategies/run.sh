#!/usr/bin/env bash
# run.sh: the strategy measurements of docs/PERFORMANCE.md ("Strategies"),
# from the repository root after a Release build. The ring-q row needs the
# fake cluster (root): launch/fake-cluster.sh up 2 --rate 1gbit --slots 1.
set -euo pipefail
out=bench/records/strategies
ra=$PWD/build/ringattn
mpi=(mpirun --oversubscribe -x OMP_NUM_THREADS=1)
case "${1:-all}" in
ringq)  # ring-q against ring over a 1 Gbit/s link, one rank per fake node
  mpirun $(launch/fake-cluster.sh mpirun-args) -np 2 --map-by node "$ra" \
      bench --seq 256 --seq-kv 262144 --heads 4 --kv-heads 4 --dim 64 \
      --strategy all --warmup 1 --reps 3 --json $out/ringq-2nodes-1gbit.json ;;
all)
  # bytes at N = M: ring-q sends at least what ring does
  "${mpi[@]}" -np 2 "$ra" bench --seq 2048 --heads 4 --dim 64 \
      --strategy all --reps 3 --json $out/n-eq-m-p2.json
  # tree: N = 1, M = 2^20 at P = 4, against the largest shard alone (P = 1)
  "${mpi[@]}" -np 4 "$ra" bench --seq 1 --seq-kv 1048576 --heads 4 \
      --dim 64 --strategy tree --reps 5 --json $out/tree-p4.json
  "${mpi[@]}" -np 1 "$ra" bench --seq 1 --seq-kv 262144 --heads 4 \
      --dim 64 --strategy ring --reps 5 --json $out/tree-shard-p1.json
  # ulysses bytes at P = 4 and time at P = 2 against ring, N = 16384, H = 8
  for s in ring ulysses; do
    "${mpi[@]}" -np 4 "$ra" bench --seq 16384 --heads 8 --dim 64 \
        --strategy $s --warmup 0 --reps 1 --json $out/$s-n16k-p4.json
    "${mpi[@]}" -np 2 "$ra" bench --seq 16384 --heads 8 --dim 64 \
        --strategy $s --warmup 1 --reps 2 --json $out/$s-n16k-p2.json
  done
  # every strategy side by side, hybrid as 2 groups of 2
  "${mpi[@]}" -np 4 "$ra" bench --seq 4096 --heads 8 --dim 64 \
      --strategy all --ulysses-size 2 --warmup 0 --reps 1 \
      --json $out/all-p4-u2.json ;;
esac
