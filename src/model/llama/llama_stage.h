// LLaMA's stage module: rotary positions, RMSNorm, SwiGLU MLP, grouped-query
// attention, no biases, an untied LM head (unless tie_embeddings).
#pragma once

#include <memory>

#include "model/stage_module.h"

namespace loom::llama {

std::unique_ptr<StageModule> make_stage(const ModelConfig& cfg, const ModelShard& shard, const TensorParallel& tp,
                                        int B, int T, const StageBuffers& buffers);

}  // namespace loom::llama
