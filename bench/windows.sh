#!/usr/bin/env bash
# windows.sh [BUILD_DIR] [SEQ] [ROUNDS]: sliding windows against full causal
# attention (issue 25, "Windows at full speed"), P = 2, H = 4, D = 64,
# SEQ (default 65536) tokens, ROUNDS (default 3) rounds on an otherwise
# idle machine. Each round runs full causal attention, then windows of 512
# and 4096 keys (the default layout, balanced; contiguous and striped
# slices for 4096), each
# with the yardsticks, so that every fraction of peak has its own peak.
# Rows go to bench/records/windows-<case>-r<round>.json; the summary
# prints, per case, the median over rounds of its fraction of peak over
# the same round's full-attention fraction, and its busy max/min.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
N=${2:-65536}
ROUNDS=${3:-3}
case "$N$ROUNDS" in
  *[!0-9]*) echo "windows: SEQ and ROUNDS are positive integers" >&2; exit 2;;
esac
out=bench/records
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cases=("full:" "w512:--window 512" "w4096:--window 4096"
       "w4096-contiguous:--window 4096 --layout contiguous"
       "w4096-striped:--window 4096 --layout striped")
for r in $(seq "$ROUNDS"); do
  for c in "${cases[@]}"; do
    name=${c%%:*} opts=${c#*:}
    # shellcheck disable=SC2086 # opts is a list of options
    bench_json "windows-$name-r$r" -np 2 --bind-to core -- --seq "$N" \
      --heads 4 --dim 64 --causal --reps 3 --check-rows 2 $opts
  done
done
python3 - "$out" "$ROUNDS" "${cases[@]}" <<'EOF'
import json, statistics, sys
out, rounds, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
names = [c.split(":")[0] for c in cases]
def row(name, r):
    return json.load(open(f"{out}/windows-{name}-r{r}.json"))[0]
print(f"{'case':<17} {'time_s':>8} {'f_peak':>7} {'vs_full':>8} {'busy':>6}")
for name in names:
    rows = [row(name, r) for r in range(1, rounds + 1)]
    full = [row("full", r) for r in range(1, rounds + 1)]
    ratio = [a["fraction_of_peak"] / b["fraction_of_peak"]
             for a, b in zip(rows, full)]
    busy = [a["busy_seconds_max"] / a["busy_seconds_min"] for a in rows]
    print(f"{name:<17} {statistics.median(a['seconds_median'] for a in rows):8.4f} "
          f"{statistics.median(a['fraction_of_peak'] for a in rows):7.3f} "
          f"{statistics.median(ratio):8.3f} {statistics.median(busy):6.3f}")
EOF
