#!/usr/bin/env bash
# bench-sweep.sh: `ringattn bench` at several rank counts, one mpirun each,
# merged into one JSON list (and optionally charts).
#
#   launch/bench-sweep.sh -r "1 2 4" -o sweep.json [-b BUILD] [-p] -- BENCH_OPTIONS...
#
#   -r LIST   rank counts (default "1 2")
#   -o FILE   merged JSON (default bench-sweep.json)
#   -b DIR    build directory (default build)
#   -p        also draw the charts with launch/bench-plot.py next to FILE
# MPIRUN_FLAGS adds site flags (e.g. "--mca btl self,tcp"). FILE is rewritten
# after every finished point; a failed point is reported and skipped (exit 1
# at the end), the others are kept.
set -euo pipefail
ranks="1 2"
out=bench-sweep.json
build=build
plot=0
while getopts "r:o:b:ph" opt; do
  case "$opt" in
    r) ranks=$OPTARG ;;
    o) out=$OPTARG ;;
    b) build=$OPTARG ;;
    p) plot=1 ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift

if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# shellcheck disable=SC2206
site=(${MPIRUN_FLAGS:-})
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3 # Debian's, with matplotlib
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Merges the finished points into $out; run after every point, so that a
# point that fails or is interrupted later never loses the earlier ones.
merge() {
  "$py" - "$out" "$@" <<'PY'
import json, os, sys, tempfile
out = sys.argv[1]
rows = []
for part in sys.argv[2:]:
    try:
        with open(part) as f:
            rows.extend(json.load(f))
    except (OSError, ValueError) as e:
        print(f"bench-sweep.sh: skipping {part}: {e}", file=sys.stderr)
try:  # atomic: a temporary name in the same directory, then rename
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.tmp.",
                               dir=os.path.dirname(out) or ".")
    with os.fdopen(fd, "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(tmp, out)
except OSError as e:  # one line, never a traceback
    print(f"ringattn: bench-sweep.sh: writing {out} failed: {e}",
          file=sys.stderr)
    sys.exit(1)
print(f"bench-sweep.sh: {len(rows)} rows -> {out}")
PY
}

parts=()
failed=()
for p in $ranks; do
  extra=()
  [ "$p" -gt "$(nproc)" ] && extra+=(--oversubscribe)
  echo "+ mpirun -np $p ${extra[*]} ${site[*]} $build/ringattn bench $* --json $tmp/p$p.json"
  if mpirun -np "$p" "${extra[@]}" "${site[@]}" "$build/ringattn" bench "$@" --json "$tmp/p$p.json"; then
    parts+=("$tmp/p$p.json")
    merge "${parts[@]}"
  else
    echo "bench-sweep.sh: the point at $p ranks failed; keeping the others" >&2
    failed+=("$p")
  fi
done
[ "${#parts[@]}" -gt 0 ] || { echo "bench-sweep.sh: every point failed" >&2; exit 1; }
if [ "$plot" = 1 ]; then
  "$py" "$(dirname "$0")/bench-plot.py" "$out" --out-dir "$(dirname "$out")"
fi
if [ "${#failed[@]}" -gt 0 ]; then
  echo "bench-sweep.sh: failed at ${failed[*]} ranks" >&2
  exit 1
fi
