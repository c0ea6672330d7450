#!/usr/bin/env bash
# bench-sweep.sh: `ringattn bench` at several rank counts, one mpirun each,
# merged into one JSON list (and optionally charts).
#
#   launch/bench-sweep.sh -r "1 2 4" -o sweep.json [-b BUILD] [-p] -- BENCH_OPTIONS...
#
#   -r LIST   rank counts, whole numbers from 1, blank- or comma-separated
#             (default "1 2")
#   -o FILE   merged JSON (default bench-sweep.json), in an existing folder
#   -b DIR    build directory (default build)
#   -p        also draw the charts with launch/bench-plot.py next to FILE
# MPIRUN_FLAGS adds site flags (e.g. "--mca btl self,tcp"). Every option is
# checked before the first point (exit 2, one line). FILE is rewritten
# (whole, with the permissions the umask gives) after every finished point;
# a failed point is reported and skipped (exit 1 at the end), the others
# are kept; a point that refuses the bench options (exit 2) ends the sweep
# with exit 2. An interrupt (INT, TERM, HUP) ends it with exit 1, keeping
# FILE as the last finished point left it.
set -euo pipefail

prog=bench-sweep.sh
die() { echo "$prog: $1" >&2; exit 2; }
here=$(dirname -- "$0")
ranks="1 2"
out=bench-sweep.json
build=build
plot=0
while getopts ":r:o:b:ph" opt; do
  case "$opt" in
    r) ranks=$OPTARG ;;
    o) out=$OPTARG ;;
    b) build=$OPTARG ;;
    p) plot=1 ;;
    h) sed -n '2,18p' "$0"; exit 0 ;;
    :) die "-$OPTARG needs a value" ;;
    *) die "unknown option -$OPTARG (bench options go after --; see $prog -h)" ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift

py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3 # Debian's, with matplotlib

# Every option, before the first point.
options_check() {
  local p a dir
  read -ra points <<<"${ranks//,/ }"
  [ "${#points[@]}" -gt 0 ] || die "-r '$ranks': no rank counts"
  for p in "${points[@]}"; do
    [[ "$p" =~ ^[1-9][0-9]{0,5}$ ]] ||
      die "-r '$ranks': '$p' is not a rank count (a whole number from 1 to 999999)"
  done
  [ -x "$build/ringattn" ] || die "-b $build: no $build/ringattn; build first"
  dir=$(dirname -- "$out")
  [ -n "$out" ] && [ "${out%/}" = "$out" ] || die "-o '$out': must name a file"
  [ -d "$dir" ] || die "-o $out: output folder $dir does not exist"
  [ -w "$dir" ] || die "-o $out: output folder $dir is not writable"
  [ ! -d "$out" ] || die "-o $out: output is a folder"
  for a in "$@"; do
    case "$a" in
      --json | --json=*) die "bench options: $a: the sweep writes the JSON itself (-o FILE)" ;;
    esac
  done
  [ "$plot" = 0 ] || "$py" -c 'import matplotlib' 2>/dev/null ||
    die "-p: $py has no matplotlib (Debian: python3-matplotlib)"
}
options_check "$@"

if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
read -ra site <<<"${MPIRUN_FLAGS:-}"
tmp=$(mktemp -d)
job=
trap 'rm -rf -- "$tmp"' EXIT
trap interrupted INT TERM HUP

# Ends the sweep on a signal: the running point's mpirun (which ends its
# ranks) first, then the temporary folder (the EXIT trap).
interrupted() {
  trap '' INT TERM HUP
  [ -z "$job" ] || { kill -TERM "$job" 2>/dev/null; wait "$job" || true; }
  echo "$prog: interrupted; $out keeps the finished points" >&2
  exit 1
}

# Merges the finished points into $out; run after every point, so that a
# point that fails or is interrupted later never loses the earlier ones.
merge() {
  "$py" - "$here" "$out" "$@" <<'PY'
import json, sys
sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, sys.argv[1])
from ra_script import write_atomic
out = sys.argv[2]
rows = []
for part in sys.argv[3:]:
    try:
        with open(part) as f:
            rows.extend(json.load(f))
    except (OSError, ValueError) as e:
        print(f"bench-sweep.sh: skipping {part}: {e}", file=sys.stderr)
try:
    write_atomic(out, lambda f: json.dump(rows, f, indent=1))
except OSError as e:  # one line, never a traceback
    print(f"ringattn: bench-sweep.sh: writing {out} failed: {e}",
          file=sys.stderr)
    sys.exit(1)
print(f"bench-sweep.sh: {len(rows)} rows -> {out}")
PY
}

parts=()
failed=()
for p in "${points[@]}"; do
  extra=()
  [ "$p" -gt "$(nproc)" ] && extra+=(--oversubscribe)
  echo "+ mpirun -np $p ${extra[*]} ${site[*]} $build/ringattn bench $* --json $tmp/p$p.json"
  # in the background, so that a signal's trap runs at once (a trap waits
  # for a foreground command)
  mpirun -np "$p" "${extra[@]}" "${site[@]}" "$build/ringattn" bench "$@" \
    --json "$tmp/p$p.json" &
  job=$!
  code=0
  wait "$job" || code=$?
  job=
  if [ "$code" = 0 ]; then
    parts+=("$tmp/p$p.json")
    merge "${parts[@]}"
  elif [ "$code" = 2 ]; then
    exit 2 # ringattn said why (its `ringattn:` line); every point would
  else
    echo "bench-sweep.sh: the point at $p ranks failed; keeping the others" >&2
    failed+=("$p")
  fi
done
[ "${#parts[@]}" -gt 0 ] || { echo "bench-sweep.sh: every point failed" >&2; exit 1; }
if [ "$plot" = 1 ]; then
  "$py" "$here/bench-plot.py" "$out" --out-dir "$(dirname -- "$out")"
fi
if [ "${#failed[@]}" -gt 0 ]; then
  echo "bench-sweep.sh: failed at ${failed[*]} ranks" >&2
  exit 1
fi
