#!/usr/bin/env bash
# threads.sh [BUILD_DIR]: issue 16's table, on an otherwise idle machine with
# (at least) 2 cores. For D = 64 and 128, N = 8192 and 16384 (H = 4), causal
# and not, it runs 2 ranks x 1 thread and 1 rank x 2 threads (--bind-to none)
# back to back, ROUNDS times (default 3) alternating which goes first, and
# prints per case the median GFLOP/s of each, 1x2 / 2x1 (target >= 0.95),
# and each one's ratio to its own run's sgemm (targets for 2 ranks,
# non-causal: >= 0.80 at D = 64, >= 0.85 at D = 128). Each bench's output
# rows go to bench/records/threads/<case>-<layout>-<round>.json.
# REPS (default 3) timed passes per bench.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-3}
out=bench/records/threads
mkdir -p "$out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if [ ! -x "$R" ]; then
  echo "threads.sh: $R: no such program (build first, or give the build dir)" >&2
  exit 2
fi

for round in $(seq 1 "$ROUNDS"); do
  for d in 64 128; do
    for n in 8192 16384; do
      for c in "" "--causal"; do
        case_name="d$d-n$n${c:+-causal}"
        args=(--seq "$n" --heads 4 --dim "$d" --reps "$REPS" $c)
        p2=(p2t1 -np 2 --bind-to core -- "${args[@]}")
        p1=(p1t2 -np 1 --bind-to none -- "${args[@]}" --threads 2)
        if [ $((round % 2)) -eq 1 ]; then first=("${p2[@]}"); second=("${p1[@]}")
        else first=("${p1[@]}"); second=("${p2[@]}"); fi
        bench_json "$case_name-${first[0]}-$round" "${first[@]:1}"
        bench_json "$case_name-${second[0]}-$round" "${second[@]:1}"
        echo "threads.sh: round $round: $case_name done" >&2
      done
    done
  done
done

/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    m = re.match(r"(d\d+-n\d+(?:-causal)?)-(p2t1|p1t2)-\d+\.json$",
                 os.path.basename(path))
    if not m:
        continue
    try:
        with open(path) as f:
            r = json.load(f)[0]
    except (OSError, ValueError, IndexError, KeyError) as e:
        print(f"threads.sh: {path}: unreadable ({e})", file=sys.stderr)
        continue
    rows.setdefault(m.group(1), {}).setdefault(m.group(2), []).append(r)
print("| case | 2x1 GFLOP/s | 1x2 GFLOP/s | 1x2 / 2x1 | 2x1 / sgemm | "
      "1x2 / sgemm | tbusy 1x2 | verdicts |")
print("|---|---|---|---|---|---|---|---|")
for case in sorted(rows, key=lambda c: (int(c.split("-")[0][1:]),
                                        int(c.split("-")[1][1:]), c)):
    got = rows[case]
    if "p2t1" not in got or "p1t2" not in got:
        print(f"| {case} | missing runs | | | | | | |")
        continue
    med = lambda k, f: statistics.median(f(r) for r in got[k])
    g2 = med("p2t1", lambda r: r["gflops"])
    g1 = med("p1t2", lambda r: r["gflops"])
    s2 = med("p2t1", lambda r: r["fraction_of_sgemm"])
    s1 = med("p1t2", lambda r: r["fraction_of_sgemm"])
    tb = med("p1t2", lambda r: r.get("thread_busy", 0.0))
    ok = all(r["verdict"] == "PASS" for k in got for r in got[k])
    print(f"| {case} | {g2:.1f} | {g1:.1f} | **{g1 / g2:.3f}** | {s2:.3f} | "
          f"{s1:.3f} | {tb:.2f} | {'PASS' if ok else 'FAIL'} |")
PY
