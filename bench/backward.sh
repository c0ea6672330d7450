#!/usr/bin/env bash
# backward.sh [BUILD_DIR] [SEQ]: the backward rows of docs/PERFORMANCE.md
# ("Backward pass"), one after the other on an otherwise idle machine; each
# bench's row goes to bench/records/backward-<name>.json. SEQ (default
# 16384, the documented rows) only shortens a trial run; the additive rows
# use SEQ / 4.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
N=${2:-16384}
out=bench/records
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
b() { # b NAME BENCH_ARGS...: two ranks over shared memory
  local name=$1; shift
  local cmd=(mpirun -np 2 --mca btl self,vader "$R" bench --backward "$@"
             --json "$out/backward-$name.json")
  echo "+ ${cmd[*]}"
  "${cmd[@]}"
}
# speed against the same run's sgemm, busy max/min, exposed communication
b d64          --seq "$N" --heads 4 --dim 64 --warmup 0 --reps 2
b d64-causal   --seq "$N" --heads 4 --dim 64 --warmup 0 --reps 2 --causal
b d128         --seq "$N" --heads 4 --dim 128 --warmup 0 --reps 2
b d128-causal  --seq "$N" --heads 4 --dim 128 --warmup 0 --reps 2 --causal
# what polling between tiles buys (exposed communication without it)
b d64-causal-nopoll --seq "$N" --heads 4 --dim 64 --warmup 0 --reps 2 --causal --no-poll
# the additive score against the dot score, same shape
b dot-small      --seq $((N / 4)) --heads 4 --dim 64 --warmup 0 --reps 2
b additive-small --seq $((N / 4)) --heads 4 --dim 64 --warmup 0 --reps 2 --score additive --additive-hidden 64
