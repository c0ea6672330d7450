#!/usr/bin/env bash
# ringattn-mpirun.sh: run and verify one problem with mpirun, on this machine
# or on the hosts of a hostfile or batch allocation.
#
#   launch/ringattn-mpirun.sh [-n RANKS] [-b BUILD_DIR] [-w WORKDIR]
#                             [-f HOSTFILE] [-i INPUT] [--force]
#                             [-- RUN_OPTIONS...]
#
#   -f HOSTFILE  hosts to run on (Open MPI format: "host slots=N" lines)
#   -i INPUT     the user's own input file (/q /k /v); without it a random
#                input is generated into WORKDIR/ringattn-in.h5 first
#   --force      replace the generated input and the output when they exist
#                (without it, an existing one is refused before any mpirun)
# The output is WORKDIR/ringattn-out.h5, or the --out FILE (or --out=FILE)
# of the run options (--force among them also replaces it); verify checks
# the file the run wrote. Until the run has written its output, a failing
# step or a signal (INT, TERM, HUP: exit 130, 143, 129) removes the input
# the script generated; the run removes its own partial output. Oversubscription
# (--oversubscribe) is asked for only when RANKS exceed the slots of the
# allocation: the hostfile's slots (1 per line without slots=), else
# Slurm's SLURM_NTASKS, else PBS's node file, else this machine's cores.
# Environment: SEQ (default 16384), HEADS (8), DIM (64), SEED (1) for the
# generated input, MPIRUN_FLAGS for site flags (e.g. "--mca btl
# self,tcp"), and RINGATTN_GEMM, passed to every host (mpirun -x) when
# set. Every option, count and path is checked before the first
# mpirun (exit 2, one line); every command is echoed before it runs; the
# first failure stops the script with its exit status.
set -euo pipefail

prog="ringattn-mpirun.sh"
die() { echo "$prog: $1" >&2; exit 2; }

ranks=2
build=build
work=.
hostfile=
input=
force=0
while getopts ":n:b:w:f:i:h-:" opt; do
  case "$opt" in
    -) [ "$OPTARG" = force ] || die "unknown option --$OPTARG (run options go after --; see $prog -h)"
       force=1 ;;
    n) ranks=$OPTARG ;;
    b) build=$OPTARG ;;
    w) work=$OPTARG ;;
    f) hostfile=$OPTARG ;;
    i) input=$OPTARG ;;
    h) sed -n '2,28p' "$0"; exit 0 ;;
    :) die "-$OPTARG needs a value" ;;
    *) die "unknown option -$OPTARG (run options go after --; see $prog -h)" ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift

# A whole number of at most nine digits, no sign, no leading zero (MIN 0
# allows 0 itself); else the refusal names WHAT.
count_check() {
  local what=$1 value=$2 min=$3
  [[ "$value" =~ ^(0|[1-9][0-9]{0,8})$ ]] && [ "$value" -ge "$min" ] ||
    die "$what '$value' is not a whole number from $min to 999999999"
}

# The run options' output (the last --out, as ringattn takes it) and
# whether they hold --force; --in is refused: the input is -i's or the
# generated one, and verify must read the same.
run_out=
run_out_given=0
run_force=0
run_options_scan() {
  local a want_value=0
  for a in "$@"; do
    if [ "$want_value" = 1 ]; then
      run_out=$a
      want_value=0
      continue
    fi
    case "$a" in
      --out) want_value=1; run_out_given=1 ;;
      --out=*) run_out=${a#--out=}; run_out_given=1 ;;
      --force) run_force=1 ;;
      --in | --in=*) die "run options: --in: give the input with -i INPUT" ;;
    esac
  done
  if [ "$run_out_given" = 1 ] && { [ "$want_value" = 1 ] || [ -z "$run_out" ]; }; then
    die "run options: --out needs a file name"
  fi
}

# The slots of the allocation the job will run in, into $slots.
hostfile_slots() {
  awk '!/^[ \t]*(#|$)/ { n = 1
         for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) {
           n = substr($i, 7)
           if (n !~ /^[1-9][0-9]*$/ || length(n) > 6) {
             bad = "line " NR ": " $i; exit
           }
         }
         s += n }
       END { if (bad != "") { print bad; exit 1 } print s + 0 }' "$hostfile"
}

allocation_slots() {
  if [ -n "$hostfile" ]; then
    slots=$(hostfile_slots) ||
      die "hostfile $hostfile: $slots is not slots=N with N a whole number from 1 to 999999"
    [ "$slots" -gt 0 ] || die "hostfile $hostfile lists no hosts"
  elif [ -n "${SLURM_NTASKS:-}" ]; then
    count_check SLURM_NTASKS "$SLURM_NTASKS" 1
    slots=$SLURM_NTASKS
  elif [ -n "${PBS_NODEFILE:-}" ] && [ -r "$PBS_NODEFILE" ]; then
    slots=$(wc -l <"$PBS_NODEFILE")
  else
    slots=$(nproc)
  fi
}

# The run options' output: its folder exists, it is not a folder, and it
# is replaced only with --force.
output_check() {
  local dir
  dir=$(dirname -- "$out")
  [ -d "$dir" ] || die "--out $out: output folder $dir does not exist"
  [ -w "$dir" ] || die "--out $out: output folder $dir is not writable"
  [ ! -d "$out" ] || die "--out $out: output is a folder"
  [ "$run_force" = 1 ] || [ "$force" = 1 ] || [ ! -e "$out" ] ||
    die "--out $out: output exists; add --force to replace it"
}

count_check -n "$ranks" 1
ringattn=$build/ringattn
[ -x "$ringattn" ] || die "-b $build: no $ringattn; build first"
if [ -n "$hostfile" ] && ! { [ -f "$hostfile" ] && [ -r "$hostfile" ]; }; then
  die "-f $hostfile: cannot read the hostfile"
fi
if [ -n "$input" ] && ! { [ -f "$input" ] && [ -r "$input" ]; }; then
  die "-i $input: cannot read the input file"
fi
if [ -z "$input" ]; then
  count_check SEQ "${SEQ:=16384}" 1
  count_check HEADS "${HEADS:=8}" 1
  count_check DIM "${DIM:=64}" 1
  count_check SEED "${SEED:=1}" 0
fi
[ ! -e "$work" ] || [ -d "$work" ] || die "-w $work: not a folder"
run_options_scan "$@"
allocation_slots
read -ra site <<<"${MPIRUN_FLAGS:-}"

in=${input:-$work/ringattn-in.h5}
out_args=()
if [ "$run_out_given" = 1 ]; then
  out=$run_out
  output_check
  [ "$force" = 0 ] || out_args=(--force)
else
  out=$work/ringattn-out.h5
  out_args=(--out "$out")
  [ ! -d "$out" ] || die "-w $work: $out is a folder"
  [ "$force" = 1 ] || [ ! -e "$out" ] ||
    die "-w $work: $out exists; add --force to replace it"
  [ "$force" = 0 ] || out_args+=(--force)
fi
if [ -z "$input" ]; then
  [ ! -d "$in" ] || die "-w $work: $in is a folder"
  [ "$force" = 1 ] || [ ! -e "$in" ] ||
    die "-w $work: $in exists; add --force to replace it (or give it with -i)"
fi
mkdir -p -- "$work" 2>/dev/null || die "-w $work: cannot make the folder"

# Open MPI refuses root without these; harmless for other users.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
extra=()
[ -n "$hostfile" ] && extra+=(--hostfile "$hostfile")
# the tile engine chosen by the variable, on every host (the ranks refuse
# to run on mixed engines)
[ -z "${RINGATTN_GEMM+set}" ] || extra+=(-x RINGATTN_GEMM)
if [ "$ranks" -gt "$slots" ]; then
  echo "$prog: $ranks ranks on $slots slots: oversubscribing" >&2
  extra+=(--oversubscribe)
fi

# The generated input goes with a run that does not finish: a failing step
# (exit 1 or the step's status) or a signal (exit 128 + N) removes it. The
# running mpirun (in the background, so that a trap runs at once) is ended
# first; it ends its ranks.
job=
made=
stop() {
  local code=$1
  trap - EXIT
  trap '' INT TERM HUP
  [ -z "$job" ] || { kill -TERM "$job" 2>/dev/null; wait "$job" || true; }
  if [ -n "$made" ]; then
    rm -f -- "$made"
    echo "$prog: stopped; removed the generated input $made" >&2
  fi
  exit "$code"
}
trap 'stop $?' EXIT
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP

run() {
  echo "+ $*"
  "$@" &
  job=$!
  local code=0
  wait "$job" || code=$?
  job=
  return "$code"
}
if [ -z "$input" ]; then
  made=$in
  run mpirun -np "$ranks" "${extra[@]}" "${site[@]}" "$ringattn" gen --out "$in" --force \
      --seq "$SEQ" --heads "$HEADS" --dim "$DIM" --seed "$SEED"
fi
run mpirun -np "$ranks" "${extra[@]}" "${site[@]}" "$ringattn" run --in "$in" "${out_args[@]}" "$@"
made= # the run finished: its input and output are the user's
trap - EXIT
run mpirun -np "$ranks" "${extra[@]}" "${site[@]}" "$ringattn" verify --in "$in" --out "$out"
