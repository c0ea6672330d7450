#!/usr/bin/env bash
# fake-cluster.sh: K fake nodes on one machine, for multi-node runs without a
# cluster (tests, benchmarks, trying things on a laptop). Needs root.
#
#   launch/fake-cluster.sh up K [--rate R] [--slots S] [--slurm] [--dry-run]
#                                         build K nodes (1..64, S 1..1024)
#   launch/fake-cluster.sh hostfile       print the path of the hostfile
#   launch/fake-cluster.sh mpirun-args    print the flags mpirun needs
#   launch/fake-cluster.sh slurm-conf     print the SLURM_CONF of --slurm
#   launch/fake-cluster.sh status         show the nodes and their links
#   launch/fake-cluster.sh down           remove everything
#
# Node i (1 <= i <= K) is the network namespace ra-node<i>: one veth link on
# the bridge ra-br0, address 198.18.0.<i>/24 (the bridge is 198.18.0.254), a
# tc tbf rate limit R in each direction of its link (default 1gbit; R is a
# number and kbit, mbit or gbit, decimals allowed down to 1 bit/s: 400mbit,
# 1.5gbit; from 1kbit to 1000gbit). Open MPI starts its daemons there
# through plm_rsh_agent (the agent script below), which also gives each node
# its own hostname (node<i>), its own /dev/shm and its own Open MPI session
# directory, so that ranks of different nodes never share memory segments.
# Only the benchmarking range 198.18.0.0/15 is ever used.
#
#   launch/fake-cluster.sh up 3 --rate 1gbit
#   mpirun $(launch/fake-cluster.sh mpirun-args) -np 6 --map-by node build/ringattn bench
#   launch/fake-cluster.sh down
#
# With --slurm the nodes also form a Slurm cluster (Debian's slurmctld,
# slurmd and munge): a controller on the bridge address, one slurmd per node
# (NodeName node<i>, S CPUs), partition `fake`, PMIx for srun --mpi=pmix,
# its own munge daemon and key. Use it with SLURM_CONF set:
#   export SLURM_CONF=$(launch/fake-cluster.sh slurm-conf)
#   sbatch --wait -N 2 --ntasks-per-node 1 --cpus-per-task 2 launch/ringattn.slurm
#
# One user at a time: every user of the fake cluster (this script, the
# tests, scaling-study.py) holds the lock /tmp/ra-fake-cluster.lock (flock)
# for as long as it uses the nodes, and says so on stderr while it waits
# for another ("waiting for the fake cluster held by PID ..."). A caller
# that holds the lock itself (flock(1), or a process that took it) owns
# the cluster: `up` and `down` run under its lock. Otherwise `up` takes the
# lock, waiting for the cluster's current user, and leaves a holder process
# that keeps it until `down`; `down` waits likewise for a cluster it did
# not build (a test's), then removes the nodes and ends the holder.
#
# `up` first removes a cluster left behind without its holder, and removes
# what it built when a step fails (exit 1) or a signal ends it (INT, TERM,
# HUP: exit 130, 143, 129; also while it waits). The state lives in
# RA_FAKE_CLUSTER_DIR (default /run/ringattn-fake-cluster), an absolute
# path whose parent exists; `up` makes it (or takes an empty folder) and
# writes its marker file there, and both `up` and `down` refuse, touching
# nothing, a folder that holds files but no marker. `down` removes the
# folder only if `up` made it, else only what `up` put in it. A state path
# with blanks works: what other programs are given (mpirun-args, the
# agent, slurm.conf) names it through a symlink of plain characters in
# /run. `up --dry-run` only checks the options, root, the tools and the
# state folder. Exit codes: 0 ok, 1 a step failed, 128 + N the signal N
# ended `up` or `down`, 2 usage, a bad option, the state folder, not root,
# or a missing tool.
set -euo pipefail

prog=fake-cluster.sh
state=${RA_FAKE_CLUSTER_DIR:-/run/ringattn-fake-cluster}
marker=.ringattn-fake-cluster # inside $state: the folder is this script's
bridge=ra-br0
subnet=198.18.0.0/24
bridge_addr=198.18.0.254
max_nodes=64
max_slots=1024
# tc rates this script accepts, in bit/s
min_rate_bits=1000
max_rate_bits=1000000000000
lock=/tmp/ra-fake-cluster.lock # held by the cluster's one user (see above)
holder=                        # the holder process this run started
locked=0                       # this run (or its caller) holds the lock

die() { echo "$prog: $2" >&2; exit "$1"; }

# The name of the state folder given to other programs: mpirun splits its
# arguments, and Open MPI its plm_rsh_agent, on blanks. The folder itself
# when its path is plain, else a symlink to it that `up` makes.
if [[ "$state" =~ ^[A-Za-z0-9_./+:@%,=-]+$ ]]; then
  plain=$state
else
  plain=/run/ringattn-fake-cluster.link-$(printf '%s' "$state" | cksum | cut -d' ' -f1)
fi

need_root_and_tools() {
  [ "$(id -u)" = 0 ] || die 2 "needs root (network namespaces, bridges, tc)"
  local t
  for t in ip tc unshare mount hostname flock setsid; do
    command -v "$t" >/dev/null 2>&1 ||
      die 2 "'$t' is missing (install iproute2 and util-linux)"
  done
}

# Refuses (exit 2) a state folder this script may not use: a relative path
# (the agent runs elsewhere), characters the generated scripts cannot hold,
# a missing parent, something that is not a folder, or a folder with files
# but without the marker (someone else's: never emptied nor removed).
state_check() {
  local what="RA_FAKE_CLUSTER_DIR '$state'"
  case "$state" in
    /*) ;;
    *) die 2 "$what: not an absolute path" ;;
  esac
  local unsafe=$'"\\$`\n'
  [[ "$state" != *["$unsafe"]* ]] ||
    die 2 "$what: holds a double quote, backslash, dollar, backquote or newline"
  [ -d "$(dirname -- "$state")" ] || die 2 "$what: no parent folder $(dirname -- "$state")"
  if [ -e "$state" ] || [ -L "$state" ]; then
    [ -d "$state" ] || die 2 "$what: exists and is not a folder"
    [ -f "$state/$marker" ] || [ -z "$(ls -A -- "$state")" ] ||
      die 2 "$what: a folder with files that fake-cluster.sh did not make (no $marker); left untouched"
  fi
  if [ "$plain" != "$state" ] && { [ -e "$plain" ] || [ -L "$plain" ]; } &&
     [ "$(readlink -- "$plain")" != "$state" ]; then
    die 2 "$what: $plain, its plain name, is taken by something else"
  fi
  return 0
}

# Makes the state folder (or takes the empty one there) and marks it; the
# marker records whether this script made the folder. Then the plain name.
state_make() {
  local made=0
  [ -d "$state" ] || { mkdir -- "$state"; made=1; }
  echo "made=$made" >"$state/$marker"
  [ "$plain" = "$state" ] || ln -sfn -- "$state" "$plain"
}

# Removes what state_make and `up` put there: the whole folder if this
# script made it, else its contents; nothing without the marker.
state_remove() {
  [ -f "$state/$marker" ] || return 0
  [ "$plain" = "$state" ] || rm -f -- "$plain"
  if grep -qx 'made=1' "$state/$marker"; then
    rm -rf -- "$state"
  else
    find "$state" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
  fi
}

# The namespaces this script made (ra-node<i>), whatever K was.
our_namespaces() { ip netns list 2>/dev/null | awk '$1 ~ /^ra-node[0-9]+$/ {print $1}'; }

# The pids that hold the lock (flock), as /proc/locks lists them.
lock_holders() {
  local id
  id=$(stat -L -c '%Hd %Ld %i' -- "$lock" 2>/dev/null) || return 0
  awk -v id="$id" 'BEGIN { split(id, d, " ")
                           want = sprintf("%02x:%02x:%s", d[1], d[2], d[3]) }
                   $2 == "FLOCK" && $6 == want { print $5 }' /proc/locks
}

# Whether this process or one of its ancestors holds the lock: then the
# caller owns the cluster, and this run works under its lock.
lock_ours() {
  local holders pid=$$
  holders=" $(lock_holders | tr '\n' ' ') "
  while [[ "$pid" =~ ^[0-9]+$ ]] && [ "$pid" -gt 1 ]; do
    [[ "$holders" == *" $pid "* ]] && return 0
    pid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || return 1
  done
  return 1
}

# Who holds the lock as process PID: what it wrote into the lock file
# ("PID WHAT"), else its command line.
holder_text() {
  local first="" rest=""
  read -r first rest <"$lock" 2>/dev/null || true
  if [ "$first" = "$1" ] && [ -n "$rest" ]; then
    echo "$rest"
  else
    tr '\0\n' '  ' <"/proc/$1/cmdline" 2>/dev/null | cut -c1-160
  fi
}

# Takes the lock for this run as WHAT (e.g. "fake-cluster.sh up 3"): a
# holder process in a session of its own (the terminal's signals never
# reach it) waits for the lock and then keeps it until lock_release, after
# this script has ended if need be. Says so while another user holds it.
lock_take() {
  local what=$1 first said=""
  setsid flock -o "$lock" sleep infinity </dev/null >/dev/null 2>&1 &
  holder=$!
  disown "$holder" # never reported nor waited for: it outlives `up`
  while first=$(lock_holders | head -n 1) && [ "$first" != "$holder" ]; do
    kill -0 "$holder" 2>/dev/null || die 1 "the holder of $lock ended"
    if [ -n "$first" ] && [ "$first" != "$said" ]; then
      echo "$prog: waiting for the fake cluster held by PID $first ($(holder_text "$first"))" >&2
      said=$first
    fi
    sleep 0.1
  done
  echo "$holder $what" >"$lock"
}

# Ends the holder (its session: flock and its sleep) and returns once the
# lock is free of it.
lock_release() {
  [ -n "$holder" ] || return 0
  kill -TERM -- "-$holder" 2>/dev/null || true
  while [ "$(lock_holders | head -n 1)" = "$holder" ]; do
    sleep 0.05
  done
  holder=
}

# The lock for `up` or `down` (WHAT): the caller's when it holds it, the
# holder of this state's cluster for `down`, else a holder of this run's.
lock_get() {
  local h=""
  if lock_ours; then
    :
  elif [ "$cmd" = down ] && [ -f "$state/holder" ] &&
       h=$(cat -- "$state/holder") && [[ "$h" =~ ^[1-9][0-9]*$ ]] &&
       [ "$(lock_holders | head -n 1)" = "$h" ]; then
    holder=$h
  else
    lock_take "$1"
  fi
  locked=1
}

# Ends `up` or `down` after a failing step (set -e: WHY "failed") or a
# signal (WHY "interrupted") with exit CODE: removes the cluster once this
# run holds the lock (before, the nodes are another user's) and ends the
# holder.
abort() {
  local why=$1 code=$2
  trap - EXIT
  trap '' INT TERM HUP
  set +e
  if [ "$locked" = 1 ]; then
    echo "$prog: $cmd $why; removing the cluster" >&2
    cluster_down
  else
    echo "$prog: $cmd $why while waiting for the fake cluster; nothing changed" >&2
  fi
  lock_release
  exit "$code"
}

# From here on a failing step or a signal ends the run through abort.
abort_traps() {
  trap 'abort failed 1' EXIT
  trap 'abort interrupted 130' INT
  trap 'abort interrupted 143' TERM
  trap 'abort interrupted 129' HUP
}

# Bits per second of a rate NUM[.FRAC]UNIT (UNIT kbit, mbit or gbit; FRAC
# no finer than one bit/s), within [min_rate_bits, max_rate_bits]; status 1
# for anything else.
rate_bits() {
  local int frac unit digits bits zeros=000000000
  [[ "$1" =~ ^([0-9]{1,6})(\.([0-9]+))?(kbit|mbit|gbit)$ ]] || return 1
  int=${BASH_REMATCH[1]} frac=${BASH_REMATCH[3]} unit=${BASH_REMATCH[4]}
  case "$unit" in
    kbit) digits=3 ;;
    mbit) digits=6 ;;
    gbit) digits=9 ;;
  esac
  [ "${#frac}" -le "$digits" ] || return 1
  frac=$frac${zeros:0:digits-${#frac}}
  bits=$((10#$int * 10 ** digits + 10#$frac))
  [ "$bits" -ge "$min_rate_bits" ] && [ "$bits" -le "$max_rate_bits" ] || return 1
  echo "$bits"
}

# Bytes of tbf burst for a rate in bit/s: at least 256 KiB, and at least
# 10 ms of traffic, so that fast links are not limited by timer granularity.
burst_for() {
  local b=$(($1 / 8 / 100))
  [ "$b" -lt 262144 ] && b=262144
  echo "$b"
}

need_slurm_tools() {
  local t
  for t in slurmctld slurmd sbatch sinfo munged mungekey; do
    command -v "$t" >/dev/null 2>&1 ||
      die 2 "'$t' is missing (install slurmctld slurmd slurm-client munge)"
  done
}

# Ends the Slurm daemons that `up --slurm` started (their pid files) and
# waits until they are gone.
slurm_down() {
  local f pid alive pids=()
  for f in "$state"/slurm/*.pid; do
    [ -f "$f" ] && pid=$(cat "$f" 2>/dev/null) && [[ "$pid" =~ ^[1-9][0-9]*$ ]] &&
      pids+=("$pid")
  done
  [ "${#pids[@]}" -gt 0 ] || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 1 20); do
    alive=0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ "$alive" = 0 ] && return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  return 0
}

# Removes the Slurm daemons, the namespaces (with their processes) and the
# bridge: the network part of any cluster, whichever state folder it has.
net_down() {
  local ns pid
  slurm_down
  for ns in $(our_namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null || true
    done
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

cluster_down() {
  net_down
  state_remove
}

write_agent() {
  cat >"$plain/agent" <<EOF
#!/bin/sh
# plm_rsh_agent of the fake cluster: AGENT [flags] HOST COMMAND... runs
# COMMAND in HOST's namespace with its own hostname, /dev/shm and Open MPI
# session directory. HOST is 198.18.0.<i> or node<i>.
while [ \$# -gt 0 ]; do
  case "\$1" in -*) shift ;; *) break ;; esac
done
[ \$# -ge 2 ] || { echo "fake-cluster agent: usage: HOST COMMAND" >&2; exit 2; }
host=\$1
shift
case "\$host" in
  198.18.0.*) i=\${host#198.18.0.} ;;
  node*) i=\${host#node} ;;
  *) echo "fake-cluster agent: unknown host \$host" >&2; exit 2 ;;
esac
ns=ra-node\$i
ip netns list | grep -q "^\$ns\\( \\|\$\\)" ||
  { echo "fake-cluster agent: no node \$host" >&2; exit 2; }
mkdir -p "$plain/node\$i/session"
exec ip netns exec "\$ns" unshare --uts --mount --propagation private /bin/sh -c '
  hostname "node\$1" && mount -t tmpfs -o size=4g tmpfs /dev/shm || exit 1
  export OMPI_MCA_orte_tmpdir_base="\$2"
  shift 2
  exec /bin/sh -c "\$*"' agent "\$i" "$plain/node\$i/session" "\$@"
EOF
  chmod 755 "$plain/agent"
}

add_node() {
  local i=$1 rate=$2 burst=$3 ns=ra-node$1 host=ra-v$1
  ip netns add "$ns"
  ip link add "$host" type veth peer name eth0 netns "$ns"
  ip link set "$host" master "$bridge"
  ip link set "$host" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "198.18.0.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  # the link's rate, both ways: out of the node, and into it
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" \
    burst "$burst" latency 50ms
  tc qdisc add dev "$host" root tbf rate "$rate" burst "$burst" latency 50ms
}

# An asynchronous job of a script starts with SIGINT ignored, and a shell
# cannot trap a signal it was started ignoring: `up` then runs itself again
# through perl (Debian's perl-base) with SIGINT at its default action, so
# that an interrupt removes what was built instead of being lost.
sigint_default() {
  local ign
  [ -z "${RA_FAKE_CLUSTER_SIGINT:-}" ] && command -v perl >/dev/null 2>&1 ||
    return 0
  ign=$(awk '/^SigIgn:/ {print $2}' "/proc/$$/status" 2>/dev/null) || return 0
  [[ "$ign" =~ ^[0-9a-f]+$ ]] && (( 16#$ign & 2 )) || return 0
  RA_FAKE_CLUSTER_SIGINT=1 exec perl -e '$SIG{INT} = "DEFAULT";
    exec { $ARGV[0] } @ARGV or die "fake-cluster.sh: $ARGV[0]: $!\n"' "$0" "$@"
}

# Builds K nodes at RATE (BITS bit/s) of SLOTS slots each, with Slurm when
# SLURM is 1, under the lock. The options and the state folder were
# checked.
cluster_up() {
  local k=$1 rate=$2 bits=$3 slots=$4 slurm=$5 burst i with=""
  burst=$(burst_for "$bits")
  cluster_down
  state_make
  [ -z "$holder" ] || echo "$holder" >"$state/holder"
  ip link add "$bridge" type bridge
  ip addr add "$bridge_addr/24" dev "$bridge"
  ip link set "$bridge" up
  : >"$state/hostfile"
  for i in $(seq 1 "$k"); do
    add_node "$i" "${bits}bit" "$burst"
    echo "198.18.0.$i slots=$slots" >>"$state/hostfile"
  done
  write_agent
  echo "$k" >"$state/nodes"
  echo "$rate" >"$state/rate"
  if [ "$slurm" = 1 ]; then
    slurm_up "$k" "$slots"
    with=", Slurm partition fake"
  fi
  echo "$prog: $k nodes up (198.18.0.1-$k, $rate per link, $slots slots each$with)"
}

# slurm.conf for K nodes of S CPUs, everything under $plain/slurm (Slurm
# takes paths without blanks).
write_slurm_conf() {
  local k=$1 slots=$2 d=$plain/slurm
  cat >"$d/slurm.conf" <<EOF
# written by fake-cluster.sh up --slurm
ClusterName=ringattn-fake
SlurmctldHost=$(hostname)($bridge_addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge.socket
StateSaveLocation=$d/ctld
SlurmdSpoolDir=$d/spool-%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd-%n.log
TmpFS=$d/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmctldPort=6817
SlurmdPort=6818
NodeName=node[1-$k] NodeAddr=198.18.0.[1-$k] CPUs=$slots Sockets=1 CoresPerSocket=$slots ThreadsPerCore=1 State=UNKNOWN
PartitionName=fake Nodes=node[1-$k] Default=YES MaxTime=60 State=UP
TaskProlog=$d/task-prolog
EOF
  # every task's environment: a waiting rank yields its core when the
  # nodes' CPUs together outnumber this machine's, as mpirun-args has it (a
  # 2048-token ring on 2 nodes x 2 tasks took 0.14 s spinning, 0.027 s
  # yielding)
  {
    echo '#!/bin/sh'
    [ $((k * slots)) -le "$(nproc)" ] ||
      echo 'echo export OMPI_MCA_mpi_yield_when_idle=1'
  } >"$d/task-prolog"
  chmod 755 "$d/task-prolog"
  # the nodes run no systemd: slurmd uses the cgroup v1 hierarchies as the
  # host mounted them and neither mounts nor constrains anything
  printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=no\nConstrainRAMSpace=no\n' \
    >"$d/cgroup.conf"
}

# The command that makes node I a Slurm node (run through the agent).
# ip netns exec gave the node a fresh /sys, so the host's cgroup v1
# hierarchies are mounted there again; a TmpFS of its own keeps the nodes'
# PMIx directories apart.
write_slurmd_start() {
  local d=$plain/slurm
  cat >"$d/slurmd-start" <<EOF
#!/bin/sh
mount -t tmpfs none /sys/fs/cgroup || exit 1
for c in \$(awk -F: '\$2 != "" && \$2 !~ /=/ {print \$2}' /proc/self/cgroup | tr , ' '); do
  mkdir -p /sys/fs/cgroup/\$c && mount -t cgroup -o \$c none /sys/fs/cgroup/\$c || exit 1
done
mkdir -p /sys/fs/cgroup/systemd &&
  mount -t cgroup -o none,name=systemd none /sys/fs/cgroup/systemd || exit 1
mkdir -p $d/tmp-node\$1 $d/spool-node\$1 &&
  mount --bind $d/tmp-node\$1 $d/tmp || exit 1
exec slurmd -D -f $d/slurm.conf -N node\$1
EOF
  chmod 755 "$d/slurmd-start"
}

# Starts munge, the controller and one slurmd per node; returns when every
# node is idle (within 30 s).
slurm_up() {
  local k=$1 slots=$2 d=$plain/slurm i
  mkdir -p "$d/ctld" "$d/tmp"
  write_slurm_conf "$k" "$slots"
  write_slurmd_start
  mungekey -c -k "$d/munge.key" >/dev/null
  munged --force -S "$d/munge.socket" --key-file "$d/munge.key" \
    --pid-file "$d/munged.pid" --log-file "$d/munged.log" \
    --seed-file "$d/munged.seed"
  SLURM_CONF=$d/slurm.conf slurmctld -f "$d/slurm.conf"
  for i in $(seq 1 "$k"); do
    setsid "$plain/agent" "node$i" "$d/slurmd-start $i" \
      </dev/null >"$d/slurmd-node$i.out" 2>&1 &
  done
  for _ in $(seq 1 60); do
    [ "$(SLURM_CONF=$d/slurm.conf sinfo -h -t idle -o %D 2>/dev/null)" = "$k" ] &&
      return 0
    sleep 0.5
  done
  echo "$prog: the Slurm nodes did not come up (see $d/*.log)" >&2
  return 1
}

# A cluster is up in the state folder (the marker and the node count).
is_up() { [ -f "$state/$marker" ] && [ -f "$state/nodes" ]; }

require_up() { is_up || die 2 "no cluster is up in $state (run: $prog up K)"; }

cluster_status() {
  local h
  h=$(lock_holders | head -n 1)
  if [ -n "$h" ]; then
    echo "lock $lock held by PID $h ($(holder_text "$h"))"
  else
    echo "lock $lock free"
  fi
  if ! is_up; then
    echo "no cluster"
    return 0
  fi
  echo "nodes $(cat "$state/nodes"), rate $(cat "$state/rate"), hostfile $plain/hostfile"
  local ns
  for ns in $(our_namespaces); do
    printf '%s %s %s\n' "$ns" \
      "$(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}')" \
      "$(ip netns exec "$ns" tc qdisc show dev eth0 |
         awk '{for (i = 1; i < NF; i++) if ($i == "rate") print $2, $(i + 1)}')"
  done
}

# The flags mpirun needs, on one line of words without blanks.
# --bind-to none: every node sees all of this machine's cores, so a node's
# own binding (core 0 for its first rank) would stack the ranks of all
# nodes on the same physical cores.
# mpi_yield_when_idle: the nodes' slots together outnumber this machine's
# cores, which Open MPI cannot see (each node reports only its own slots).
# It yields a waiting rank's core by default only when it knows a node is
# oversubscribed; spinning instead keeps the rank being waited for off the
# core, and every message then waits for a time slice (a 512-token ring on
# 4 nodes x 1 rank over 2 cores took 0.05-0.3 s instead of 6 ms).
print_mpirun_args() {
  local slots yield=""
  slots=$(awk '{sub("slots=", "", $2); n += $2} END {print n + 0}' \
          "$state/hostfile")
  [ "$slots" -le "$(nproc)" ] || yield="--mca mpi_yield_when_idle 1"
  echo "--hostfile $plain/hostfile --mca plm_rsh_agent $plain/agent --bind-to none" \
       "--mca oob_tcp_if_include $subnet --mca btl_tcp_if_include $subnet" \
       "$yield"
}

# `up K [--rate R] [--slots S] [--slurm] [--dry-run]`: every option,
# root, the tools and the state folder are checked before anything
# changes.
cmd_up() {
  local k rate=1gbit bits slots slurm=0 dry=0
  slots=$(nproc)
  [ $# -ge 1 ] || die 2 "up needs the number of nodes K"
  k=$1
  shift
  [[ "$k" =~ ^[1-9][0-9]{0,5}$ ]] && [ "$k" -le "$max_nodes" ] ||
    die 2 "K '$k' is not a number of nodes in 1..$max_nodes"
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate) [ $# -ge 2 ] || die 2 "--rate needs a value"; rate=$2; shift 2 ;;
      --slots) [ $# -ge 2 ] || die 2 "--slots needs a value"; slots=$2; shift 2 ;;
      --slurm) slurm=1; shift ;;
      --dry-run) dry=1; shift ;;
      *) die 2 "up: unknown option '$1'" ;;
    esac
  done
  bits=$(rate_bits "$rate") ||
    die 2 "--rate '$rate' is not a rate from 1kbit to 1000gbit (a number, decimals allowed down to 1 bit/s, then kbit, mbit or gbit)"
  [[ "$slots" =~ ^[1-9][0-9]{0,5}$ ]] && [ "$slots" -le "$max_slots" ] ||
    die 2 "--slots '$slots' is not a number of slots in 1..$max_slots"
  need_root_and_tools
  [ "$slurm" = 0 ] || need_slurm_tools
  state_check
  if [ "$dry" = 1 ]; then
    echo "$prog: would build $k nodes ($rate = $bits bit/s per link, $slots slots each) in $state"
    return 0
  fi
  abort_traps
  lock_get "fake-cluster.sh up $k, until fake-cluster.sh down"
  cluster_up "$k" "$rate" "$bits" "$slots" "$slurm"
  trap - EXIT
}

# `down`: under the lock, removes the cluster and ends its holder.
cmd_down() {
  need_root_and_tools
  state_check
  abort_traps
  lock_get "fake-cluster.sh down"
  cluster_down
  lock_release
  trap - EXIT
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up)
    sigint_default up "$@"
    cmd_up "$@"
    ;;
  down)
    cmd_down
    ;;
  hostfile)
    require_up
    echo "$plain/hostfile"
    ;;
  mpirun-args)
    require_up
    print_mpirun_args
    ;;
  slurm-conf)
    require_up
    [ -f "$state/slurm/slurm.conf" ] || die 2 "the cluster was built without --slurm"
    echo "$plain/slurm/slurm.conf"
    ;;
  status)
    cluster_status
    ;;
  -h | --help | help)
    awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"
    ;;
  *)
    die 2 "unknown command '${cmd}' (up K [--rate R] [--slots S] [--slurm] [--dry-run] | hostfile | mpirun-args | slurm-conf | status | down)"
    ;;
esac
