// Which linear layers get a LoRA adapter and how ([lora] in a run config).
//
// LoRA (Hu et al. 2021; Hugging Face PEFT's LoraConfig): a chosen layer's
// frozen W is trained as W + (alpha / rank) B A, A [rank, in], B [out,
// rank], B zero at the start. Targets are named as PEFT names them, by a
// suffix of the Hugging Face module path: LLaMA's q_proj, k_proj, v_proj,
// o_proj, gate_proj, up_proj, down_proj; GPT-2's c_attn, c_fc, c_proj (both
// projections) or attn.c_proj / mlp.c_proj. loom's fused q/k/v and gate/up
// products give each HF projection its own adapter, so that they mean what
// PEFT's mean; GPT-2's fused c_attn gets one, as PEFT gives it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct ModelConfig;

struct LoraConfig {
  int rank = 0;  // 0: no LoRA (full training)
  double alpha = 16;
  std::vector<std::string> targets;  // HF module names (suffixes), as PEFT's target_modules
  bool train_biases = false;         // bias = "all": every bias tensor trained too (PEFT's bias="all")
  uint64_t seed = 0;                 // keys A's initial values (with train.seed)
  double dropout = 0;                // only 0: a layout-invariant mask is not built yet

  bool enabled() const { return rank > 0; }
  float scale() const { return float(alpha / rank); }
  // Whether the HF module path (e.g. "model.layers.3.self_attn.q_proj")
  // is a target: equal to one, or ending in "." + one (PEFT's matching).
  bool targets_module(const std::string& module) const;
  bool operator==(const LoraConfig&) const = default;
};

// The targets a family accepts (PEFT's names for its modules).
std::vector<std::string> lora_target_names(bool llama);

// Checks [lora] against the model; throws UserError naming the field
// ("lora.rank", "lora.targets", ...). Nothing to check when rank is 0.
void validate_lora(const LoraConfig& lora, const ModelConfig& model);

// A linear layer of a block as LoRA sees it: its HF module path after the
// layer's prefix ("self_attn.q_proj", "mlp.c_fc"), global widths, and
// whether tensor parallelism splits its output (column) or its input (row).
struct BlockLinear {
  std::string path;
  int64_t in = 0, out = 0;
  bool column = true;
  // The full HF module path in block 0 (what lora.targets match).
  std::string module(const ModelConfig& model) const;
};
// Every linear layer of a block of `model`'s family, in forward order.
std::vector<BlockLinear> block_linears(const ModelConfig& model);
// Those lora.targets adapts (none without LoRA).
std::vector<BlockLinear> adapted_linears(const ModelConfig& model);

// Parameters of all the adapters of `model` (r (in + out) per adapted
// linear layer), 0 without LoRA.
int64_t lora_parameters(const ModelConfig& model);

// Whether a global tensor name is an adapter factor (".lora_A." / ".lora_B.").
bool is_lora_tensor(const std::string& name);

}  // namespace loom
