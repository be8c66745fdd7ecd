#!/usr/bin/env bash
# OpenMPI's rsh agent for the emulated cluster (emulate.sh): runs the
# daemon's command inside node HOST's network namespace, under HOST's own
# host name, instead of over ssh.  Usage (by mpirun): agent.sh HOST COMMAND...
set -euo pipefail
host=$1
shift
exec ip netns exec "loomc-$host" unshare --uts /bin/sh -c "hostname $host && exec $*"
