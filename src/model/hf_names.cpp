#include "model/hf_names.h"

namespace loom {

std::vector<HfTensorMap> hf_tensor_map(const ModelConfig& cfg) {
  return cfg.is_llama() ? llama_hf_tensor_map(cfg) : gpt2_hf_tensor_map(cfg);
}

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

bool hf_ignored_tensor(const ModelConfig& cfg, const std::string& hf_name) {
  if (cfg.is_llama()) return ends_with(hf_name, ".rotary_emb.inv_freq") || (cfg.tied() && hf_name == "lm_head.weight");
  return ends_with(hf_name, ".attn.bias") || ends_with(hf_name, ".attn.masked_bias") || hf_name == "lm_head.weight";
}

}  // namespace loom
