#!/usr/bin/env bash
# bench-ab.sh: two ringattn binaries (say, before and after a change) timed
# by `ringattn bench` in the same session, alternating A, B, A, B... so
# that a machine whose speed drifts (load, clocks) weighs on both alike.
#
#   launch/bench-ab.sh -a OLD -b NEW [-n ROUNDS] [-r RANKS] -- BENCH_OPTIONS...
#
#   -a FILE   the A binary (e.g. a build of the old commit)
#   -b FILE   the B binary
#   -n N      rounds, each one run of A then one of B (default 3)
#   -r P      ranks per run (default 2), bound one per core
# Prints each run's time_s (the bench's best over its --reps) and, at the
# end, the median of B/A over the rounds, with its range: a ratio above 1
# means B is slower. MPIRUN_FLAGS adds site flags. Every option is checked
# before the first run (exit 2, one line); a run that fails ends the script
# with its exit status, a signal with 128 + its number (INT 130, TERM 143,
# HUP 129) once the running bench has ended. Writes no file.
set -euo pipefail

prog=bench-ab.sh
die() { echo "$prog: $1" >&2; exit 2; }
a="" b="" rounds=3 ranks=2
while getopts ":a:b:n:r:h" opt; do
  case "$opt" in
    a) a=$OPTARG ;;
    b) b=$OPTARG ;;
    n) rounds=$OPTARG ;;
    r) ranks=$OPTARG ;;
    h) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    :) die "-$OPTARG needs a value" ;;
    *) die "unknown option -$OPTARG (see -h)" ;;
  esac
done
shift $((OPTIND - 1))
[ "${1-}" = "--" ] && shift
for bin in "$a" "$b"; do
  [ -n "$bin" ] || die "both -a and -b are required"
  [ -f "$bin" ] && [ -x "$bin" ] || die "$bin: not an executable file"
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "-n $rounds: not a whole number >= 1"
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || die "-r $ranks: not a whole number >= 1"
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# time_s of one bench run: the column named time_s of its first data row.
one() {
  local out st=0
  # shellcheck disable=SC2086
  out=$(mpirun ${MPIRUN_FLAGS-} -np "$ranks" --bind-to core "$1" bench "${@:2}") || st=$?
  if [ "$st" -ne 0 ]; then
    echo "$prog: $1 bench exited $st" >&2
    exit "$st"
  fi
  awk '/^#.*time_s/ { for (i = 2; i <= NF; i++) if ($i == "time_s") c = i - 1 }
       c && !/^#/ && NF >= c { print $c; exit }' <<<"$out"
}

ratios=()
for ((i = 1; i <= rounds; i++)); do
  ta=$(one "$a" "$@")
  tb=$(one "$b" "$@")
  [ -n "$ta" ] && [ -n "$tb" ] || die "no time_s column in the bench output"
  ratios+=("$(awk -v x="$ta" -v y="$tb" 'BEGIN { printf "%.4f", y / x }')")
  echo "round $i  A $ta s  B $tb s  B/A ${ratios[-1]}"
done
printf '%s\n' "${ratios[@]}" | sort -g | awk '
  { r[NR] = $1 }
  END { m = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
        printf "B/A median %.4f (range %.4f .. %.4f over %d rounds)\n",
               m, r[1], r[NR], NR }'
