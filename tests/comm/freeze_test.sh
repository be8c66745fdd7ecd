#!/usr/bin/env bash
# A rank frozen from outside (kill -STOP of its process) at fixed moments,
# inside and outside collectives, dp and pp layouts (issue 44): every trial
# names the frozen rank by its stopped heartbeat (hang.json: culprits = that
# rank alone, evidence "heartbeat"), within comm_timeout_s + 10 s of the stop,
# and `loom elastic` restarts on the 3 survivors and finishes.
# usage: freeze_test.sh LOOM SOURCE_DIR
set -u
loom="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d); trap 'pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
timeout_s=5

# trial RANK DELAY_S [--set ...]: stop world rank RANK DELAY_S seconds after the job's flight records appear.
trial() {
  local rank=$1 delay=$2; shift 2
  local run="$work/runs/freeze" log="$work/elastic.log"
  rm -rf "$work/runs" "$work/ck"
  timeout 240 "$loom" elastic --np 4 --config "$src/configs/tiny.toml" --set "data.path=$src/data/sample/kjv.txt" \
    --set runtime.threads=1 --set train.eval_every=0 --set train.sample_tokens=0 --set "train.run_dir=$work/runs" \
    --set train.run_name=freeze --set "train.checkpoint_dir=$work/ck" --set train.steps=4000 \
    --set train.batch_size=12 --set train.checkpoint_every=400 --set train.log_every=1000 \
    --set runtime.comm_timeout_s=$timeout_s "$@" -- --oversubscribe > "$log" 2>&1 &
  local sup=$!
  local record
  record=$(printf '%s/flight/rank_%05d.flight' "$run" "$rank")
  for _ in $(seq 1 300); do [[ -s "$record" ]] && break; sleep 0.1; done
  [[ -s "$record" ]] || { kill $sup; fail "rank $rank: no flight record: $(tail -5 "$log")"; }
  sleep "$delay"
  local pid
  pid=$(od -A n -t d4 -j 12 -N 4 "$record" | tr -d ' ')  # FlightRecord: magic (8 B), world_rank, pid
  kill -STOP "$pid" 2>/dev/null || { wait $sup; fail "rank $rank (pid $pid) was gone before the stop (the run too short?)"; }
  local stopped=$EPOCHREALTIME
  wait $sup; local rc=$?
  [[ $rc -eq 0 ]] || fail "rank $rank after $delay s $*: loom elastic exit $rc: $(grep 'loom elastic' "$log")"
  local failed
  failed=$(grep -m1 "attempt 1 failed" "$log")
  [[ "$failed" == *"rank $rank: its heartbeat stopped"* ]] || fail "rank $rank not named by its heartbeat: $failed"
  grep -q "finished on 3 ranks" "$log" || fail "rank $rank: not finished on the 3 survivors: $(grep 'loom elastic' "$log")"
  python3 - "$run/elastic.jsonl" "$rank" "$stopped" "$timeout_s" <<'PY' || fail "rank $rank: $(cat "$run/elastic.jsonl")"
import json, sys
first = json.loads(open(sys.argv[1]).readline())
rank, stopped, limit = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]) + 10
assert first["failed_ranks"] == [rank], first["failed_ranks"]
assert first["outcome"] == "restarted", first["outcome"]
assert first["detect_s"] <= limit, f"detected {first['detect_s']:.1f} s after the last step (limit {limit} s)"
PY
  local took; took=$(grep -m1 -o "detected in [0-9.]* s" "$log")
  echo "ok: rank $rank frozen after $delay s ${*:-(dp 4)}: named by its heartbeat ($took), finished on 3 ranks"
}

trial 2 1.5                                # dp: mostly inside the gradient all-reduce
trial 1 2.5
trial 0 1.0                                # the logging rank
trial 3 2.0 --set parallel.pp=2            # pp: a stage's peer waits in a transfer, not the frozen rank
echo "4 passed, 0 failed"
