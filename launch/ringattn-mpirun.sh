#!/usr/bin/env bash
# ringattn-mpirun.sh: run and verify one problem with mpirun, on this machine
# or on the hosts of a hostfile or batch allocation.
#
#   launch/ringattn-mpirun.sh [-n RANKS] [-b BUILD_DIR] [-w WORKDIR]
#                             [-f HOSTFILE] [-i INPUT] [-- RUN_OPTIONS...]
#
#   -f HOSTFILE  hosts to run on (Open MPI format: "host slots=N" lines)
#   -i INPUT     the user's own input file (/q /k /v); without it a random
#                input is generated into WORKDIR first
# Oversubscription (--oversubscribe) is asked for only when RANKS exceed the
# slots of the allocation: the hostfile's slots (1 per line without slots=),
# else Slurm's SLURM_NTASKS, else PBS's node file, else this machine's cores.
# Environment: SEQ (default 16384), HEADS (8), DIM (64), SEED (1) for the
# generated input, and MPIRUN_FLAGS for site flags (e.g. "--mca btl
# self,tcp"). Every command is echoed before it runs; the first failure
# stops the script.
set -euo pipefail

prog="ringattn-mpirun.sh"
ranks=2
build=build
work=.
hostfile=
input=
while getopts "n:b:w:f:i:h" opt; do
  case "$opt" in
    n) ranks=$OPTARG ;;
    b) build=$OPTARG ;;
    w) work=$OPTARG ;;
    f) hostfile=$OPTARG ;;
    i) input=$OPTARG ;;
    *) sed -n '2,18p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift

die() { echo "$prog: $1" >&2; exit 2; }
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || die "-n '$ranks' is not a positive number"
ringattn=$build/ringattn
[ -x "$ringattn" ] || die "no $ringattn; build first"
[ -z "$hostfile" ] || [ -r "$hostfile" ] || die "cannot read hostfile $hostfile"
[ -z "$input" ] || [ -r "$input" ] || die "cannot read input file $input"

# The slots of the allocation the job will run in.
allocation_slots() {
  if [ -n "$hostfile" ]; then
    awk '!/^[ \t]*(#|$)/ { n = 1
           for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) n = substr($i, 7)
           s += n } END { print s + 0 }' "$hostfile"
  elif [ -n "${SLURM_NTASKS:-}" ]; then
    echo "$SLURM_NTASKS"
  elif [ -n "${PBS_NODEFILE:-}" ] && [ -r "$PBS_NODEFILE" ]; then
    wc -l <"$PBS_NODEFILE"
  else
    nproc
  fi
}

mkdir -p "$work"
in=${input:-$work/ringattn-in.h5}
out=$work/ringattn-out.h5

# Open MPI refuses root without these; harmless for other users.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
slots=$(allocation_slots)
extra=()
[ -n "$hostfile" ] && extra+=(--hostfile "$hostfile")
if [ "$ranks" -gt "$slots" ]; then
  echo "$prog: $ranks ranks on $slots slots: oversubscribing" >&2
  extra+=(--oversubscribe)
fi
# shellcheck disable=SC2206
site=(${MPIRUN_FLAGS:-})

run() { echo "+ $*"; "$@"; }
if [ -z "$input" ]; then
  run mpirun -np "$ranks" "${extra[@]}" "${site[@]}" "$ringattn" gen --out "$in" --force \
      --seq "${SEQ:-16384}" --heads "${HEADS:-8}" --dim "${DIM:-64}" --seed "${SEED:-1}"
fi
run mpirun -np "$ranks" "${extra[@]}" "${site[@]}" "$ringattn" run --in "$in" --out "$out" --force "$@"
run mpirun -np "$ranks" "${extra[@]}" "${site[@]}" "$ringattn" verify --in "$in" --out "$out"
