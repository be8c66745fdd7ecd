#!/usr/bin/env bash
# loom on several machines with mpirun and a hostfile.
#
#   scripts/launch/mpirun_hosts.sh HOSTFILE RANKS_PER_NODE THREADS_PER_RANK [loom train options...]
#
# Runs RANKS_PER_NODE ranks on every host of HOSTFILE (see hostfile.example),
# each bound to THREADS_PER_RANK cores of its own with that many OpenMP
# threads, ranks filling one machine before the next (so tp groups stay
# inside a machine). loom, its data and configs must be at the same path on
# every host (a shared file system, or the same checkout everywhere), and the
# hosts must reach each other by ssh without a password. Extra mpirun options
# go in MPIRUN_ARGS (e.g. MPIRUN_ARGS="--mca btl_tcp_if_include eth0").
set -euo pipefail
if [[ $# -lt 3 ]]; then
  sed -n '2,13p' "$0"
  exit 2
fi
hostfile=$1 per_node=$2 threads=$3
shift 3
[[ -r $hostfile ]] || { echo "mpirun_hosts.sh: hostfile '$hostfile' not readable" >&2; exit 2; }
[[ $per_node =~ ^[1-9][0-9]*$ ]] || { echo "mpirun_hosts.sh: RANKS_PER_NODE must be a positive integer" >&2; exit 2; }
[[ $threads =~ ^[1-9][0-9]*$ ]] || { echo "mpirun_hosts.sh: THREADS_PER_RANK must be a positive integer" >&2; exit 2; }
hosts=$(grep -v '^\s*#' "$hostfile" | awk 'NF {print $1}' | sort -u | wc -l)
root=$(cd "$(dirname "$0")/../.." && pwd)
ranks=$((hosts * per_node))
echo "mpirun_hosts.sh: $hosts hosts x $per_node ranks x $threads threads = $ranks ranks" >&2
# ppr: ranks per node; PE: cores bound to each rank; runtime.threads: loom's
# threads per rank (it would otherwise split each machine's cores itself).
# shellcheck disable=SC2086
exec mpirun --hostfile "$hostfile" -np "$ranks" --map-by "ppr:${per_node}:node:PE=${threads}" --bind-to core \
  -x "OMP_NUM_THREADS=${threads}" ${MPIRUN_ARGS:-} \
  "$root/build/loom" train --set "runtime.threads=${threads}" "$@"
