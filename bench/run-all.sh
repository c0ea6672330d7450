#!/usr/bin/env bash
# run-all.sh [BUILD_DIR]: every benchmark quoted in docs/PERFORMANCE.md, one
# after the other on an otherwise idle machine; each bench's rows go to
# bench/records/<name>.json, its full output to the terminal.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
out=bench/records
b() { bench_json "$@"; } # b NAME MPIRUN_ARGS... -- BENCH_ARGS...
# issue 3: speed against the same run's sgemm, baseline, scaling, overlap
b d128     -np 2 -- --seq 16384 --heads 4 --dim 128 --reps 5
b d64      -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 5
b naive    -np 2 -- --seq 8192 --heads 4 --dim 64 --reps 3 --mode both
b naive1   -np 1 -- --seq 8192 --heads 4 --dim 64 --reps 3 --mode both
b p1t1     -np 1 -- --seq 16384 --heads 4 --dim 64 --reps 3
b p2t1     -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 3
b p1t2     -np 1 --bind-to none -- --seq 16384 --heads 4 --dim 64 --reps 3 --threads 2
b shm      -np 2 --mca btl self,vader -- --seq 8192 --heads 4 --dim 64 --reps 3
b shm-nopoll -np 2 --mca btl self,vader -- --seq 8192 --heads 4 --dim 64 --reps 3 --no-poll
b tcp      -np 2 --mca btl self,tcp -- --seq 8192 --heads 4 --dim 64 --reps 3
b tcp-nopoll -np 2 --mca btl self,tcp -- --seq 8192 --heads 4 --dim 64 --reps 3 --no-poll
# issue 4: layouts, windows, masks
b causal-contiguous -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 3 --causal --layout contiguous
b causal-zigzag     -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 3 --causal --layout zigzag
b causal-striped    -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 3 --causal --layout striped
b causal-auto       -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 3 --causal
b full64k   -np 2 -- --seq 65536 --heads 1 --dim 64 --reps 3 --check-rows 2
b window64k -np 2 -- --seq 65536 --heads 1 --dim 64 --reps 5 --causal --window 1024
b lens      -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 3 --lens random
b segments  -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 3 --segments 2048
b segments-contiguous -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 3 --segments 2048 --layout contiguous
# issue 6: scores
b gaussian  -np 2 -- --seq 16384 --heads 4 --dim 64 --reps 3 --score gaussian --sigma 4
b dot-small -np 2 -- --seq 4096 --heads 4 --dim 64 --reps 3
b additive  -np 2 -- --seq 4096 --heads 4 --dim 64 --reps 3 --score additive --additive-hidden 64
# accuracy against P
for p in 1 2 4; do
  b accuracy-p$p -np $p --oversubscribe -- --seq 3816 --heads 8 --kv-heads 2 --dim 64 --reps 1 --warmup 0 --causal --check-rows 64
done
# the chart in the README
launch/bench-sweep.sh -b "${1:-build}" -r "1 2" -o $out/sweep.json -p -- --seq 2048,4096,8192,16384 --heads 4 --dim 64 --reps 3
# issue 25: windows against full attention, and ggml's flash attention
bench/windows.sh "${1:-build}"
bench/ggml-compare.sh "${1:-build}"
