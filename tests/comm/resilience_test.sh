#!/usr/bin/env bash
# Failures at run time (issue 19), short versions of the issue's targets:
#   hang        a rank stopped with SIGSTOP: the job ends within
#               comm_timeout + 10 s of the stop, naming that rank (its
#               heartbeat stopped) and the operation the others wait in;
#               hang.json lists it as the culprit, evidence "heartbeat"
#   straggler   a rank slowed by 150 ms a step is named within 20 steps
#   elastic     `loom bench elastic` (short): one of 4 ranks killed, the
#               supervisor finishes on the survivors from the checkpoint, the
#               losses equal an uninterrupted run's within 1e-4, steps lost
#               <= one checkpoint interval (synchronous saves)
#   no layout   survivors on which nothing runs: the supervisor stops with
#               the reason (exit 1), it does not loop
#   srun        loom elastic --launcher srun (tests/comm/standin_srun.sh runs
#               mpirun and speaks srun's "task R: Killed"): the killed rank
#               is read from srun's line and the job finishes on the survivor
#   interrupted SIGTERM to the supervisor ends the job, no restart
#   bad input   loom elastic's options: exit 2 naming the option
# usage: resilience_test.sh LOOM MPIRUN SOURCE_DIR
set -u
loom="$1"; mpirun="$2"; src="$3"
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
common=(--config "$src/configs/tiny.toml" --set "data.path=$src/data/sample/kjv.txt" --set runtime.threads=1
        --set train.eval_every=0 --set train.sample_tokens=0 --set "train.run_dir=$work/runs")
# Each output line with the time it arrived (bash's EPOCHREALTIME).
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }

# --- hang: rank 2 of 4 stops as step 4 begins; comm_timeout 5 s.
timeout=5
out=$(timeout 120 "$mpirun" --oversubscribe -np 4 "$loom" train "${common[@]}" --set train.steps=20 \
        --set runtime.comm_timeout_s=$timeout --set train.run_name=hang --fault stop:rank=2:step=4 2>&1 | stamp)
end=$EPOCHREALTIME
stopped=$(echo "$out" | grep "fault injection: rank 2 stopped" | head -1 | cut -d' ' -f1)
[[ -n "$stopped" ]] || fail "hang: the fault did not fire: $out"
echo "$out" | grep -q "rank 2: its heartbeat stopped" || fail "hang: rank 2 not named: $out"
# A step's first collective on the data group: the count of its valid targets (an all-gather).
echo "$out" | grep -q "flight recorder: all_gather" || fail "hang: the operation not named: $out"
took=$(python3 -c "print(round($end - $stopped, 1))")
python3 -c "import sys; sys.exit(0 if $end - $stopped <= $timeout + 10 else 1)" ||
  fail "hang: the job ended $took s after the stop (limit comm_timeout + 10 = $((timeout + 10)) s)"
python3 - "$work/runs/hang/flight/hang.json" <<'PY' || fail "hang: hang.json: $(cat "$work/runs/hang/flight/hang.json")"
import json, sys
h = json.load(open(sys.argv[1]))
sys.exit(0 if h["culprits"] == [2] and h["evidence"] == "heartbeat" and "rank 2: its heartbeat stopped" in h["explanation"] else 1)
PY
echo "ok: hang: rank 2 named, the job ended $took s after the stop: $(echo "$out" | grep -m1 'heartbeat stopped' | cut -d' ' -f2-)"

# --- straggler: rank 1 of 2 computes 150 ms longer from step 5 on.
out=$(timeout 120 "$mpirun" --oversubscribe -np 2 "$loom" train "${common[@]}" --set train.steps=30 \
        --set train.run_name=straggler --fault slow:rank=1:step=5:ms=150 2>&1)
named=$(echo "$out" | grep -m1 "straggler: rank 1 computes" | sed -E 's/^step +([0-9]+)\/.*/\1/')
[[ -n "$named" ]] || fail "straggler: rank 1 never named: $out"
(( named - 5 <= 20 )) || fail "straggler: named at step $named, more than 20 steps after the slow-down at 5"
echo "$out" | grep -q "straggler: rank 0" && fail "straggler: rank 0 named: $out"
"$loom" diagnose "$work/runs/straggler" | grep -q "rank 1" || fail "straggler: loom diagnose does not name rank 1"
echo "ok: straggler: rank 1 named at step $named (slowed from step 5), and by loom diagnose"

# --- elastic: kill rank 1 of 4 as step 11 of 16 begins (checkpoints every 4).
out=$(timeout 300 "$loom" bench elastic --steps 16 --kill-step 11 --every 4 2>&1) || fail "elastic: bench failed: $out"
json=$(echo "$out" | tail -1)
python3 - "$json" <<'PY' || fail "elastic: $out"
import json, sys
r = json.loads(sys.argv[1])
# The bench saves synchronously: at most one interval is lost.
ok = r["max_loss_diff"] <= 1e-4 and 0 <= r["steps_lost"] <= 4 and r["new_world"] in (2, 3)
sys.exit(0 if ok else 1)
PY
echo "ok: elastic: $json"

# --- no layout on the survivors: batch 8 does not split over 3 ranks, and
# --min-ranks 3 forbids going to 2: the supervisor stops with the reason.
out=$(timeout 120 "$loom" elastic --np 4 --min-ranks 3 "${common[@]}" --set train.steps=12 --set train.batch_size=8 \
        --set train.checkpoint_every=4 --set "train.checkpoint_dir=$work/ck-nolayout" --set train.run_name=nolayout \
        --fault kill:rank=3:step=6 2>&1); rc=$?
[[ $rc -eq 1 ]] || fail "no layout: exit $rc (want 1): $out"
echo "$out" | grep -q "not restarting: no layout runs on 3 to 3 ranks" || fail "no layout: no reason given: $out"
[[ $(echo "$out" | grep -c "loom elastic: attempt [0-9]* on") -eq 1 ]] || fail "no layout: relaunched: $out"
grep -q '"outcome":"stopped"' "$work/runs/nolayout/elastic.jsonl" || fail "no layout: elastic.jsonl"
echo "ok: no layout: $(echo "$out" | grep -m1 'not restarting' | cut -c1-160)"

# --- srun: the launcher's options, and its death line, through a stand-in.
mkdir -p "$work/bin" && ln -s "$src/tests/comm/standin_srun.sh" "$work/bin/srun"
out=$(PATH="$work/bin:$PATH" STANDIN_MPIRUN="$mpirun" STANDIN_CALLS="$work/srun.calls" timeout 180 "$loom" elastic \
        --launcher srun --np 2 "${common[@]}" --set train.steps=12 --set train.checkpoint_every=4 \
        --set "train.checkpoint_dir=$work/ck-srun" --set train.run_name=srun --fault kill:rank=1:step=6 2>&1) ||
  fail "srun: exit $?: $out"
echo "$out" | grep -q "exec srun --ntasks=2 --kill-on-bad-exit=1 --mpi=pmix" || fail "srun: not launched by srun: $out"
echo "$out" | grep -q "rank 1 on [^ ]*: Killed (srun).*restarting on" || fail "srun: the death not read from srun: $out"
echo "$out" | grep -q "loom elastic: finished" || fail "srun: not finished: $out"
[[ $(tr '\n' ' ' < "$work/srun.calls") == "2 1 " ]] || fail "srun: tasks per launch: $(cat "$work/srun.calls") (want 2, 1)"
echo "ok: srun: $(echo "$out" | grep -m1 'restarting on' | cut -c1-160)"

# --- interrupted: SIGTERM to the supervisor stops the job (every rank) and
# does not restart it.
log="$work/term.log"
"$loom" elastic --np 2 "${common[@]}" --set train.steps=100000 --set train.checkpoint_every=1000 \
  --set "train.checkpoint_dir=$work/ck-term" --set train.run_name=term > "$log" 2>&1 &
supervisor=$!
for _ in $(seq 300); do grep -q "^step " "$log" && break; sleep 0.2; done
grep -q "^step " "$log" || { kill -KILL $supervisor; fail "interrupted: no step within 60 s: $(tail -5 "$log")"; }
kill -TERM $supervisor; wait $supervisor; rc=$?
[[ $rc -eq 143 ]] || fail "interrupted: exit $rc (want 143): $(tail -5 "$log")"
grep -q "interrupted by signal 15; the job was stopped, not restarted" "$log" || fail "interrupted: $(tail -5 "$log")"
sleep 1
left=$(pgrep -f "$work/ck-term" | wc -l)
[[ $left -eq 0 ]] || fail "interrupted: $left processes of the job left running"
echo "ok: interrupted: SIGTERM stopped the job, no process left, no restart"

# --- bad input: exit 2, naming the option, nothing launched.
bad() {  # expected text, args...
  local text="$1"; shift
  out=$(timeout 60 "$loom" elastic "${common[@]}" "$@" 2>&1); local rc=$?
  [[ $rc -eq 2 ]] || fail "$*: exit $rc (want 2): $out"
  echo "$out" | grep -q -- "$text" || fail "$*: message '$text' missing: $out"
  echo "$out" | grep -q "attempt 1" && fail "$*: launched: $out"
  echo "ok: bad input: $(echo "$out" | grep -m1 error)"
}
bad "--max-restarts must be" --np 2 --max-restarts -1 --set train.checkpoint_every=2
bad "--min-ranks 3 must be in \[1, --np 2\]" --np 2 --min-ranks 3 --set train.checkpoint_every=2
bad "train.checkpoint_dir and train.checkpoint_every > 0" --np 2
bad "--np N" --set train.checkpoint_every=2
echo "all passed"
