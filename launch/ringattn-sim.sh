#!/usr/bin/env bash
# ringattn-sim.sh [-n P] [--platform FILE|NAME] [--hostfile FILE]
#                 [--ranks-per-node R] [--oversubscribe] [--program PATH]
#                 [ringattn-sim options...]
# Runs ringattn-sim (the engine under SimGrid SMPI, docs/SIMULATION.md) on P
# simulated ranks with the switches it needs: the simulated core speed of
# the shipped platforms (100 Gf) as this machine's, the collective
# algorithms, one thread per rank in exact mode, and at scale (--mode
# scale) all ranks on one thread, no timing of real compute, small stacks
# (docs/SIMULATION.md). --help: these options and ringattn-sim's. Checks
# first, exit 2 and one
# line: a missing or malformed platform, a hostfile naming a host the
# platform lacks, more ranks on a host than its cores without
# --oversubscribe. NAME is a platform of launch/sim/platforms (fat-tree-1024,
# dragonfly-1024, torus-1024, ethernet-1024). Without --hostfile, ranks fill
# the platform's hosts in order, R per host (default 1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
fail() { echo "ringattn-sim.sh: $*" >&2; exit 2; }

ranks=16 platform=fat-tree-1024 hostfile="" per_node=1 over=0
program="${RINGATTN_SIM:-}" mode=exact args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n|--ranks) ranks="${2:?}"; shift 2 ;;
    --platform) platform="${2:?}"; shift 2 ;;
    --hostfile) hostfile="${2:?}"; shift 2 ;;
    --ranks-per-node) per_node="${2:?}"; shift 2 ;;
    --oversubscribe) over=1; shift ;;
    --program) program="${2:?}"; shift 2 ;;
    --mode) mode="${2:?}"; args+=("$1" "$2"); shift 2 ;;
    --help) # the wrapper's options, then ringattn-sim's (smpirun would
            # take --help for its own)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      ranks=1 args=(--usage); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || fail "-n: '$ranks' is not a rank count"
[[ "$per_node" =~ ^[1-9][0-9]*$ ]] || fail "--ranks-per-node: '$per_node' is not a count"
if [ ! -e "$platform" ] && [ -e "$here/sim/platforms/$platform.xml" ]; then
  platform="$here/sim/platforms/$platform.xml"
fi
if [ -z "$program" ]; then
  for p in "$here/../build/sim/ringattn-sim" "$here/../build-sim/ringattn-sim"; do
    [ -x "$p" ] && { program="$p"; break; }
  done
fi
[ -n "$program" ] && [ -x "$program" ] ||
  fail "--program: no ringattn-sim found (build: launch/setup.sh --sim build-sim)"
command -v smpirun >/dev/null || fail "smpirun not found (apt-get install libsimgrid-dev)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The platform's hosts and cores ("name cores" lines); the checks.
python3 "$here/sim/platform_hosts.py" "$platform" ${hostfile:+"$hostfile"} \
    > "$tmp/hosts" || exit 2
if [ -z "$hostfile" ]; then
  hostfile="$tmp/hostfile"
  awk -v r="$ranks" -v k="$per_node" '{for (i = 0; i < k && n < r; i++) {print $1; n++}}
      END {exit n < r}' "$tmp/hosts" > "$hostfile" ||
    fail "-n $ranks: more ranks than the platform's $(wc -l < "$tmp/hosts") hosts x $per_node (--ranks-per-node)"
fi
# Ranks go to the hostfile's lines in turn (host:N as N lines), wrapping.
bad="$(awk -v P="$ranks" -v over="$over" '
  NR == FNR {cores[$1] = $2; next}
  {split($0, a, ":"); n = a[2] == "" ? 1 : a[2]
   for (i = 0; i < n; i++) line[L++] = a[1]}
  END {for (r = 0; r < P; r++) cnt[line[r % L]]++
       for (h in cnt) if (cnt[h] > cores[h] && !over) {
         printf "%d ranks on host %s of %d cores", cnt[h], h, cores[h]; exit}}' \
  "$tmp/hosts" <(grep -v '^[[:space:]]*$' "$hostfile"))"
[ -z "$bad" ] || fail "-n $ranks: $bad (--oversubscribe allows it)"

# Open MPI's choice of collective algorithms (as the real runs; SMPI's
# default selector took 100 times longer at 128 ranks), except that the
# small collectives of agreement and set-up use algorithms that are not
# node-aware: a node-aware one makes SMPI split every new communicator by
# node first, which took 35 s per communicator at 512 ranks.
cfg=(--cfg=smpi/host-speed:100Gf
     --cfg=smpi/coll-selector:ompi --cfg=smpi/allreduce:rdb
     --cfg=smpi/bcast:binomial_tree --cfg=smpi/allgather:bruck
     --cfg=smpi/reduce:binomial --cfg=smpi/gather:ompi_binomial
     --cfg=smpi/barrier:ompi_recursivedoubling
     --log=root.thres:warning --log=smpi_config.thres:warning)
# MPI_Iprobe costs 1 us, and in exact mode MPI_Test, not SMPI's default
# 0.1 ms grown on every unsuccessful try: the all-gather tests its
# transfers from the kernel's progress hook, which at 0.1 ms a test delayed
# it by seconds.
cfg+=(--cfg=smpi/iprobe:1e-6 --cfg=smpi/grow-injected-times:no)
if [ "$mode" = scale ]; then
  # No kernel runs (no OpenMP region waits in MPI), so all ranks share one
  # thread (raw contexts: a switch costs no system call); compute is
  # injected, so real compute is not timed; folded blocks of 16 MiB keep
  # the mappings under vm.max_map_count at 1024 ranks.
  cfg+=(--cfg=contexts/factory:raw --cfg=smpi/simulate-computation:no
        --cfg=contexts/stack-size:2048
        --cfg=smpi/shared-malloc-blocksize:16777216)
  # ringattn-sim charges a test itself, 1 us per MPI_Testall rather than
  # per request, and blocks where comm/ polls (comm/sim/sim_waits.c)
  cfg+=(--cfg=smpi/test:0)
else
  # The kernels' OpenMP regions poll MPI between tiles: each rank needs a
  # thread of its own (SimGrid's default contexts hung at 4 ranks).
  cfg+=(--cfg=contexts/factory:thread --cfg=smpi/test:1e-6)
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# -no-privatize: the engine keeps no per-rank globals (thread-local
# state only; docs/SIMULATION.md), and a copy of the program per rank
# would cost memory at 1024 ranks.
# A refusal is ringattn-sim's one line: SMPI's notes of a non-zero exit
# and smpirun's "Execution failed" line are left out.
set +e
smpirun -quiet -no-privatize -np "$ranks" -platform "$platform" \
    -hostfile "$hostfile" "${cfg[@]}" --log=smpi_kernel.thres:error \
    "$program" --platform "$(basename "$platform")" "${args[@]}" |
  grep --line-buffered -v '^Execution failed with code [0-9]*\.$'
exit "${PIPESTATUS[0]}"
