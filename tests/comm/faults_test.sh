#!/usr/bin/env bash
# No silent hangs (issue 4): a rank that dies, and a collective that never
# completes, each end the whole job quickly with a message naming the rank.
# usage: faults_test.sh LOOM_MPI_TESTS MPIRUN
set -u
exe="$1"; mpirun="$2"
fail() { echo "FAIL: $*"; exit 1; }

start=$(date +%s)
out=$(timeout 90 "$mpirun" --oversubscribe -np 3 "$exe" --fault=kill 2>&1); rc=$?
took=$(( $(date +%s) - start ))
echo "$out" | tail -5
[[ $rc -ne 0 ]] || fail "killed rank: job exited 0"
[[ $rc -ne 124 ]] || fail "killed rank: job hung (killed by timeout after 90 s)"
echo "$out" | grep -qi "rank 1" || fail "killed rank: no message naming rank 1"
echo "killed rank: job ended with exit $rc in ${took}s, naming rank 1"

for drill in stuck stuck-async stuck-async-engine; do
  start=$(date +%s)
  out=$(timeout 90 "$mpirun" --oversubscribe -np 3 "$exe" --fault=$drill 2>&1); rc=$?
  took=$(( $(date +%s) - start ))
  echo "$out" | tail -3
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "$drill collective: exit $rc"
  for r in 0 2; do
    echo "$out" | grep -q "rank $r waiting for all_reduce(sum) of 1 fp32 elements on group world" ||
      fail "$drill collective: rank $r did not report what it waited on"
  done
  echo "$drill collective: job ended with exit $rc in ${took}s; ranks 0 and 2 reported"
done
echo "1 passed, 0 failed"
