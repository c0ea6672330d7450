#!/usr/bin/env bash
# bench-sweep.sh: `ringattn bench` at several rank counts, one mpirun each,
# merged into one JSON list (and optionally charts).
#
#   launch/bench-sweep.sh -r "1 2 4" -o sweep.json [-b BUILD] [-p] [--force]
#                         -- BENCH_OPTIONS...
#
#   -r LIST   rank counts, whole numbers from 1, blank- or comma-separated
#             (default "1 2")
#   -o FILE   merged JSON (default bench-sweep.json), in an existing folder
#   -b DIR    build directory (default build)
#   -p        also draw the charts with launch/bench-plot.py next to FILE,
#             named after it: sweep.json gives sweep-gflops.png and
#             sweep-scaling.png (they need the yardsticks: -p refuses
#             --no-yardsticks)
#   --force   replace FILE, the charts and the --csv file when they exist
#             (without it an existing one is refused before the first point)
# A --csv CSV among the bench options gets every point's rows under one
# header. MPIRUN_FLAGS adds site flags (e.g. "--mca btl self,tcp"). Every
# option is checked before the first point (exit 2, one line). FILE (and
# CSV) is rewritten (whole, with the permissions the umask gives) after
# every finished point; a failed point is reported and skipped (exit 1 at
# the end), the others are kept; a point that refuses the bench options
# (exit 2) ends the sweep with exit 2. A signal (INT, TERM, HUP) ends it
# with exit 130, 143 or 129, keeping FILE as the last finished point left
# it.
set -euo pipefail

prog=bench-sweep.sh
die() { echo "$prog: $1" >&2; exit 2; }
here=$(dirname -- "$0")
ranks="1 2"
out=bench-sweep.json
build=build
plot=0
force=0
while getopts ":r:o:b:ph-:" opt; do
  case "$opt" in
    -) [ "$OPTARG" = force ] || die "unknown option --$OPTARG (bench options go after --; see $prog -h)"
       force=1 ;;
    r) ranks=$OPTARG ;;
    o) out=$OPTARG ;;
    b) build=$OPTARG ;;
    p) plot=1 ;;
    h) sed -n '2,29p' "$0"; exit 0 ;;
    :) die "-$OPTARG needs a value" ;;
    *) die "unknown option -$OPTARG (bench options go after --; see $prog -h)" ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift

py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3 # Debian's, with matplotlib

# FILE (WHAT names it) may be written: its folder exists and is writable,
# it is not a folder, and it exists only with --force.
output_check() {
  local what=$1 file=$2 dir
  dir=$(dirname -- "$file")
  [ -n "$file" ] && [ "${file%/}" = "$file" ] || die "$what '$file': must name a file"
  [ -d "$dir" ] || die "$what $file: output folder $dir does not exist"
  [ -w "$dir" ] || die "$what $file: output folder $dir is not writable"
  [ ! -d "$file" ] || die "$what $file: output is a folder"
  [ "$force" = 1 ] || [ ! -e "$file" ] || die "$what $file: exists; add --force to replace it"
}

# The bench options without --csv FILE (or --csv=FILE), into bench_args;
# the file into csv. --json is refused: the sweep writes the JSON itself.
bench_options_scan() {
  local a want=0
  bench_args=()
  csv=
  for a in "$@"; do
    if [ "$want" = 1 ]; then
      csv=$a
      want=0
      continue
    fi
    case "$a" in
      --json | --json=*) die "bench options: $a: the sweep writes the JSON itself (-o FILE)" ;;
      --csv) want=1 ;;
      --csv=*) csv=${a#--csv=} ;;
      --no-yardsticks)
        [ "$plot" = 0 ] || die "-p: the charts need the yardsticks; drop --no-yardsticks or -p"
        bench_args+=("$a") ;;
      *) bench_args+=("$a") ;;
    esac
  done
  [ "$want" = 0 ] || die "bench options: --csv needs a file name"
  [ -z "$csv" ] || output_check "bench options: --csv" "$csv"
}

# Every option, before the first point.
options_check() {
  local p
  read -ra points <<<"${ranks//,/ }"
  [ "${#points[@]}" -gt 0 ] || die "-r '$ranks': no rank counts"
  for p in "${points[@]}"; do
    [[ "$p" =~ ^[1-9][0-9]{0,5}$ ]] ||
      die "-r '$ranks': '$p' is not a rank count (a whole number from 1 to 999999)"
  done
  [ -x "$build/ringattn" ] || die "-b $build: no $build/ringattn; build first"
  output_check -o "$out"
  bench_options_scan "$@"
  [ "$plot" = 1 ] || return 0
  "$py" -c 'import matplotlib' 2>/dev/null ||
    die "-p: $py has no matplotlib (Debian: python3-matplotlib)"
  stem=$(basename -- "$out")
  stem=${stem%.json}
  output_check -p "$(dirname -- "$out")/$stem-gflops.png"
  output_check -p "$(dirname -- "$out")/$stem-scaling.png"
}
options_check "$@"

if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
read -ra site <<<"${MPIRUN_FLAGS:-}"
tmp=$(mktemp -d)
job=
trap 'rm -rf -- "$tmp"' EXIT
trap 'interrupted 130' INT
trap 'interrupted 143' TERM
trap 'interrupted 129' HUP

# Ends the sweep on a signal with exit CODE: the running point's mpirun
# (which ends its ranks) first, then the temporary folder (the EXIT trap).
interrupted() {
  trap '' INT TERM HUP
  [ -z "$job" ] || { kill -TERM "$job" 2>/dev/null; wait "$job" || true; }
  echo "$prog: interrupted; $out keeps the finished points" >&2
  exit "$1"
}

# Merges the finished points (their JSON files; the CSV files beside them)
# into $out and $csv; run after every point, so that a point that fails or
# is interrupted later never loses the earlier ones.
merge() {
  "$py" - "$here" "$out" "$csv" "$@" <<'PY'
import json, sys
sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, sys.argv[1])
from ra_script import write_atomic
out, csv, parts = sys.argv[2], sys.argv[3], sys.argv[4:]
rows, lines = [], []
for part in parts:
    try:
        with open(part) as f:
            rows.extend(json.load(f))
        if csv:  # one header, then every point's rows
            with open(part[:-len(".json")] + ".csv") as f:
                text = f.read().splitlines()
            lines += text if not lines else text[1:]
    except (OSError, ValueError) as e:
        print(f"bench-sweep.sh: skipping {part}: {e}", file=sys.stderr)
try:
    write_atomic(out, lambda f: json.dump(rows, f, indent=1))
    if csv:
        write_atomic(csv, lambda f: f.write("".join(l + "\n" for l in lines)))
except OSError as e:  # one line, never a traceback
    print(f"ringattn: bench-sweep.sh: writing {e.filename or out} failed: "
          f"{e.strerror or e}", file=sys.stderr)
    sys.exit(1)
print(f"bench-sweep.sh: {len(rows)} rows -> {out}{' and ' + csv if csv else ''}")
PY
}

parts=()
failed=()
for p in "${points[@]}"; do
  extra=()
  [ "$p" -gt "$(nproc)" ] && extra+=(--oversubscribe)
  tables=(--json "$tmp/p$p.json")
  [ -z "$csv" ] || tables+=(--csv "$tmp/p$p.csv")
  echo "+ mpirun -np $p ${extra[*]} ${site[*]} $build/ringattn bench ${bench_args[*]} ${tables[*]}"
  # in the background, so that a signal's trap runs at once (a trap waits
  # for a foreground command)
  mpirun -np "$p" "${extra[@]}" "${site[@]}" "$build/ringattn" bench \
    "${bench_args[@]}" "${tables[@]}" &
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
  replace=()
  [ "$force" = 0 ] || replace=(--force)
  "$py" "$here/bench-plot.py" "$out" --out-dir "$(dirname -- "$out")" \
    --stem "$stem" "${replace[@]}"
fi
if [ "${#failed[@]}" -gt 0 ]; then
  echo "bench-sweep.sh: failed at ${failed[*]} ranks" >&2
  exit 1
fi
