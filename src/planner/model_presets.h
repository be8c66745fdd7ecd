// Named model shapes the planner knows: GPT-2 (Radford et al. 2019),
// GPT-3-shaped models (Brown et al. 2020, Table 2.1, and two sizes in
// between), and LLaMA 2 and 3 (family llama: grouped-query attention,
// SwiGLU, RMSNorm, untied head) with their published shapes.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace loom::planner {

struct ModelPreset {
  std::string name;   // e.g. "gpt3-175b"
  ModelConfig model;  // seq_len is the context length trained at
  int global_batch;   // sequences per step, as published (or a GPT-3-like choice)
};

const std::vector<ModelPreset>& model_presets();
// Throws UserError listing the known names.
const ModelPreset& model_preset(const std::string& name);
std::string model_preset_names();  // "gpt2-124m, gpt2-350m, ..."

}  // namespace loom::planner
