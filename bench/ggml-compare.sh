#!/usr/bin/env bash
# ggml-compare.sh [BUILD_DIR]: issue 25's comparison of ringattn's forward
# with ggml's CPU flash attention (ggml_flash_attn_ext, f16 K/V, f32 Q,
# 2 threads in one process) on the same shapes: N = 16384, H = 4, D = 64
# and 128, causal and not (self-attention, batch 1). Target: ringattn
# (mpirun -np 2 --bind-to core) >= 3x faster.
#
# ggml is not packaged in Debian: its prebuilt shared libraries come from
# the npm package @node-llama-cpp/linux-x64@3.22.1, fetched with `npm pack`
# into ${XDG_CACHE_HOME:-~/.cache}/ringattn-ggml/ when missing (GGML_LIB_DIR
# names another folder holding libggml-base.so and libggml-cpu-*.so).
# bench/ggml_fa.c is compiled against them with cc (into a scratch folder),
# checked at a small size against fp64 (it fails the script past 1e-2), and
# picks the CPU variant library as ggml's loader does (highest score).
# Per case, ggml (one warm-up, median of REPS) and ringattn (fp32, then
# --precision bf16) run one after the other, the order alternating from
# case to case. Prints a table (ratio = ggml s / ringattn s) and writes
# bench/records/ggml-compare.json (RECORD overrides it).
# Environment: REPS (default 3), SEQ (default 16384; smaller only to try
# the script out), GGML_LIB_DIR, RECORD.
set -euo pipefail
usage="usage: bench/ggml-compare.sh [BUILD_DIR] (default build)"
case "${1:-}" in
  -h | --help) echo "$usage"; exit 0 ;;
  -*) echo "ggml-compare: unknown option '$1' ($usage)" >&2; exit 2 ;;
esac
if [ $# -gt 1 ]; then
  echo "ggml-compare: too many arguments ($usage)" >&2
  exit 2
fi
for v in REPS SEQ; do
  val=${!v:-1}
  if ! [[ $val =~ ^[1-9][0-9]*$ ]]; then
    echo "ggml-compare: $v must be a positive integer, not '$val'" >&2
    exit 2
  fi
done
# shellcheck source-path=SCRIPTDIR source=prelude.sh
. "$(dirname "$0")/prelude.sh"
if [ ! -x "$R" ]; then
  echo "ggml-compare: $R: no such program (build first, or give the build dir)" >&2
  exit 2
fi
REPS=${REPS:-3}
SEQ=${SEQ:-16384}
RECORD=${RECORD:-bench/records/ggml-compare.json}
PKG=@node-llama-cpp/linux-x64@3.22.1
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# one thread per rank for ringattn (OPENBLAS_CORETYPE stays as it is)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# the ggml libraries: GGML_LIB_DIR, else the cache, fetched when missing
if [ -n "${GGML_LIB_DIR:-}" ]; then
  lib=$(realpath "$GGML_LIB_DIR")
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/ringattn-ggml/linux-x64-3.22.1
  lib=$cache/package/bins/linux-x64
  if [ ! -f "$lib/libggml-base.so" ]; then
    echo "+ npm pack $PKG (into $cache)"
    mkdir -p "$cache"
    tgz=$(cd "$cache" && npm pack --silent "$PKG" | tail -1)
    tar -xzf "$cache/$tgz" -C "$cache" \
      --wildcards 'package/bins/linux-x64/libggml-*' \
      'package/bins/linux-x64/_nlcBuildMetadata.json' package/package.json
    rm -f "$cache/$tgz"
  fi
fi
if [ ! -f "$lib/libggml-base.so" ]; then
  echo "ggml-compare: $lib: no libggml-base.so" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
G=$work/ggml_fa
cc -O2 -std=c11 -Wall -o "$G" bench/ggml_fa.c -L"$lib" -l:libggml-base.so \
  -Wl,-rpath,"$lib" -ldl -lm
echo "+ ggml_fa check (N=257, H=2, D=64 and 128, causal and not, vs fp64)"
"$G" check --threads 2 2>"$work/check.err" | tee "$work/check.out" ||
  { cat "$work/check.err" >&2; echo "ggml-compare: ggml's check failed" >&2; exit 1; }
grep 'using cpu variant' "$work/check.err" || true

ggml_run() { # NAME BENCH_ARGS...
  local name=$1; shift
  echo "+ ggml_fa bench $* --threads 2 --reps $REPS"
  "$G" bench "$@" --threads 2 --reps "$REPS" --json "$work/$name.json" \
    2>"$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
}
ringattn_run() { # NAME BENCH_ARGS...
  local name=$1; shift
  echo "+ mpirun -np 2 --bind-to core ringattn bench $* --reps $REPS --check-rows 0"
  mpirun -np 2 --bind-to core "$R" bench "$@" --reps "$REPS" --check-rows 0 \
    --json "$work/$name.json" | tail -1
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
i=0
for d in 64 128; do
  for c in "" --causal; do
    case_name="d$d${c:+-causal}"
    args=(--seq "$SEQ" --heads 4 --dim "$d" ${c:+"$c"})
    if [ $((i % 2)) -eq 0 ]; then
      ggml_run "$case_name-ggml" "${args[@]}"
      ringattn_run "$case_name-fp32" "${args[@]}"
      ringattn_run "$case_name-bf16" "${args[@]}" --precision bf16
    else
      ringattn_run "$case_name-fp32" "${args[@]}"
      ringattn_run "$case_name-bf16" "${args[@]}" --precision bf16
      ggml_run "$case_name-ggml" "${args[@]}"
    fi
    i=$((i + 1))
  done
done

mkdir -p "$(dirname "$RECORD")"
/usr/bin/python3 - "$work" "$RECORD" "$SEQ" "$REPS" "$PKG" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$load_before" \
  <<'PY'
import json, os, re, sys, time
work, record, seq, reps, pkg, commit, load_before = sys.argv[1:8]
try:
    with open("/proc/loadavg") as f:
        load_after = " ".join(f.read().split()[:3])
except OSError:
    load_after = "unknown"

def load(name):
    with open(os.path.join(work, name + ".json")) as f:
        return json.load(f)
cpu = "unknown"
try:
    with open("/proc/cpuinfo") as f:
        m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
        cpu = m.group(1).strip() if m else cpu
except OSError:
    pass
with open(os.path.join(work, "check.out")) as f:
    check = [l.strip() for l in f if l.strip()]
cases = []
for d in (64, 128):
    for causal in (False, True):
        name = f"d{d}" + ("-causal" if causal else "")
        g = load(name + "-ggml")
        f32 = load(name + "-fp32")[0]
        b16 = load(name + "-bf16")[0]
        cases.append({
            "case": name, "seq": int(seq), "heads": 4, "dim": d,
            "causal": causal, "ggml": g, "ringattn_fp32": f32,
            "ringattn_bf16": b16,
            "ratio_fp32": g["seconds_median"] / f32["seconds_median"],
            "ratio_bf16": g["seconds_median"] / b16["seconds_median"],
        })
g0 = cases[0]["ggml"]
out = {
    "what": "ringattn forward vs ggml_flash_attn_ext on the CPU (issue 25); "
            "ratio = ggml seconds / ringattn seconds, target >= 3",
    "date": time.strftime("%Y-%m-%d"),
    "ringattn_commit": commit,
    "cpu": cpu,
    "loadavg_before": load_before, "loadavg_after": load_after,
    "ggml_package": pkg,
    "ggml_version": g0["ggml_version"], "ggml_commit": g0["ggml_commit"],
    "ggml_cpu_variant": g0["cpu_variant"],
    "ggml_cpu_variant_score": g0["cpu_variant_score"],
    "ggml_command": "ggml_fa bench --seq N --heads 4 --dim D [--causal] "
                    f"--threads 2 --reps {reps}",
    "ringattn_command": "mpirun -np 2 --bind-to core ringattn bench --seq N "
                        f"--heads 4 --dim D [--causal] --reps {reps} "
                        "--check-rows 0 [--precision bf16]",
    "ggml_check": check,
    "cases": cases,
}
with open(record, "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(f"\nggml {out['ggml_version']} ({out['ggml_commit']}), cpu variant "
      f"{out['ggml_cpu_variant']}, 2 threads; ringattn 2 ranks x 1 thread; "
      f"N={seq} H=4, median of {reps}; load average {load_before} before, "
      f"{load_after} after")
print("| case | ggml s | ggml GFLOP/s | ringattn fp32 s | ratio | "
      "ringattn bf16 s | ratio | ggml cpu/wall |")
print("|---|---|---|---|---|---|---|---|")
for c in cases:
    g = c["ggml"]
    print(f"| {c['case']} | {g['seconds_median']:.3f} | {g['gflops']:.1f} | "
          f"{c['ringattn_fp32']['seconds_median']:.3f} | "
          f"{c['ratio_fp32']:.2f} | {c['ringattn_bf16']['seconds_median']:.3f}"
          f" | {c['ratio_bf16']:.2f} | {g['cpu_per_wall']:.2f} |")
for p in ("fp32", "bf16"):
    k = sum(c["ratio_" + p] >= 3 for c in cases)
    print(f"ggml-compare: ringattn {p} >= 3x ggml in {k} of {len(cases)} cases")
print(f"ggml-compare: record in {record}")
PY
