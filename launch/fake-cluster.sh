#!/usr/bin/env bash
# fake-cluster.sh: K fake nodes on one machine, for multi-node runs without a
# cluster (tests, benchmarks, trying things on a laptop). Needs root.
#
#   launch/fake-cluster.sh up K [--rate R] [--slots S] [--slurm]   build K nodes
#   launch/fake-cluster.sh hostfile       print the path of the hostfile
#   launch/fake-cluster.sh mpirun-args    print the flags mpirun needs
#   launch/fake-cluster.sh slurm-conf     print the SLURM_CONF of --slurm
#   launch/fake-cluster.sh status         show the nodes and their links
#   launch/fake-cluster.sh down           remove everything
#
# Node i (1 <= i <= K) is the network namespace ra-node<i>: one veth link on
# the bridge ra-br0, address 198.18.0.<i>/24 (the bridge is 198.18.0.254), a
# tc tbf rate limit R in each direction of its link (default 1gbit; R as tc
# writes it: 400mbit, 1gbit, 10gbit). Open MPI starts its daemons there
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
# `up` first removes any earlier cluster, and removes what it built when a
# step fails. The state lives in RA_FAKE_CLUSTER_DIR (default
# /run/ringattn-fake-cluster). Exit codes: 0 ok, 1 a step failed, 2 usage,
# not root, or a missing tool.
set -euo pipefail

prog=fake-cluster.sh
state=${RA_FAKE_CLUSTER_DIR:-/run/ringattn-fake-cluster}
bridge=ra-br0
subnet=198.18.0.0/24
bridge_addr=198.18.0.254
max_nodes=64

die() { echo "$prog: $2" >&2; exit "$1"; }

need_root_and_tools() {
  [ "$(id -u)" = 0 ] || die 2 "needs root (network namespaces, bridges, tc)"
  local t
  for t in ip tc unshare mount hostname; do
    command -v "$t" >/dev/null 2>&1 ||
      die 2 "'$t' is missing (install iproute2 and util-linux)"
  done
}

# The namespaces this script made (ra-node<i>), whatever K was.
our_namespaces() { ip netns list 2>/dev/null | awk '$1 ~ /^ra-node[0-9]+$/ {print $1}'; }

# Bytes of tbf burst for a rate: at least 256 KiB, and at least 10 ms of
# traffic, so that fast links are not limited by timer granularity.
burst_for() {
  local r=$1 num unit bits
  num=${r%%[a-zA-Z]*}
  unit=${r#"$num"}
  case "$unit" in
    kbit) bits=$((num * 1000)) ;;
    mbit) bits=$((num * 1000000)) ;;
    gbit) bits=$((num * 1000000000)) ;;
    *) return 1 ;;
  esac
  local b=$((bits / 8 / 100))
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
  local f pids="" pid n alive
  for f in "$state"/slurm/*.pid; do
    [ -f "$f" ] && pid=$(cat "$f" 2>/dev/null) && [ -n "$pid" ] && pids="$pids $pid"
  done
  [ -n "$pids" ] || return 0
  kill -TERM $pids 2>/dev/null || true
  for n in $(seq 1 20); do
    alive=0
    for pid in $pids; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ "$alive" = 0 ] && return 0
    sleep 0.1
  done
  kill -KILL $pids 2>/dev/null || true
  return 0
}

cluster_down() {
  local ns pid
  slurm_down
  for ns in $(our_namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null || true
    done
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$state"
}

write_agent() {
  cat >"$state/agent" <<EOF
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
mkdir -p "$state/node\$i/session"
exec ip netns exec "\$ns" unshare --uts --mount --propagation private /bin/sh -c '
  hostname "node\$1" && mount -t tmpfs -o size=4g tmpfs /dev/shm || exit 1
  export OMPI_MCA_orte_tmpdir_base="\$2"
  shift 2
  exec /bin/sh -c "\$*"' agent "\$i" "$state/node\$i/session" "\$@"
EOF
  chmod 755 "$state/agent"
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

cluster_up() {
  local k=$1 rate=$2 slots=$3 slurm=$4 burst i
  burst=$(burst_for "$rate") || die 2 "--rate '$rate' is not a number with kbit, mbit or gbit"
  cluster_down
  # any failing step (set -e) or signal ends the script: remove what was built
  trap 'echo "$prog: up failed; removing the partial cluster" >&2
        cluster_down; trap - EXIT; exit 1' EXIT
  trap 'exit 1' INT TERM HUP
  mkdir -p "$state"
  ip link add "$bridge" type bridge
  ip addr add "$bridge_addr/24" dev "$bridge"
  ip link set "$bridge" up
  : >"$state/hostfile"
  for i in $(seq 1 "$k"); do
    add_node "$i" "$rate" "$burst"
    echo "198.18.0.$i slots=$slots" >>"$state/hostfile"
  done
  write_agent
  echo "$k" >"$state/nodes"
  echo "$rate" >"$state/rate"
  local with=""
  if [ "$slurm" = 1 ]; then
    slurm_up "$k" "$slots"
    with=", Slurm partition fake"
  fi
  trap - EXIT INT TERM HUP
  echo "$prog: $k nodes up (198.18.0.1-$k, $rate per link, $slots slots each$with)"
}

# slurm.conf for K nodes of S CPUs, everything under $state/slurm.
write_slurm_conf() {
  local k=$1 slots=$2 d=$state/slurm
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
  local d=$state/slurm
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
  local k=$1 slots=$2 d=$state/slurm i n
  mkdir -p "$d/ctld" "$d/tmp"
  write_slurm_conf "$k" "$slots"
  write_slurmd_start
  mungekey -c -k "$d/munge.key" >/dev/null
  munged --force -S "$d/munge.socket" --key-file "$d/munge.key" \
    --pid-file "$d/munged.pid" --log-file "$d/munged.log" \
    --seed-file "$d/munged.seed"
  SLURM_CONF=$d/slurm.conf slurmctld -f "$d/slurm.conf"
  for i in $(seq 1 "$k"); do
    setsid "$state/agent" "node$i" "$d/slurmd-start $i" \
      </dev/null >"$d/slurmd-node$i.out" 2>&1 &
  done
  for n in $(seq 1 60); do
    [ "$(SLURM_CONF=$d/slurm.conf sinfo -h -t idle -o %D 2>/dev/null)" = "$k" ] &&
      return 0
    sleep 0.5
  done
  echo "$prog: the Slurm nodes did not come up (see $d/*.log)" >&2
  return 1
}

require_up() { [ -f "$state/nodes" ] || die 2 "no cluster is up (run: $prog up K)"; }

cluster_status() {
  if [ ! -f "$state/nodes" ]; then
    echo "no cluster"
    return 0
  fi
  echo "nodes $(cat "$state/nodes"), rate $(cat "$state/rate"), hostfile $state/hostfile"
  local ns
  for ns in $(our_namespaces); do
    printf '%s %s %s\n' "$ns" \
      "$(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}')" \
      "$(ip netns exec "$ns" tc qdisc show dev eth0 |
         awk '{for (i = 1; i < NF; i++) if ($i == "rate") print $2, $(i + 1)}')"
  done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up)
    need_root_and_tools
    [ $# -ge 1 ] || die 2 "up needs the number of nodes K"
    k=$1
    shift
    [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le "$max_nodes" ] ||
      die 2 "K '$k' is not a number of nodes in 1..$max_nodes"
    rate=1gbit
    slots=$(nproc)
    slurm=0
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) [ $# -ge 2 ] || die 2 "--rate needs a value"; rate=$2; shift 2 ;;
        --slots) [ $# -ge 2 ] || die 2 "--slots needs a value"; slots=$2; shift 2 ;;
        --slurm) need_slurm_tools; slurm=1; shift ;;
        *) die 2 "up: unknown option '$1'" ;;
      esac
    done
    [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die 2 "--slots '$slots' is not a positive number"
    cluster_up "$k" "$rate" "$slots" "$slurm"
    ;;
  down)
    need_root_and_tools
    cluster_down
    ;;
  hostfile)
    require_up
    echo "$state/hostfile"
    ;;
  mpirun-args)
    require_up
    # --bind-to none: every node sees all of this machine's cores, so a
    # node's own binding (core 0 for its first rank) would stack the ranks
    # of all nodes on the same physical cores
    # mpi_yield_when_idle: the nodes' slots together outnumber this
    # machine's cores, which Open MPI cannot see (each node reports only
    # its own slots). It yields a waiting rank's core by default only when
    # it knows a node is oversubscribed; spinning instead keeps the rank
    # being waited for off the core, and every message then waits for a
    # time slice (a 512-token ring on 4 nodes x 1 rank over 2 cores took
    # 0.05-0.3 s instead of 6 ms)
    yield=""
    slots=$(awk '{sub("slots=", "", $2); n += $2} END {print n + 0}' \
            "$state/hostfile")
    [ "$slots" -le "$(nproc)" ] || yield="--mca mpi_yield_when_idle 1"
    echo "--hostfile $state/hostfile --mca plm_rsh_agent $state/agent --bind-to none" \
         "--mca oob_tcp_if_include $subnet --mca btl_tcp_if_include $subnet" \
         "$yield"
    ;;
  slurm-conf)
    require_up
    [ -f "$state/slurm/slurm.conf" ] || die 2 "the cluster was built without --slurm"
    echo "$state/slurm/slurm.conf"
    ;;
  status)
    cluster_status
    ;;
  -h | --help | help)
    awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"
    ;;
  *)
    die 2 "unknown command '${cmd}' (up K [--rate R] [--slots S] [--slurm] | hostfile | mpirun-args | slurm-conf | status | down)"
    ;;
esac
