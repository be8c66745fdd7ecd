// GPT-2's stage module: learned positions, LayerNorm, GELU MLP, biases, the
// LM head tied to the token table.
#pragma once

#include <memory>

#include "model/stage_module.h"

namespace loom::gpt2 {

std::unique_ptr<StageModule> make_stage(const ModelConfig& cfg, const ModelShard& shard, const TensorParallel& tp,
                                        int B, int T, const StageBuffers& buffers);

}  // namespace loom::gpt2
