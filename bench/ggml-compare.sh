#!/usr/bin/env bash
# ggml-compare.sh [BUILD_DIR]: the side-by-side of ringattn's forward with
# the CPU attention of its peers on the same shapes: ggml's flash attention
# (ggml_flash_attn_ext, f16 K/V, f32 Q; issue 25) and PyTorch 2.x's
# scaled_dot_product_attention (its CPU flash kernel, fp32 and bf16;
# issue 44 part 5), each with 2 threads in one process, N = 16384, H = 4,
# D = 64 and 128, causal and not (self-attention, batch 1). ringattn runs
# as mpirun -np 2 --bind-to core (1 thread per rank) and as one process of
# 2 threads (--threads 2), fp32 and bf16. Targets: ringattn P = 2 >= 3x
# ggml; ringattn P = 1 x 2 threads >= 1.5x torch in fp32 and in bf16.
#
# ggml is not packaged in Debian: its prebuilt shared libraries come from
# the npm package @node-llama-cpp/linux-x64@3.22.1, fetched with `npm pack`
# into ${XDG_CACHE_HOME:-~/.cache}/ringattn-ggml/ when missing (GGML_LIB_DIR
# names another folder holding libggml-base.so and libggml-cpu-*.so); where
# npm's registry cannot be reached, bench/ggml-build.sh compiles them from
# the ggml that PyPI's llama-cpp-python sdist vendors (into the same
# cache); when neither works, ggml's columns are skipped by name (n/a).
# bench/ggml_fa.c is compiled against them with cc (into a scratch folder),
# checked at a small size against fp64 (it fails the script past 1e-2), and
# picks the CPU variant library as ggml's loader does (highest score).
# torch runs in TORCH_PY (a python with torch >= 2, e.g. a venv made by
# tests/python/torch2_venv.sh); unset, torch's columns are skipped by name.
# bench/torch_sdpa.py checks it against fp64 first (exit 1 past 1e-4 fp32,
# 3e-2 bf16).
# Per case, each program (one warm-up, median of REPS) runs one after the
# other, the order reversed from case to case. Prints a table (ratio =
# peer s / ringattn s) and writes bench/records/ggml-compare.json (RECORD
# overrides it).
# Environment: REPS (default 3), SEQ (default 16384; smaller only to try
# the script out), GGML_LIB_DIR, TORCH_PY, RECORD.
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
ggml_skip=""
if [ -n "${GGML_LIB_DIR:-}" ]; then
  lib=$(realpath "$GGML_LIB_DIR")
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/ringattn-ggml/linux-x64-3.22.1
  lib=$cache/package/bins/linux-x64
  if [ ! -f "$lib/libggml-base.so" ]; then
    echo "+ npm pack $PKG (into $cache)"
    mkdir -p "$cache"
    if tgz=$(cd "$cache" && npm pack --silent "$PKG" 2>/dev/null | tail -1) &&
      [ -n "$tgz" ]; then
      tar -xzf "$cache/$tgz" -C "$cache" \
        --wildcards 'package/bins/linux-x64/libggml-*' \
        'package/bins/linux-x64/_nlcBuildMetadata.json' package/package.json
      rm -f "$cache/$tgz"
    else
      lib=${cache%/*}/pypi-build
      [ -f "$lib/libggml-base.so" ] || bench/ggml-build.sh "$lib" || true
    fi
  fi
fi
if [ ! -f "$lib/libggml-base.so" ]; then
  ggml_skip="no libggml-base.so in $lib (npm pack $PKG and ggml-build.sh failed)"
  echo "+ ggml: skipped: $ggml_skip"
fi
torch_skip=""
if [ -z "${TORCH_PY:-}" ]; then
  torch_skip="TORCH_PY unset (a python with torch >= 2)"
  echo "+ torch: skipped: $torch_skip"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
G=$work/ggml_fa
: >"$work/check.out"
if [ -z "$ggml_skip" ]; then
  cc -O2 -std=c11 -Wall -o "$G" bench/ggml_fa.c -L"$lib" \
    -l:libggml-base.so -Wl,-rpath,"$lib" -ldl -lm
  echo "+ ggml_fa check (N=257, H=2, D=64 and 128, causal and not, vs fp64)"
  "$G" check --threads 2 2>"$work/check.err" | tee "$work/check.out" ||
    { cat "$work/check.err" >&2; echo "ggml-compare: ggml's check failed" >&2; exit 1; }
  grep 'using cpu variant' "$work/check.err" || true
fi
if [ -z "$torch_skip" ]; then
  echo "+ torch_sdpa.py check --threads 2"
  "$TORCH_PY" bench/torch_sdpa.py check --threads 2 2>"$work/tcheck.err" |
    tee "$work/tcheck.out" ||
    { cat "$work/tcheck.err" >&2; echo "ggml-compare: torch's check failed" >&2; exit 1; }
fi

torch_run() { # NAME DTYPE BENCH_ARGS...
  local name=$1 dtype=$2; shift 2
  [ -z "$torch_skip" ] || return 0
  echo "+ torch_sdpa.py bench $* --dtype $dtype --threads 2 --reps $REPS"
  "$TORCH_PY" bench/torch_sdpa.py bench "$@" --dtype "$dtype" --threads 2 \
    --reps "$REPS" --json "$work/$name.json" 2>"$work/$name.err" |
    tail -1 || { cat "$work/$name.err" >&2; exit 1; }
}
ggml_run() { # NAME BENCH_ARGS...
  local name=$1; shift
  [ -z "$ggml_skip" ] || return 0
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
ringattn_threads() { # NAME BENCH_ARGS...: one process of 2 threads
  local name=$1; shift
  echo "+ mpirun -np 1 --bind-to none ringattn bench $* --threads 2 --reps $REPS --check-rows 0"
  mpirun -np 1 --bind-to none "$R" bench "$@" --threads 2 --reps "$REPS" \
    --check-rows 0 \
    --json "$work/$name.json" | tail -1
}

run_one() { # K CASE: the case's K-th program (args: the case's options)
  case $1 in
    0) ggml_run "$2-ggml" "${args[@]}" ;;
    1) torch_run "$2-torch-fp32" fp32 "${args[@]}" ;;
    2) torch_run "$2-torch-bf16" bf16 "${args[@]}" ;;
    3) ringattn_run "$2-fp32" "${args[@]}" ;;
    4) ringattn_run "$2-bf16" "${args[@]}" --precision bf16 ;;
    5) ringattn_threads "$2-t2-fp32" "${args[@]}" ;;
    6) ringattn_threads "$2-t2-bf16" "${args[@]}" --precision bf16 ;;
  esac
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
i=0
for d in 64 128; do
  for c in "" --causal; do
    case_name="d$d${c:+-causal}"
    args=(--seq "$SEQ" --heads 4 --dim "$d" ${c:+"$c"})
    for k in 0 1 2 3 4 5 6; do
      [ $((i % 2)) -eq 0 ] || k=$((6 - k))
      run_one "$k" "$case_name"
    done
    i=$((i + 1))
  done
done

mkdir -p "$(dirname "$RECORD")"
/usr/bin/python3 - "$work" "$RECORD" "$SEQ" "$REPS" "$PKG" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$load_before" \
  "$ggml_skip" "$torch_skip" <<'PY'
import json, os, re, sys, time
work, record, seq, reps, pkg, commit, load_before, ggml_skip, torch_skip = \
    sys.argv[1:10]
try:
    with open("/proc/loadavg") as f:
        load_after = " ".join(f.read().split()[:3])
except OSError:
    load_after = "unknown"

def load(name):
    path = os.path.join(work, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)
def first(x):
    return x[0] if isinstance(x, list) else x
def ratio(peer, mine):
    return peer["seconds_median"] / mine["seconds_median"] if peer else None
cpu = "unknown"
try:
    with open("/proc/cpuinfo") as f:
        m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
        cpu = m.group(1).strip() if m else cpu
except OSError:
    pass
check = []
for name in ("check.out", "tcheck.out"):
    if os.path.exists(os.path.join(work, name)):
        with open(os.path.join(work, name)) as f:
            check += [l.strip() for l in f if l.strip()]
cases = []
for d in (64, 128):
    for causal in (False, True):
        name = f"d{d}" + ("-causal" if causal else "")
        g = load(name + "-ggml")
        t32, t16 = load(name + "-torch-fp32"), load(name + "-torch-bf16")
        f32, b16 = first(load(name + "-fp32")), first(load(name + "-bf16"))
        p32, p16 = first(load(name + "-t2-fp32")), first(load(name + "-t2-bf16"))
        cases.append({
            "case": name, "seq": int(seq), "heads": 4, "dim": d,
            "causal": causal, "ggml": g, "torch_fp32": t32,
            "torch_bf16": t16, "ringattn_fp32": f32, "ringattn_bf16": b16,
            "ringattn_t2_fp32": p32, "ringattn_t2_bf16": p16,
            "ratio_fp32": ratio(g, f32), "ratio_bf16": ratio(g, b16),
            "torch_ratio_fp32": ratio(t32, p32),
            "torch_ratio_bf16": ratio(t16, p16),
        })
g0 = cases[0]["ggml"] or {}
t0 = cases[0]["torch_fp32"] or {}
out = {
    "what": "ringattn forward vs ggml_flash_attn_ext (issue 25) and torch "
            "2.x scaled_dot_product_attention (issue 44) on the CPU; ratio "
            "= ggml seconds / ringattn P=2 seconds (target >= 3), "
            "torch_ratio = torch seconds / ringattn P=1 x 2 threads "
            "seconds (target >= 1.5)",
    "date": time.strftime("%Y-%m-%d"),
    "ringattn_commit": commit,
    "cpu": cpu,
    "loadavg_before": load_before, "loadavg_after": load_after,
    "ggml_skipped": ggml_skip or None, "torch_skipped": torch_skip or None,
    "ggml_package": pkg,
    "ggml_version": g0.get("ggml_version"), "ggml_commit": g0.get("ggml_commit"),
    "ggml_cpu_variant": g0.get("cpu_variant"),
    "ggml_cpu_variant_score": g0.get("cpu_variant_score"),
    "torch_version": t0.get("torch_version"),
    "ggml_command": "ggml_fa bench --seq N --heads 4 --dim D [--causal] "
                    f"--threads 2 --reps {reps}",
    "torch_command": "torch_sdpa.py bench --seq N --heads 4 --dim D "
                     f"[--causal] --dtype fp32|bf16 --threads 2 --reps {reps}",
    "ringattn_command": "mpirun -np 2 --bind-to core ringattn bench --seq N "
                        f"--heads 4 --dim D [--causal] --reps {reps} "
                        "--check-rows 0 [--precision bf16]; and mpirun -np 1 "
                        "--bind-to none ... --threads 2",
    "checks": check,
    "cases": cases,
}
with open(record, "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
def sec(x):
    return f"{x['seconds_median']:.3f}" if x else "n/a"
def rat(x):
    return f"{x:.2f}" if x else "n/a"
print(f"\nggml {out['ggml_version'] or 'skipped: ' + ggml_skip}; torch "
      f"{out['torch_version'] or 'skipped: ' + torch_skip}; 2 threads each; "
      f"ringattn P=2 x 1 thread and P=1 x 2 threads; N={seq} H=4, median "
      f"of {reps}; load average {load_before} before, {load_after} after")
print("| case | ggml s | torch fp32 s | torch bf16 s | ringattn P2 fp32 s | "
      "P2 bf16 s | P1x2 fp32 s | P1x2 bf16 s | ggml/P2 fp32 | ggml/P2 bf16 "
      "| torch/P1x2 fp32 | torch/P1x2 bf16 |")
print("|---" * 12 + "|")
for c in cases:
    print(f"| {c['case']} | {sec(c['ggml'])} | {sec(c['torch_fp32'])} | "
          f"{sec(c['torch_bf16'])} | {sec(c['ringattn_fp32'])} | "
          f"{sec(c['ringattn_bf16'])} | {sec(c['ringattn_t2_fp32'])} | "
          f"{sec(c['ringattn_t2_bf16'])} | {rat(c['ratio_fp32'])} | "
          f"{rat(c['ratio_bf16'])} | {rat(c['torch_ratio_fp32'])} | "
          f"{rat(c['torch_ratio_bf16'])} |")
for p in ("fp32", "bf16"):
    if not ggml_skip:
        k = sum(c["ratio_" + p] >= 3 for c in cases)
        print(f"ggml-compare: ringattn {p} >= 3x ggml in {k} of {len(cases)} cases")
    if not torch_skip:
        k = sum(c["torch_ratio_" + p] >= 1.5 for c in cases)
        print(f"ggml-compare: ringattn P=1 x 2 threads {p} >= 1.5x torch in "
              f"{k} of {len(cases)} cases")
print(f"ggml-compare: record in {record}")
PY
