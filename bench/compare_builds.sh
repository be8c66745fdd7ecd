#!/usr/bin/env bash
# Two builds of loom timed in turn, so their ratio is measured in one sitting
# (these machines are noisy; figures from different runs do not compare).
#
#   bench/compare_builds.sh BASE/loom NEW/loom [PAIRS]
#
# For each precision (fp32, bf16): PAIRS alternating runs (base, new, base,
# new, ...) of one training step child on gpt2-124M with 2 threads (`loom
# bench step-child`, the engine's own step), each printing its tokens/s; then
# `loom bench scaling --ranks 2 --zero 0,1,2` alternately, its efficiency and
# overlap; and `loom train` (the whole trainer: parameter groups, reducer,
# AdamW) on GPT-2 124M shapes over the bundled text, 16 steps, alternately.
# Prints the median tokens/s of each build and the median of the pairwise
# ratios new / base.
set -euo pipefail
base=${1:?usage: compare_builds.sh BASE_LOOM NEW_LOOM [PAIRS]}
new=${2:?usage: compare_builds.sh BASE_LOOM NEW_LOOM [PAIRS]}
pairs=${3:-5}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

tok_s() {  # loom precision -> tokens/s of one step child
  "$1" bench step-child --shape gpt2-124M --threads 2 --steps 3 --precision "$2" 2>&1 |
    sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p'
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

# pairs LABEL MEASURE PRECISION: PAIRS alternating runs of MEASURE (a
# function of the loom binary and the precision printing tokens/s).
pairs_of() {
  local label=$1 measure=$2 precision=$3 b n b_all=() n_all=() ratios=()
  for ((i = 0; i < pairs; i++)); do
    b=$("$measure" "$base" "$precision")
    n=$("$measure" "$new" "$precision")
    b_all+=("$b") n_all+=("$n")
    ratios+=("$(awk -v n="$n" -v b="$b" 'BEGIN {printf "%.4f", n / b}')")
  done
  printf '%s %s, 2 threads: base %s tok/s, new %s tok/s (medians of %d); new/base per pair: %s; median %s\n' \
    "$label" "$precision" "$(printf '%s\n' "${b_all[@]}" | median)" "$(printf '%s\n' "${n_all[@]}" | median)" \
    "$pairs" "${ratios[*]}" "$(printf '%s\n' "${ratios[@]}" | median)"
}

train_tok_s() {  # loom precision -> tokens/s of `loom train` (its "done:" line)
  "$1" train --config "$(dirname "$0")/../configs/gpt2-124m.toml" --set data.format='"bytes"' \
    --set data.path="\"$(dirname "$0")/../data/sample/kjv.txt\"" --set train.steps=16 --set train.eval_every=0 \
    --set train.sample_tokens=0 --set train.run_dir='""' --set train.batch_size=4 --set model.seq_len=256 \
    --set runtime.threads=2 --set precision.compute="\"$2\"" 2>&1 | sed -n 's/^done: [0-9]* steps, \([0-9.]*\) tok\/s.*/\1/p'
}

"$new" info 2>/dev/null | head -1 || true
for precision in fp32 bf16; do pairs_of "bench step-child gpt2-124M" tok_s "$precision"; done
for precision in fp32 bf16; do pairs_of "loom train, GPT-2 124M shapes, 16 steps" train_tok_s "$precision"; done

for build in base new base new; do
  exe=$base
  [[ $build == new ]] && exe=$new
  echo "== loom bench scaling --ranks 2 --zero 0,1,2 ($build)"
  "$exe" bench scaling --ranks 2 --zero 0,1,2 2>&1 | grep -E '^ *(layout|-|alone|dp) ' || true
done
