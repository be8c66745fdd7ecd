#!/usr/bin/env bash
# loom prepare on JSON Lines against plain text of the same bytes, one
# tokenizer, alternating runs.
#
#   bench/prepare_jsonl.sh TOKENIZER_DIR [MB] [PAIRS]
#
# Builds MB (default 8) of plain text from data/sample/kjv.txt (repeated)
# and JSON Lines of the same size made of the same lines (prompt /
# completion pairs of consecutive lines, and two-turn chat messages when the
# tokenizer has a chat template loom recognises), then runs
# `loom prepare --force` on each PAIRS times (default 3), alternating, and
# prints the median MB/s of each and their ratio (JSON Lines / text).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOOM="${LOOM:-$ROOT/build/loom}"
TOK="${1:?usage: bench/prepare_jsonl.sh TOKENIZER_DIR [MB] [PAIRS]}"
MB="${2:-8}" PAIRS="${3:-3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
python3 - "$ROOT/data/sample/kjv.txt" "$WORK" "$MB" "$TOK" <<'PY'
import json, os, sys
src, work, mb, tok = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
lines = [l for l in open(src, encoding="utf-8").read().split("\n") if l.strip()]
config = os.path.join(tok, "tokenizer_config.json")
chat = os.path.exists(config) and "chat_template" in json.load(open(config))
want = int(mb * 1e6)
text, jsonl, i = [], [], 0
size_t = size_j = 0
while size_j < want:
    a, b = lines[i % len(lines)], lines[(i + 1) % len(lines)]
    if chat and i % 4 == 2:
        rec = {"messages": [{"role": "user", "content": a}, {"role": "assistant", "content": b}]}
    else:
        rec = {"prompt": a + "\n", "completion": b}
    line = json.dumps(rec, ensure_ascii=False)
    jsonl.append(line); size_j += len(line.encode()) + 1
    i += 2
while size_t < size_j:
    text.append(lines[len(text) % len(lines)]); size_t += len(text[-1].encode()) + 1
open(os.path.join(work, "data.jsonl"), "w", encoding="utf-8").write("\n".join(jsonl) + "\n")
open(os.path.join(work, "data.txt"), "w", encoding="utf-8").write("\n".join(text) + "\n")
PY
bytes_jsonl=$(stat -c %s "$WORK/data.jsonl") bytes_text=$(stat -c %s "$WORK/data.txt")
"$LOOM" info 2>/dev/null | head -1 || true
run() {  # $1 input -> seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$LOOM" prepare --input "$1" --out "$WORK/out-$(basename "$1")" --tokenizer "$TOK" --force --threads 1 >/dev/null
  t1=$(date +%s.%N)
  python3 -c "print($t1 - $t0)"
}
text_s=() jsonl_s=()
for ((p = 0; p < PAIRS; p++)); do
  text_s+=("$(run "$WORK/data.txt")")
  jsonl_s+=("$(run "$WORK/data.jsonl")")
done
python3 - "$bytes_text" "$bytes_jsonl" "${text_s[*]}" "${jsonl_s[*]}" <<'PY'
import statistics, sys
bt, bj = int(sys.argv[1]), int(sys.argv[2])
t = statistics.median(map(float, sys.argv[3].split()))
j = statistics.median(map(float, sys.argv[4].split()))
print(f"plain text  {bt / 1e6:.1f} MB: {bt / t / 1e6:.2f} MB/s (median of {len(sys.argv[3].split())}, one thread)")
print(f"JSON Lines  {bj / 1e6:.1f} MB: {bj / j / 1e6:.2f} MB/s")
print(f"JSON Lines / text: {(bj / j) / (bt / t):.2f}")
PY
