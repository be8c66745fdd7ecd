// One way to run a training step: how the devices are split and how each
// replica runs its share of the global batch.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "model/config.h"
#include "model/recompute.h"
#include "parallel/pp/schedule.h"
#include "precision/policy.h"

namespace loom::planner {

// The engine's types: precision.compute (precision/policy.h) and the
// recomputation modes (model/recompute.h).
using loom::ComputePrecision;
using loom::Recompute;

// What is trained: the model and the step's batch.
struct ParameterCounts {
  double layer_split = 0;       // per layer: weight matrices and column-split biases (1/tp on each rank)
  double layer_replicated = 0;  // per layer: norms and row-parallel biases (whole on each rank)
  double layer_matrices = 0;    // per layer: weight-matrix elements (2 forward FLOPs per token each)
  double embedding = 0;         // token table, vocabulary-parallel (1/tp), first stage
  double positions = 0;         // GPT-2's learned position table, first stage
  double head = 0;              // LLaMA's untied lm_head (vocabulary-parallel), last stage; 0 when tied
  double final_norm = 0;        // last stage
  double layer_experts = 0;     // per layer: the routed experts' stacks (of layer_split; 1/(tp ep) on each rank)
};

struct Workload {
  ModelConfig model;
  int global_batch = 1;  // sequences per optimizer step
  // Hidden and attention dropout (Megatron-LM's default 0.1; loom has none):
  // memory-bound work the time model adds.
  bool dropout = false;
  int seq_len() const { return model.seq_len; }
  // parameter_counts(model), kept for the model it was counted for: the
  // search asks for it for every layout (hundreds of thousands).
  const ParameterCounts& counts() const;
  mutable std::optional<std::pair<ModelConfig, ParameterCounts>> counted{};
};

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int v = 1;              // model chunks per pipeline stage (interleaved 1F1B when > 1)
  int micro_batch = 1;    // sequences per forward / backward
  int micro_batches = 1;  // m: micro-batches per replica per step
  int zero = 0;           // 0..3
  Recompute recompute = Recompute::none;
  bool seq_parallel = false;
  ComputePrecision precision = ComputePrecision::bf16;
  // A zero-bubble schedule (split backward): ZB-H1 with v == 1, ZB-V with
  // v == 2; otherwise 1F1B, or interleaved 1F1B with v > 1.
  bool zero_bubble = false;
  // Context parallelism: each sequence over cp ranks (ring attention); the
  // dp x cp ranks share gradients and ZeRO shards.
  int cp = 1;
  // Layers of each virtual stage (pp x v of them, in virtual-stage order, as
  // parallel.pp_layers); empty: balanced (the first stages take the rest).
  std::vector<int> vs_layers;
  // Gradients accumulated and reduced in fp32 under 16-bit compute
  // (Megatron's main_grad: 18 bytes per parameter instead of 16).
  bool fp32_grads = false;
  // The data-parallel reduction starts bucket by bucket during the last
  // backward (loom, Megatron's --overlap-grad-reduce); false: after it.
  bool overlap_grad_reduce = true;
  // Bytes of gradients per data-parallel reduction (loom's parallel.bucket_mb,
  // 4 MiB by default); 0: one collective over the whole buffer.
  double bucket_bytes = 4.0 * (1 << 20);
  // Expert parallelism: the experts spread over ep ranks of the data group
  // (ep divides dp x cp); their gradients and ZeRO shards over the
  // expert-data group (dp x cp / ep), their tokens exchanged by all-to-all.
  int ep = 1;
  // Bytes per gradient element.
  double grad_bytes() const { return precision == ComputePrecision::fp32 || fp32_grads ? 4 : 2; }

  int devices() const { return dp * tp * pp * cp; }
  int data() const { return dp * cp; }  // the data group: gradient reduction, ZeRO shards
  int expert_data() const { return data() / ep; }  // the experts' gradient reduction and ZeRO shards
  pp::ScheduleKind schedule() const {
    if (zero_bubble) return v == 2 ? pp::ScheduleKind::ZeroBubbleV : pp::ScheduleKind::ZeroBubbleH1;
    return v > 1 ? pp::ScheduleKind::Interleaved1F1B : pp::ScheduleKind::OneFOneB;
  }
  const char* schedule_name() const;  // "1f1b", "interleaved", "zb-h1", "zb-v"
  // "dp 8 tp 4 pp 2 v 1 | mb 1 x 16 | zero 1 | bf16 | recompute none | sp | zb-h1" (or zb-v); " cp N" and
  // " ep N" after pp
  std::string describe() const;
};

// The one conversion between a planner Layout and a run's config (the
// config's sections keep what a Layout gathers: grid and ZeRO stage in
// parallel, micro-batching and recomputation in train, the compute type in
// precision). The layout cfg describes on world_size ranks (parallel.dp = 0:
// world / (tp x pp)); the schedule is the config's (Layout names only v and
// whether it is ZB-H1).
Layout layout_of(const RunConfig& cfg, int world_size);
// cfg with l in it: parallel.dp/tp/pp/zero/virtual_stages/sequence_parallel
// (v > 1: the interleaved schedule; zero_bubble: "zb-h1"; otherwise the
// config's 1F1B or GPipe), train.micro_batch_size, batch_size
// (dp x micro_batch x micro_batches), recompute, and precision.compute.
RunConfig with_layout(RunConfig cfg, const Layout& l);

// Layers of pipeline stage `stage` (first stages take the remainder).
int layers_on_stage(int n_layer, int pp, int stage);
// The layout's: its vs_layers summed over the stage's chunks, or balanced.
int layers_on_stage(int n_layer, const Layout& l, int stage);
// Layers of virtual stage vs on pipeline stage `stage` (its vs_layers
// entry, or the stage's share).
double layers_of_chunk(int n_layer, const Layout& l, int vs, int stage);

}  // namespace loom::planner
