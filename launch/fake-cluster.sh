#!/usr/bin/env bash
# fake-cluster.sh: K fake nodes on one machine, for multi-node runs without a
# cluster (tests, benchmarks, trying things on a laptop). Needs root.
#
#   launch/fake-cluster.sh up K [--rate R] [--slots S]   build K nodes
#   launch/fake-cluster.sh hostfile       print the path of the hostfile
#   launch/fake-cluster.sh mpirun-args    print the flags mpirun needs
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

cluster_down() {
  local ns pid
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
  local k=$1 rate=$2 slots=$3 burst i
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
  trap - EXIT INT TERM HUP
  echo "$prog: $k nodes up (198.18.0.1-$k, $rate per link, $slots slots each)"
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
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) [ $# -ge 2 ] || die 2 "--rate needs a value"; rate=$2; shift 2 ;;
        --slots) [ $# -ge 2 ] || die 2 "--slots needs a value"; slots=$2; shift 2 ;;
        *) die 2 "up: unknown option '$1'" ;;
      esac
    done
    [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die 2 "--slots '$slots' is not a positive number"
    cluster_up "$k" "$rate" "$slots"
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
    echo "--hostfile $state/hostfile --mca plm_rsh_agent $state/agent" \
         "--mca oob_tcp_if_include $subnet --mca btl_tcp_if_include $subnet"
    ;;
  status)
    cluster_status
    ;;
  -h | --help | help)
    sed -n '2,27p' "$0"
    ;;
  *)
    die 2 "unknown command '${cmd}' (up K [--rate R] [--slots S] | hostfile | mpirun-args | status | down)"
    ;;
esac
