#include "model/lora/lora_config.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/config.h"

namespace loom {

bool LoraConfig::targets_module(const std::string& module) const {
  for (const std::string& t : targets)
    if (module == t || (module.size() > t.size() && module.ends_with(t) && module[module.size() - t.size() - 1] == '.'))
      return true;
  return false;
}

std::vector<std::string> lora_target_names(bool llama) {
  if (llama) return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return {"c_attn", "c_proj", "c_fc", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
}

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The smaller side of the products a target names.
int64_t smaller_side(const std::string& target, const ModelConfig& m) {
  LoraConfig one;
  one.targets = {target};
  int64_t side = INT64_MAX;
  for (const BlockLinear& l : block_linears(m))
    if (one.targets_module(l.module(m))) side = std::min({side, l.in, l.out});
  return side;
}

}  // namespace

std::string BlockLinear::module(const ModelConfig& model) const {
  return (model.is_llama() ? "model.layers.0." : "transformer.h.0.") + path;
}

std::vector<BlockLinear> block_linears(const ModelConfig& m) {
  const int64_t C = m.d_model, F = m.ffn(), q = int64_t(m.n_head) * m.head_dim(),
                kv = int64_t(m.kv_heads()) * m.head_dim();
  if (m.is_llama())
    return {{"self_attn.q_proj", C, q, true},  {"self_attn.k_proj", C, kv, true}, {"self_attn.v_proj", C, kv, true},
            {"self_attn.o_proj", q, C, false}, {"mlp.gate_proj", C, F, true},     {"mlp.up_proj", C, F, true},
            {"mlp.down_proj", F, C, false}};
  return {{"attn.c_attn", C, 3 * C, true}, {"attn.c_proj", C, C, false}, {"mlp.c_fc", C, F, true},
          {"mlp.c_proj", F, C, false}};
}

std::vector<BlockLinear> adapted_linears(const ModelConfig& m) {
  std::vector<BlockLinear> out;
  if (!m.lora.enabled()) return out;
  for (BlockLinear& l : block_linears(m))
    if (m.lora.targets_module(l.module(m))) out.push_back(std::move(l));
  return out;
}

void validate_lora(const LoraConfig& lora, const ModelConfig& model) {
  if (lora.rank == 0 && lora.targets.empty()) return;
  LOOM_USER_CHECK(lora.rank >= 1, "config field 'lora.rank' must be >= 1 (got %d)", lora.rank);
  LOOM_USER_CHECK(std::isfinite(lora.alpha) && lora.alpha > 0, "config field 'lora.alpha' must be > 0 (got %g)",
                  lora.alpha);
  LOOM_USER_CHECK(!lora.targets.empty(),
                  "config field 'lora.targets' is empty: name the layers to adapt (for %s: %s)",
                  model_family_name(model.family), joined(lora_target_names(model.is_llama())).c_str());
  const std::vector<std::string> known = lora_target_names(model.is_llama());
  for (const std::string& t : lora.targets) {
    LOOM_USER_CHECK(std::find(known.begin(), known.end(), t) != known.end(),
                    "config field 'lora.targets' names '%s', not a linear layer of %s (the targets are: %s)",
                    t.c_str(), model_family_name(model.family), joined(known).c_str());
    LOOM_USER_CHECK(!model.is_moe() || (t != "gate_proj" && t != "up_proj" && t != "down_proj"),
                    "config field 'lora.targets' names '%s': the mixtral family's MLP is a mixture of experts, "
                    "which has no adapters yet (adapt the attention's q_proj, k_proj, v_proj, o_proj)",
                    t.c_str());
    const int64_t side = smaller_side(t, model);
    LOOM_USER_CHECK(lora.rank <= side,
                    "config field 'lora.rank' is %d, larger than the smaller side (%lld) of target '%s'", lora.rank,
                    (long long)side, t.c_str());
  }
  LOOM_USER_CHECK(lora.dropout == 0,
                  "config field 'lora.dropout' is %g: only 0 is supported (a dropout mask that is the same in every "
                  "layout, keyed by global token and feature, is not built yet)",
                  lora.dropout);
}

int64_t lora_parameters(const ModelConfig& m) {
  int64_t n = 0;
  for (const BlockLinear& l : adapted_linears(m)) n += int64_t(m.lora.rank) * (l.in + l.out);
  return n * m.n_layer;
}

bool is_lora_tensor(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

}  // namespace loom
