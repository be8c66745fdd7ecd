#include "planner/model_presets.h"

#include "core/check.h"

namespace loom::planner {

const std::vector<ModelPreset>& model_presets() {
  // GPTConfig{vocab, n_layer, n_head, d_model, seq_len}. Vocabulary 50304:
  // GPT-2's 50257 padded to a multiple of 64, as nanoGPT and Megatron do.
  // Batches: GPT-2 0.5M tokens; GPT-3 Table 2.1 (6.7B and 13B 2M tokens,
  // 175B 3.2M tokens); 30B (OPT-30B's shape) and 70B are GPT-3-like choices.
  static const std::vector<ModelPreset> presets = {
      {"gpt2-124m", GPTConfig{50304, 12, 12, 768, 1024}, 512},
      {"gpt2-350m", GPTConfig{50304, 24, 16, 1024, 1024}, 512},
      {"gpt2-774m", GPTConfig{50304, 36, 20, 1280, 1024}, 512},
      {"gpt2-1.5b", GPTConfig{50304, 48, 25, 1600, 1024}, 512},
      {"gpt3-6.7b", GPTConfig{50304, 32, 32, 4096, 2048}, 1024},
      {"gpt3-13b", GPTConfig{50304, 40, 40, 5120, 2048}, 1024},
      {"gpt3-30b", GPTConfig{50304, 48, 56, 7168, 2048}, 1536},
      {"gpt3-70b", GPTConfig{50304, 80, 64, 8192, 2048}, 1536},
      {"gpt3-175b", GPTConfig{50304, 96, 96, 12288, 2048}, 1536},
  };
  return presets;
}

std::string model_preset_names() {
  std::string names;
  for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

const ModelPreset& model_preset(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return p;
  throw UserError(strprintf("unknown model preset '%s' (known: %s; or --config FILE.toml)", name.c_str(),
                            model_preset_names().c_str()));
}

}  // namespace loom::planner
