#include "bench/bench_planner_matrix.h"

#include <string_view>

#include "cli/commands.h"
#include "core/check.h"

namespace loom::cli {
namespace {

// Big enough that model states (16-18 B per parameter) and activations are
// tens of MiB next to the process's own ~100 MiB, small enough that a run of
// a few steps takes seconds on one core.
const BenchModel kGpt2{"gpt2-s", "gpt2", 2048, 4, 4, 4, 256, 0, 128, 8};
const BenchModel kLlama{"llama-s", "llama", 2048, 4, 4, 2, 256, 688, 128, 8};
const BenchModel kQuick{"gpt2-xs", "gpt2", 512, 4, 4, 4, 128, 0, 64, 8};
const BenchModel kProbe{"tiny", "gpt2", 256, 2, 2, 2, 64, 0, 64, 4};

}  // namespace

std::string BenchModel::describe() const {
  const bool llama = std::string_view(family) == "llama";
  std::string s = strprintf("%s V %d, %d layers, d_model %d, %d heads", llama ? "LLaMA" : "GPT-2", vocab, layers,
                            d_model, heads);
  if (llama) s += strprintf(" (%d kv), SwiGLU %d", kv_heads, ffn);
  return s + strprintf(", T %d, batch %d", seq_len, batch);
}

std::vector<std::string> BenchLayout::overrides(int steps, const std::string& dir, const std::string& name) const {
  const BenchModel& m = *model;
  std::vector<std::string> s = {
      strprintf("model.family=%s", m.family), strprintf("model.vocab_size=%d", m.vocab),
      strprintf("model.n_layer=%d", m.layers), strprintf("model.n_head=%d", m.heads),
      strprintf("model.d_model=%d", m.d_model), strprintf("model.seq_len=%d", m.seq_len),
      strprintf("train.batch_size=%d", m.batch), strprintf("train.micro_batch_size=%d", micro),
      strprintf("train.steps=%d", steps), "train.warmup_steps=1", "train.eval_every=0", "train.log_every=1000",
      "train.sample_tokens=0", strprintf("train.recompute=%s", recompute), "train.run_dir=" + dir,
      "train.run_name=" + name, "runtime.threads=1", strprintf("parallel.tp=%d", tp), strprintf("parallel.pp=%d", pp),
      strprintf("parallel.zero=%d", zero), strprintf("parallel.schedule=%s", schedule),
      strprintf("parallel.virtual_stages=%d", v), strprintf("parallel.sequence_parallel=%s", sp ? "true" : "false"),
      strprintf("precision.compute=%s", precision), "data.format=bytes",
      "data.path=" + project_root() + "/data/sample/kjv.txt"};
  if (std::string_view(m.family) == "llama")
    s.insert(s.begin() + 6, {strprintf("model.n_kv_head=%d", m.kv_heads), strprintf("model.ffn_hidden=%d", m.ffn)});
  return s;
}

const BenchModel& overhead_probe_model() { return kProbe; }

BenchLayout overhead_probe(int ranks) { return BenchLayout{.model = &kProbe, .ranks = ranks}; }

std::vector<BenchLayout> planner_bench_matrix(bool quick) {
  if (quick)
    return {
        {.model = &kQuick},
        {.model = &kQuick, .ranks = 2, .zero = 1, .recompute = "full"},
        {.model = &kQuick, .ranks = 2, .zero = 3, .precision = "bf16"},
        {.model = &kQuick, .ranks = 2, .tp = 2, .recompute = "selective", .sp = true},
        {.model = &kQuick, .ranks = 2, .pp = 2, .micro = 2, .schedule = "gpipe"},
        {.model = &kQuick, .ranks = 2, .pp = 2, .micro = 2, .schedule = "interleaved", .v = 2},
    };
  const BenchModel* g = &kGpt2;
  const BenchModel* l = &kLlama;
  return {
      // One process: recomputation and precision alone.
      {.model = g},
      {.model = g, .recompute = "selective"},
      {.model = g, .recompute = "full"},
      {.model = g, .precision = "bf16"},
      // Data parallelism, every ZeRO stage; sharded fp32 masters in bf16.
      {.model = g, .ranks = 2},
      {.model = g, .ranks = 2, .zero = 1},
      {.model = g, .ranks = 2, .zero = 2},
      {.model = g, .ranks = 2, .zero = 3},
      {.model = g, .ranks = 2, .zero = 1, .precision = "bf16"},
      {.model = g, .ranks = 2, .zero = 3, .recompute = "selective", .precision = "bf16"},
      {.model = g, .ranks = 2, .zero = 2, .micro = 2, .recompute = "full"},  // accumulation
      {.model = g, .ranks = 4},
      {.model = g, .ranks = 4, .zero = 3},
      // Tensor parallelism, with and without sequence parallelism.
      {.model = g, .ranks = 2, .tp = 2},
      {.model = g, .ranks = 2, .tp = 2, .precision = "bf16", .sp = true},
      {.model = g, .ranks = 4, .tp = 4, .recompute = "full"},
      // Pipelines: each schedule.
      {.model = g, .ranks = 2, .pp = 2, .micro = 2, .schedule = "gpipe"},
      {.model = g, .ranks = 2, .pp = 2, .micro = 2},
      {.model = g, .ranks = 2, .pp = 2, .micro = 2, .schedule = "interleaved", .v = 2},
      {.model = g, .ranks = 2, .pp = 2, .micro = 2, .recompute = "full"},
      {.model = g, .ranks = 4, .pp = 4, .micro = 1},
      // Two and three axes at once.
      {.model = g, .ranks = 4, .tp = 2, .zero = 1},
      {.model = g, .ranks = 4, .pp = 2, .zero = 3, .micro = 2, .precision = "bf16"},
      {.model = g, .ranks = 4, .tp = 2, .pp = 2, .micro = 2, .schedule = "interleaved", .v = 2,
       .recompute = "selective", .precision = "bf16"},
      // The other family.
      {.model = l},
      {.model = l, .ranks = 2, .zero = 3, .precision = "bf16"},
      {.model = l, .ranks = 2, .tp = 2, .recompute = "selective", .sp = true},
      {.model = l, .ranks = 2, .pp = 2, .micro = 2, .schedule = "gpipe"},
  };
}

}  // namespace loom::cli
