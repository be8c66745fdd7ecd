// GPT-2 in Hugging Face's names (GPT2LMHeadModel). HF's GPT-2 uses Conv1D,
// whose weight is [in, out]; loom's linear weights are [out, in], so the
// four per block are transposed. The LM head is tied to wte (HF ties it on
// load; a saved lm_head.weight is ignored).
#include "model/hf_names.h"

namespace loom {

std::vector<HfTensorMap> gpt2_hf_tensor_map(const ModelConfig& cfg) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size, T = cfg.seq_len, F = cfg.ffn();
  std::vector<HfTensorMap> m;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool transpose = false) {
    m.push_back({name, shape, {{"transformer." + name, shape[0]}}, transpose});
  };
  add("wte.weight", {V, C});
  add("wpe.weight", {T, C});
  m.back().leading_rows = true;
  for (int l = 0; l < cfg.n_layer; l++) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {C});
    add(p + "ln_1.bias", {C});
    add(p + "attn.c_attn.weight", {3 * C, C}, true);
    add(p + "attn.c_attn.bias", {3 * C});
    add(p + "attn.c_proj.weight", {C, C}, true);
    add(p + "attn.c_proj.bias", {C});
    add(p + "ln_2.weight", {C});
    add(p + "ln_2.bias", {C});
    add(p + "mlp.c_fc.weight", {F, C}, true);
    add(p + "mlp.c_fc.bias", {F});
    add(p + "mlp.c_proj.weight", {C, F}, true);
    add(p + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  return m;
}

}  // namespace loom
