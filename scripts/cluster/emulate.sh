#!/usr/bin/env bash
# An emulated cluster on this machine: N "nodes" as Linux network namespaces
# joined by veth pairs through a bridge, each link shaped with tc, and
# mpirun starting ranks inside them. Traffic stays on this machine; it needs
# root. Everything it makes is named loomc-* and removed by `down`.
#
#   scripts/cluster/emulate.sh up NODES [RATE [DELAY]]   e.g. up 2 1gbit 1ms
#   scripts/cluster/emulate.sh run RANKS_PER_NODE [mpirun args] -- COMMAND...
#   scripts/cluster/emulate.sh mpirun-args RANKS_PER_NODE  the options `run` gives mpirun (for
#                                                         loom elastic ... -- $(emulate.sh mpirun-args 1))
#   scripts/cluster/emulate.sh cut NODE                   take node NODE's link down
#   scripts/cluster/emulate.sh down
#   scripts/cluster/emulate.sh check                      exit 0 if this machine can emulate
#
# RATE shapes each node's link in both directions (tc tbf); DELAY adds
# latency with tc netem where the kernel has it (otherwise `up` says so and
# shapes the rate only). Ranks of one node talk through shared memory,
# nodes through TCP over the bridge; each node has its own host name (n0,
# n1, ...) so MPI and loom see separate machines.
set -euo pipefail
prefix=loomc
bridge=${prefix}-br
subnet=10.77.0
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "emulate.sh: $*" >&2; exit 2; }
nodes_up() { ip netns list 2>/dev/null | awk '{print $1}' | grep -c "^${prefix}-n" || true; }

check() {
  [[ $(id -u) == 0 ]] || { echo "emulate.sh: needs root (network namespaces)" >&2; return 1; }
  for tool in ip tc unshare mpirun; do
    command -v $tool > /dev/null || { echo "emulate.sh: $tool not found" >&2; return 1; }
  done
  ip netns add ${prefix}-probe 2> /dev/null || { echo "emulate.sh: cannot create network namespaces here" >&2; return 1; }
  local ok=0
  ip netns exec ${prefix}-probe unshare --uts /bin/true 2> /dev/null || ok=1
  ip netns del ${prefix}-probe
  [[ $ok == 0 ]] || { echo "emulate.sh: cannot enter a namespace with its own host name here" >&2; return 1; }
}

shape() {  # shape DEV RATE DELAY [netns]
  local dev=$1 rate=$2 delay=$3 ns=${4:-}
  local run=()
  [[ -n $ns ]] && run=(ip netns exec "$ns")
  if [[ -n $delay ]] && "${run[@]}" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" 2> /dev/null; then
    "${run[@]}" tc qdisc add dev "$dev" parent 1: handle 2: tbf rate "$rate" burst 64kb latency 20ms
  else
    "${run[@]}" tc qdisc add dev "$dev" root tbf rate "$rate" burst 64kb latency 20ms
    [[ -z $delay || -n ${warned:-} ]] || echo "emulate.sh: no tc netem in this kernel: $rate links without the $delay delay" >&2
    warned=1
  fi
}

up() {
  local n=${1:?up NODES [RATE [DELAY]]} rate=${2:-1gbit} delay=${3:-}
  [[ $n =~ ^[1-9][0-9]?$ ]] || die "NODES must be 1..99"
  check || exit 2
  [[ $(nodes_up) == 0 ]] || die "a cluster is up already (emulate.sh down)"
  ip link add $bridge type bridge
  ip addr add $subnet.254/24 dev $bridge
  ip link set $bridge up
  for ((i = 0; i < n; i++)); do
    local ns=${prefix}-n$i veth=${prefix}-v$i
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master $bridge up
    ip netns exec "$ns" ip addr add $subnet.$((i + 1))/24 dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
    shape "$veth" "$rate" "$delay"        # towards the node
    shape eth0 "$rate" "$delay" "$ns"     # from the node
  done
  : > $hostfile
  for ((i = 0; i < n; i++)); do echo "n$i slots=64" >> $hostfile; done
  echo "emulate.sh: $n nodes (n0..n$((n - 1)), $subnet.1-$n) on bridge $bridge, links $rate${delay:+, $delay}"
}

down() {
  # Each veth pair first (removing one end removes both, at once), then the
  # namespaces and the bridge; wait until the kernel has let them go.
  local dev
  for dev in $(ip -o link show 2> /dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${prefix}-v" || true); do
    ip link del "$dev" 2> /dev/null || true
  done
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep "^${prefix}-" || true); do
    ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null || true  # a cut node's stranded ranks
    ip netns del "$ns"
  done
  if ip link show $bridge > /dev/null 2>&1; then ip link del $bridge; fi
  rm -f $hostfile
  for _ in $(seq 50); do
    ip -o link show 2> /dev/null | grep -q ": ${prefix}-" || return 0
    sleep 0.1
  done
  echo "emulate.sh: some ${prefix}-* links are still there" >&2
  return 0
}

cut_link() {
  local i=${1:?cut NODE}
  ip link set ${prefix}-v"$i" down
  echo "emulate.sh: node n$i's link is down"
}

hostfile=/tmp/${prefix}-hostfile  # written by `up`: n0 .. n(N-1)

# The rsh launcher reaches a "node" through agent.sh (ip netns exec with the
# node's own host name) instead of ssh; the daemons and ranks talk TCP over
# the bridge only, shared memory inside a node.
mpirun_args() {
  local per_node=${1:?mpirun-args RANKS_PER_NODE}
  [[ -r $hostfile && $(nodes_up) -gt 0 ]] || die "no cluster is up (emulate.sh up NODES)"
  echo --hostfile $hostfile --map-by ppr:"$per_node":node --bind-to none \
    --mca plm_rsh_agent "$here/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include $subnet.0/24 --mca btl_tcp_if_include $subnet.0/24 --mca btl self,vader,tcp
}

run() {
  local per_node=${1:?run RANKS_PER_NODE [mpirun args] -- COMMAND}
  shift
  local opts
  opts=$(mpirun_args "$per_node")
  local mpi_args=()
  while [[ $# -gt 0 && $1 != -- ]]; do mpi_args+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  [[ $# -gt 0 ]] || die "run: no command after --"
  # shellcheck disable=SC2086
  exec mpirun -np $(($(nodes_up) * per_node)) $opts "${mpi_args[@]}" "$@"
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  cut) shift; cut_link "$@" ;;
  run) shift; run "$@" ;;
  mpirun-args) shift; mpirun_args "$@" ;;
  check) check ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
