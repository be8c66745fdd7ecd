// The runs `loom bench planner` makes: small models and the layouts each is
// trained in, as `loom train --set` overrides.
#pragma once

#include <string>
#include <vector>

namespace loom::cli {

struct BenchModel {
  const char* name;
  const char* family;  // gpt2 or llama
  int vocab, layers, heads, kv_heads, d_model, ffn, seq_len;
  int batch;  // global batch in sequences
  std::string describe() const;  // "GPT-2 V 2048, 4 layers, d_model 256, 4 heads, T 128, batch 8"
};

// One row: a model trained on `ranks` ranks (dp = ranks / (tp x pp)).
struct BenchLayout {
  const BenchModel* model = nullptr;
  int ranks = 1, tp = 1, pp = 1, zero = 0;
  int micro = 0;  // sequences per micro-batch (0: batch / dp, one micro-batch)
  const char* schedule = "1f1b";
  int v = 1;  // virtual stages (interleaved)
  const char* recompute = "none";
  const char* precision = "fp32";
  bool sp = false;  // sequence parallelism (tp > 1)

  int dp() const { return ranks / (tp * pp); }
  int micro_batches() const { return micro > 0 ? model->batch / (dp() * micro) : 1; }
  // `loom train --set` assignments for this layout, `steps` steps, the run
  // directory dir/name, 1 thread per rank, no evaluation, sample or log lines.
  std::vector<std::string> overrides(int steps, const std::string& dir, const std::string& name) const;
};

// The smallest model: its runs measure the per-process overhead.
const BenchModel& overhead_probe_model();
// The overhead probe at `ranks` ranks: data parallel, ZeRO-0, fp32.
BenchLayout overhead_probe(int ranks);
// The matrix: quick is a handful of rows on a smaller model (CI smoke).
std::vector<BenchLayout> planner_bench_matrix(bool quick);

}  // namespace loom::cli
