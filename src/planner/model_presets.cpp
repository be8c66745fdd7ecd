#include "planner/model_presets.h"

#include "core/check.h"

namespace loom::planner {
namespace {

// A LLaMA shape as its model card publishes it: vocabulary, layers, query
// heads, key/value heads, width, MLP width, context, RoPE base, RMSNorm eps.
ModelConfig llama(int vocab, int layers, int heads, int kv_heads, int d_model, int ffn, int seq_len,
                  double rope_theta, double norm_eps = 1e-5) {
  ModelConfig m{vocab, layers, heads, d_model, seq_len};
  m.family = ModelFamily::llama;
  m.n_kv_head = kv_heads;
  m.ffn_hidden = ffn;
  m.rope_theta = rope_theta;
  m.norm_eps = norm_eps;
  return m;  // untied lm_head: the family's default
}

ModelConfig mixtral(int vocab, int layers, int heads, int kv_heads, int d_model, int ffn, int seq_len) {
  ModelConfig m = llama(vocab, layers, heads, kv_heads, d_model, ffn, seq_len, 1e6);
  m.n_experts = 8, m.top_k = 2, m.moe_ffn_hidden = ffn;
  return m;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  // ModelConfig{vocab, n_layer, n_head, d_model, seq_len}. Vocabulary 50304:
  // GPT-2's 50257 padded to a multiple of 64, as nanoGPT and Megatron do.
  // Batches: GPT-2 0.5M tokens; GPT-3 Table 2.1 (6.7B and 13B 2M tokens,
  // 175B 3.2M tokens); 30B (OPT-30B's shape) and 70B are GPT-3-like choices.
  // LLaMA: the published configurations (Touvron et al. 2023, "Llama 2",
  // Table 1 and the released config.json files; Llama 3 (Dubey et al. 2024,
  // "The Llama 3 Herd of Models", Table 3). Batches: Llama 2 trained on 4M
  // tokens per step (1024 x 4096); Llama 3 405B's main phase 8M tokens
  // (1024 x 8192), used for the smaller Llama 3 models too.
  static const std::vector<ModelPreset> presets = {
      {"gpt2-124m", ModelConfig{50304, 12, 12, 768, 1024}, 512},
      {"gpt2-350m", ModelConfig{50304, 24, 16, 1024, 1024}, 512},
      {"gpt2-774m", ModelConfig{50304, 36, 20, 1280, 1024}, 512},
      {"gpt2-1.5b", ModelConfig{50304, 48, 25, 1600, 1024}, 512},
      {"gpt3-6.7b", ModelConfig{50304, 32, 32, 4096, 2048}, 1024},
      {"gpt3-13b", ModelConfig{50304, 40, 40, 5120, 2048}, 1024},
      {"gpt3-30b", ModelConfig{50304, 48, 56, 7168, 2048}, 1536},
      {"gpt3-70b", ModelConfig{50304, 80, 64, 8192, 2048}, 1536},
      {"gpt3-175b", ModelConfig{50304, 96, 96, 12288, 2048}, 1536},
      {"llama2-7b", llama(32000, 32, 32, 32, 4096, 11008, 4096, 10000.0), 1024},
      {"llama2-13b", llama(32000, 40, 40, 40, 5120, 13824, 4096, 10000.0), 1024},
      {"llama2-70b", llama(32000, 80, 64, 8, 8192, 28672, 4096, 10000.0), 1024},
      {"llama3-8b", llama(128256, 32, 32, 8, 4096, 14336, 8192, 500000.0), 1024},
      {"llama3-70b", llama(128256, 80, 64, 8, 8192, 28672, 8192, 500000.0), 1024},
      {"llama3-405b", llama(128256, 126, 128, 8, 16384, 53248, 8192, 500000.0), 1024},
      // Mixtral (Jiang et al. 2024, "Mixtral of Experts", and the released
      // config.json files): LLaMA's attention, 8 experts of the MLP width in
      // every block, top 2; 46.7B and 141B parameters in all. Planned at
      // 4096 tokens a sequence, 1024 sequences a step.
      {"mixtral-8x7b", mixtral(32000, 32, 32, 8, 4096, 14336, 4096), 1024},
      {"mixtral-8x22b", mixtral(32768, 56, 48, 8, 6144, 16384, 4096), 1024},
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
