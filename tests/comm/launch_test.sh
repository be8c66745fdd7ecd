#!/usr/bin/env bash
# Launching `loom train` under mpirun (issue 4): the layout is printed once by
# rank 0; a layout that cannot work stops every rank with exit code 2 and one
# clear message, before any model is built.
# usage: launch_test.sh LOOM MPIRUN SOURCE_DIR
set -u
loom="$1"; mpirun="$2"; src="$3"
fail() { echo "FAIL: $*"; exit 1; }
run() { timeout 120 "$mpirun" --oversubscribe -np "$1" "$loom" train --config "$src/configs/tiny.toml" \
          --set train.steps=2 --set runtime.threads=1 "${@:2}" 2>&1; }

out=$(run 2); rc=$?
[[ $rc -eq 0 ]] || fail "np 2: exit $rc: $out"
[[ $(echo "$out" | grep -c "^layout: dp=2 tp=1 pp=1") -eq 1 ]] || fail "np 2: layout not printed once: $out"

expect_bad() {  # np, expected text, --set args...
  local np="$1" text="$2"; shift 2
  out=$(run "$np" "$@"); rc=$?
  [[ $rc -eq 2 ]] || fail "$*: exit $rc (want 2): $out"
  local count; count=$(echo "$out" | grep -c -- "$text")
  if [[ "${once:-1}" == 1 ]]; then [[ $count -eq 1 ]] || fail "$*: message '$text' not printed exactly once: $out"
  else [[ $count -ge 1 ]] || fail "$*: message '$text' not printed: $out"; fi
  echo "$out" | grep -qE "^step +[0-9]" && fail "$*: training started"
  echo "ok: np $np $* -> exit 2: $(echo "$out" | grep -- "$text")"
}
expect_bad 3 "world size 3 is not a multiple of parallel.tp (2)" --set parallel.tp=2
expect_bad 4 "world size 4 is not parallel.dp (3)" --set parallel.dp=3
expect_bad 2 "parallel.order 'tp-tp-pp'" --set parallel.order=tp-tp-pp
expect_bad 2 "'parallel.tp' must be >= 1" --set parallel.tp=0
expect_bad 3 "'train.batch_size' (4) must be divisible" --set parallel.dp=3
# Tensor parallelism (issue 6): heads split over tp; sequence parallelism
# splits each micro-batch's tokens.
expect_bad 4 "parallel.tp = 4 must divide model.n_head (2)" --set parallel.tp=4
expect_bad 2 "parallel.sequence_parallel splits each micro-batch's 1 x 63 tokens over parallel.tp = 2" \
  --set parallel.tp=2 --set parallel.sequence_parallel=true --set train.batch_size=1 --set model.seq_len=63
expect_bad 2 "'parallel.sequence_parallel' in .* expected true or false" --set parallel.sequence_parallel=1
out=$(run 2 --set parallel.tp=2 --set parallel.sequence_parallel=true); rc=$?
[[ $rc -eq 0 ]] || fail "tp 2: exit $rc: $out"
[[ $(echo "$out" | grep -c "^tensor parallel: 2 ranks per layer, 1 heads") -eq 1 ]] || fail "tp 2: layout not printed once: $out"
# Pipeline parallelism (issue 7): a block or more per chunk, a user split that
# adds up, and the micro-batches the interleaved schedule needs.
expect_bad 4 "model.n_layer (2) must be at least the number of pipeline chunks" --set parallel.pp=4
expect_bad 2 "'parallel.pp_layers' sums to 3 blocks, but model.n_layer is 2" --set parallel.pp=2 \
  --set "parallel.pp_layers=[1, 2]"
expect_bad 2 "interleaved schedule needs the micro-batches per step (1 = " --set parallel.pp=2 \
  --set model.n_layer=4 --set parallel.schedule=interleaved --set parallel.virtual_stages=2
expect_bad 2 "'parallel.schedule' must be" --set parallel.schedule=zigzag
# Zero-bubble (issue 20): micro-batches to fill the bubble, and activations its weight pass reads.
expect_bad 2 "\"zb-h1\" needs at least parallel.pp = 2 micro-batches per step; got 1" --set parallel.pp=2 \
  --set parallel.schedule=zb-h1 --set train.batch_size=2 --set train.micro_batch_size=2
expect_bad 2 "'train.recompute' must be \"none\" or \"selective\" with a zero-bubble parallel.schedule" \
  --set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=full
# ZB-V implies its two chunks per stage (issue 35); any other count given is refused.
expect_bad 2 "'parallel.virtual_stages' must be 2 with parallel.schedule = \"zb-v\"" --set parallel.pp=2 \
  --set parallel.schedule=zb-v --set parallel.virtual_stages=3
expect_bad 2 "model.n_layer (2) must be at least the number of pipeline chunks (parallel.pp x parallel.virtual_stages = 4)" \
  --set parallel.pp=2 --set parallel.schedule=zb-v
out=$(run 2 --set parallel.pp=2 --set train.micro_batch_size=1); rc=$?
[[ $rc -eq 0 ]] || fail "pp 2: exit $rc: $out"
[[ $(echo "$out" | grep -c "^pipeline: 2 stages x 1 chunks, blocks 1+1, schedule 1f1b, 4 micro-batches per step") -eq 1 ]] ||
  fail "pp 2: pipeline layout not printed once: $out"
[[ $(echo "$out" | grep -c "^pipeline bubble per stage (measured, 1f1b, m = 4):") -eq 1 ]] || fail "pp 2: no bubble report: $out"
out=$(run 2 --set parallel.pp=2 --set train.micro_batch_size=1 --set parallel.schedule=zb-h1); rc=$?
[[ $rc -eq 0 ]] || fail "pp 2 zb-h1: exit $rc: $out"
[[ $(echo "$out" | grep -c "^pipeline bubble per stage (measured, zb-h1, m = 4):") -eq 1 ]] || fail "pp 2 zb-h1: no bubble report: $out"

# A run directory (issue 11): pp 2 with one micro-batch is pipeline-bound, and
# the merged trace is valid JSON with matched spans on every rank.
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
out=$(cd "$work" && run 2 --set parallel.pp=2 --set train.steps=6 --set train.run_name=pp2m1); rc=$?
[[ $rc -eq 0 ]] || fail "run dir: exit $rc: $out"
for f in config.toml layout.json metrics.jsonl summary.json trace.json; do
  [[ -s "$work/runs/pp2m1/$f" ]] || fail "run dir: $f missing"
done
python3 - "$work/runs/pp2m1/trace.json" <<'PY' || fail "trace.json: spans do not match"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
open_spans, ranks = {}, set()
for e in events:
    key = (e.get("pid"), e.get("tid"))
    if e.get("ph") == "B": open_spans.setdefault(key, []).append(e["name"]); ranks.add(e["pid"])
    elif e.get("ph") == "E": assert open_spans[key].pop() is not None
assert all(not v for v in open_spans.values()), "unclosed spans"
assert len(ranks) == 2, ranks
PY
"$loom" diagnose "$work/runs/pp2m1" | grep -q "pipeline-bound" || fail "diagnose did not name pipeline-bound"
"$loom" report "$work/runs/pp2m1" > /dev/null && [[ -s "$work/runs/pp2m1/report/report.md" ]] || fail "report failed"
echo "ok: run directory, trace, report, diagnose"

# Checkpoints (issue 9): saved every 2 steps; --resume auto continues from the
# newest; a different model or a missing checkpoint is refused (exit 2).
ck="$work/ck"
out=$(run 2 --set train.steps=4 --set train.checkpoint_every=2 --set "train.checkpoint_dir=$ck"); rc=$?
[[ $rc -eq 0 && -f "$ck/latest" && -d "$ck/step_000004" ]] || fail "checkpoint: exit $rc, nothing saved: $out"
out=$(run 2 --set train.steps=6 --set "train.checkpoint_dir=$ck" --resume auto); rc=$?
[[ $rc -eq 0 ]] || fail "resume: exit $rc: $out"
echo "$out" | grep -q "^resume: .*step_000004 (step 4, written by dp 2 x tp 1 x pp 1" || fail "resume: not from step 4: $out"
[[ $(echo "$out" | grep -c "^step") -ge 1 && $(echo "$out" | grep -c "^step     1/") -eq 0 ]] || fail "resume restarted: $out"
# (found once training starts, so every rank reports it with its rank)
once=0 expect_bad 2 "is from a different model: model.d_model is 64 there, 32" --set model.d_model=32 \
  --set "train.checkpoint_dir=$ck" --resume auto
# The same checkpoint resumed as the other family (issue 17).
once=0 expect_bad 2 "is a GPT-2 model; this run's model.family is \"llama\"" --set 'model.family="llama"' \
  --set "train.checkpoint_dir=$ck" --resume auto
once=0 expect_bad 2 "/nonexistent/ckpt" --resume /nonexistent/ckpt
# The planner picks the layout (issue 10).
out=$(run 2 --layout auto); rc=$?
[[ $rc -eq 0 ]] || fail "layout auto: exit $rc: $out"
echo "$out" | grep -q "^loom train: --layout auto chose dp " || fail "layout auto: no choice printed: $out"
echo "$out" | grep -q "^plan vs measured: peak memory per rank" || fail "no plan vs measured line: $out"
echo "ok: checkpoints, resume, layout auto"
# What loom plan proposes, loom train runs (issue 18): plan #1 under ZeRO-3
# with full recomputation on 2 pipeline stages, written as a config and trained.
plan_cfg=$(mktemp -d)/plan.toml
out=$(timeout 60 "$loom" plan --config "$src/configs/tiny.toml" --cluster a100-80gb --devices 4 --pp 2 --zero 3 \
        --recompute full --emit-config "$plan_cfg" 2>&1); rc=$?
[[ $rc -eq 0 && -f "$plan_cfg" ]] || fail "plan --emit-config: exit $rc: $out"
grep -q '^zero = 3' "$plan_cfg" && grep -q '^recompute = "full"' "$plan_cfg" && grep -q '^pp = 2' "$plan_cfg" ||
  fail "plan --emit-config wrote another layout: $(cat "$plan_cfg")"
out=$(timeout 120 "$mpirun" --oversubscribe -np 4 "$loom" train --config "$plan_cfg" --set train.steps=2 \
        --set runtime.threads=1 --set train.run_dir='""' --set train.sample_tokens=0 \
        --set "data.path=\"$src/data/sample/kjv.txt\"" 2>&1); rc=$?
[[ $rc -eq 0 ]] || fail "the planned config did not train: exit $rc: $out"
echo "$out" | grep -q "^step     2/2" || fail "the planned config ran no step: $out"
echo "ok: loom plan --emit-config trains (ZeRO-3, full recomputation, pp 2)"
# A LoRA plan (issue 39): the emitted config keeps [lora] and trains.
out=$(timeout 60 "$loom" plan --config "$src/configs/tiny.toml" --cluster a100-80gb --devices 2 --lora 4 \
        --emit-config "$plan_cfg" 2>&1); rc=$?
[[ $rc -eq 0 ]] || fail "plan --lora 4 --emit-config: exit $rc: $out"
echo "$out" | grep -q "^LoRA: rank 4, alpha 8 on c_attn, c_proj, c_fc" || fail "the LoRA plan's memo: $out"
grep -q '^\[lora\]' "$plan_cfg" && grep -q '^rank = 4' "$plan_cfg" || fail "no [lora] in the emitted config: $(cat "$plan_cfg")"
out=$(timeout 120 "$mpirun" --oversubscribe -np 2 "$loom" train --config "$plan_cfg" --set train.steps=2 \
        --set runtime.threads=1 --set train.run_dir='""' --set train.sample_tokens=0 \
        --set "data.path=\"$src/data/sample/kjv.txt\"" 2>&1); rc=$?
[[ $rc -eq 0 ]] || fail "the planned LoRA config did not train: exit $rc: $out"
echo "$out" | grep -q "^LoRA: rank 4" && echo "$out" | grep -q "^step     2/2" || fail "the planned LoRA config: $out"
echo "ok: loom plan --lora --emit-config trains LoRA"
# ZeRO-3 never gathers the whole model for the closing sample; ZeRO-1 in bf16
# (sharded masters) gathers them and samples.
out=$(run 2 --set parallel.zero=3 --set train.run_dir='""'); rc=$?
[[ $rc -eq 0 ]] || fail "ZeRO-3: exit $rc: $out"
echo "$out" | grep -q "^sample: skipped (ZeRO-3" || fail "ZeRO-3 sampled the whole model: $out"
out=$(run 2 --set parallel.zero=1 --set 'precision.compute="bf16"' --set train.run_dir='""'); rc=$?
[[ $rc -eq 0 ]] || fail "ZeRO-1 bf16: exit $rc: $out"
echo "$out" | grep -q "^sample: skipped" && fail "ZeRO-1 bf16 did not sample: $out"
echo "ok: the closing sample under ZeRO-3 (skipped) and sharded masters (gathered)"

# Data parallelism (issue 5): the global batch must split into dp x micro-batch
# x accumulation steps; a bucket must hold something.
expect_bad 2 "'train.batch_size' (4) must be divisible by parallel.dp (2) x train.micro_batch_size (3)" \
  --set train.micro_batch_size=3
expect_bad 2 "'parallel.bucket_mb' must be in (0, 65536]" --set parallel.bucket_mb=0
expect_bad 2 "'parallel.zero' must be 0, 1, 2 or 3" --set parallel.zero=4
expect_bad 2 "'parallel.zero' must be 0, 1, 2 or 3" --set parallel.zero=-1
expect_bad 2 "train.recompute: unknown recomputation 'some'" --set train.recompute=some

# Mixed precision (issue 8): unknown names and unscaled fp16 are refused;
# fp16 under ZeRO-1 with a bf16 gradient reduction trains and logs its scale.
expect_bad 2 "precision.compute: unknown precision 'fp8'" --set precision.compute=fp8
expect_bad 2 "precision.loss_scale: fp16 compute with loss scaling off" --set precision.compute=fp16 \
  --set precision.loss_scale=off
expect_bad 2 "'precision.grad_reduce' must be" --set precision.grad_reduce=fp16
out=$(run 2 --set precision.compute=fp16 --set parallel.zero=1 --set precision.grad_reduce=bf16); rc=$?
[[ $rc -eq 0 ]] || fail "fp16: exit $rc: $out"
[[ $(echo "$out" | grep -c "^precision: fp16 matrix products") -eq 1 ]] || fail "fp16: precision not printed once: $out"
echo "$out" | grep -qE "^step +[0-9]+/[0-9]+ \| loss [0-9.]+ .*\| scale 65536 \|" || fail "fp16: no loss scale logged: $out"
echo "ok: fp16, ZeRO-1, bf16 gradient reduction"

# ZeRO-2 with accumulation trains and reports its layout and overlap once.
out=$(run 2 --set parallel.zero=2 --set train.micro_batch_size=1 --set parallel.bucket_mb=0.05); rc=$?
[[ $rc -eq 0 ]] || fail "zero 2: exit $rc: $out"
[[ $(echo "$out" | grep -c "^data parallel: 2 replicas x micro-batch 1 x 2 accumulation steps; ZeRO-2") -eq 1 ]] ||
  fail "zero 2: data-parallel layout not printed once: $out"
[[ $(echo "$out" | grep -c "^gradient reduction: ") -eq 1 ]] || fail "zero 2: no overlap report: $out"
echo "1 passed, 0 failed"
