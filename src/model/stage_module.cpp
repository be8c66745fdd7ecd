// The one place that maps a model family to its code.
#include "model/stage_module.h"

#include "model/gpt2/gpt2_layout.h"
#include "model/gpt2/gpt2_stage.h"
#include "model/llama/llama_layout.h"
#include "model/llama/llama_stage.h"

namespace loom {

ParamLayout ParamLayout::for_model(const ModelConfig& cfg, const ModelShard& shard) {
  return cfg.is_llama() ? llama::make_layout(cfg, shard) : gpt2::make_layout(cfg, shard);
}

std::unique_ptr<StageModule> make_stage_module(const ModelConfig& cfg, const ModelShard& shard,
                                               const TensorParallel& tp, int B, int T, const StageBuffers& buffers) {
  return cfg.is_llama() ? llama::make_stage(cfg, shard, tp, B, T, buffers)
                        : gpt2::make_stage(cfg, shard, tp, B, T, buffers);
}

size_t planned_activation_bytes(const ModelConfig& cfg, const ModelShard& shard, int B, int T, int slots,
                                ComputePrecision compute, Recompute recompute, int threads, int cp) {
  StageBuffers plan;
  plan.slots = slots, plan.compute = compute, plan.recompute = recompute, plan.plan_only = true;
  plan.plan_threads = threads, plan.split = SequenceSplit{cp, 0};
  const TensorParallel tp = TensorParallel::shape_only(shard.tp_rank, shard.tp_size, shard.sequence_parallel);
  return make_stage_module(cfg, shard, tp, B, T, plan)->activation_bytes();
}

size_t planned_shared_activation_bytes(const ModelConfig& cfg, const std::vector<ModelShard>& chunks, int B, int T,
                                       int slots, ComputePrecision compute, Recompute recompute, int threads,
                                       int cp) {
  SharedActivations pool;
  size_t modules = 0;
  for (const ModelShard& shard : chunks) {
    StageBuffers plan;
    plan.slots = slots, plan.compute = compute, plan.recompute = recompute, plan.plan_only = true;
    plan.plan_threads = threads, plan.shared_activations = &pool, plan.split = SequenceSplit{cp, 0};
    const TensorParallel tp = TensorParallel::shape_only(shard.tp_rank, shard.tp_size, shard.sequence_parallel);
    modules += make_stage_module(cfg, shard, tp, B, T, plan)->activation_bytes();
  }
  return pool.planned_bytes() + modules;
}

std::unique_ptr<StageModule> make_model(const ModelConfig& cfg, int B, int T, float* grad_buffer,
                                        int64_t param_floats) {
  return make_stage_module(cfg, ModelShard{}, TensorParallel{}, B, T,
                           StageBuffers{nullptr, grad_buffer, param_floats, 1});
}

}  // namespace loom
