#!/usr/bin/env bash
# A stand-in for Slurm's srun, for testing `loom elastic --launcher srun`
# where there is no Slurm: it accepts only the options loom elastic gives
# srun, runs the job with mpirun ($STANDIN_MPIRUN), and rewrites mpirun's
# "process rank R ... exited on signal 9" line as srun's "task R: Killed".
# Each launch appends its task count to $STANDIN_CALLS.
set -u
n=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --ntasks=*) n=${1#--ntasks=} ;;
    --kill-on-bad-exit=1 | --mpi=pmix) ;;
    -*) echo "stand-in srun: unexpected option $1" >&2; exit 9 ;;
    *) break ;;
  esac
  shift
done
echo "$n" >> "$STANDIN_CALLS"
"$STANDIN_MPIRUN" --oversubscribe -np "$n" "$@" 2>&1 |
  sed -u -E 's/.*process rank ([0-9]+) with PID [0-9]+ on node ([^ ]+) exited on signal 9.*/srun: error: \2: task \1: Killed\nsrun: launch\/slurm: _step_signal: Terminating StepId=1.0\nsrun: error: \2: task 0: Killed/'
exit "${PIPESTATUS[0]}"
