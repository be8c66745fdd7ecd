#!/usr/bin/env bash
# A rank killed half-way through writing its checkpoint file (--fault
# kill-in-save) leaves the last checkpoint as it was: `latest` still names
# step_000002, which resumes without a warning, and --resume auto finishes
# with the same losses, bit for bit (metrics.jsonl), as a run never
# interrupted. One process (background and synchronous saves) and two ranks
# under mpirun (rank 0, the committing rank, and rank 1 under ZeRO).
# usage: kill_in_save_test.sh LOOM MPIRUN SOURCE_DIR
set -u
loom="$1"; mpirun="$2"; src="$3"
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

train() {  # np name args...: 6 steps, a checkpoint every 2
  local np="$1" name="$2"; shift 2
  local launch=("$loom")
  [[ $np -gt 1 ]] && launch=("$mpirun" --oversubscribe -np "$np" "$loom")
  timeout 120 "${launch[@]}" train --config "$src/configs/tiny.toml" --set "data.path=$src/data/sample/kjv.txt" \
    --set train.steps=6 --set train.checkpoint_every=2 --set train.eval_every=0 --set train.sample_tokens=0 \
    --set runtime.threads=1 --set "train.run_dir=$work/runs" --set "train.run_name=$name" "$@" 2>&1
}
# The losses of steps 3..6, exactly as metrics.jsonl holds them (a resume
# mark drops the lines a killed run wrote past its checkpoint).
losses() {
  python3 -c 'import json, sys
loss = {}
for r in map(json.loads, open(sys.argv[1])):
    if "resumed_at_step" in r: loss = {s: v for s, v in loss.items() if s <= r["resumed_at_step"]}
    else: loss[r["step"]] = r["loss"]
print(" ".join(str(v) for s, v in sorted(loss.items()) if s > 2))' "$work/runs/$1/metrics.jsonl"
}

drill() {  # label np rank args...
  local label="$1" np="$2" rank="$3"; shift 3
  local ck="$work/$label-ck" out rc
  out=$(train "$np" "$label-straight" --set "train.checkpoint_dir=$work/$label-straight-ck" "$@") ||
    fail "$label: uninterrupted run: $out"
  out=$(train "$np" "$label-killed" --set "train.checkpoint_dir=$ck" --fault "kill-in-save:rank=$rank:step=4" "$@")
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "$label: the killed run exited $rc: $out"
  echo "$out" | grep -q "rank $rank killed (SIGKILL) half-way through writing its checkpoint file for step 4" ||
    fail "$label: no kill message: $out"
  [[ "$(cat "$ck/latest")" == "step_000002" ]] || fail "$label: latest is '$(cat "$ck/latest")', not step_000002"
  [[ -d "$ck/step_000002" && ! -e "$ck/step_000004" ]] || fail "$label: $(ls -a "$ck")"
  out=$(train "$np" "$label-resumed" --set "train.checkpoint_dir=$ck" --resume auto "$@") ||
    fail "$label: resume: $out"
  echo "$out" | grep -q "^resume: $ck/step_000002 (step 2" || fail "$label: did not resume from step 2: $out"
  echo "$out" | grep -q "resume: skipped" && fail "$label: a damaged checkpoint was skipped: $out"
  [[ "$(cat "$ck/latest")" == "step_000006" && ! -e "$ck/.tmp_step_000004" ]] || fail "$label: $(ls -a "$ck")"
  local want got
  want=$(losses "$label-straight"); got=$(losses "$label-resumed")
  [[ -n "$want" && "$want" == "$got" ]] || fail "$label: losses after resuming '$got', uninterrupted '$want'"
  echo "ok: $label: killed in the save of step 4, latest = step_000002, resumed losses equal: $got"
}

drill np1-async 1 0
drill np1-sync 1 0 --set train.async_checkpoint=false
drill np2-async-rank0 2 0
drill np2-async-rank1-zero1 2 1 --set parallel.zero=1
echo "4 passed, 0 failed"
