// How a family's tensors are named and laid out in Hugging Face's
// checkpoints (transformers' GPT2LMHeadModel, LlamaForCausalLM): each loom
// global tensor is one HF tensor (transposed for GPT-2's Conv1D weights) or
// a stack of HF tensors by rows (LLaMA's fused q/k/v and gate/up
// projections). `loom export` and `train.init_from = "hf:DIR"` read the
// same table, so import then export gives back the same tensors. Each
// family's table lives in its folder (model/gpt2/, model/llama/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace loom {

struct HfPart {
  std::string name;  // HF's name, as transformers saves it
  int64_t rows = 0;  // of the loom tensor's rows (its first dimension) this part holds
};

struct HfTensorMap {
  std::string loom;            // loom's global name
  std::vector<int64_t> shape;  // loom's global shape
  std::vector<HfPart> parts;   // stacked by rows, covering them all
  // HF stores it as [in, out] (one part, 2-D): loom's [out, in] transposed.
  bool transpose = false;
  // HF's tensor may have more rows than loom reads (GPT-2's position table
  // of n_positions rows for a shorter model.seq_len).
  bool leading_rows = false;
};

// A mixture of experts Hugging Face holds as Qwen2MoeForCausalLM rather
// than MixtralForCausalLM: one with q/k/v biases, a shared expert, dense
// blocks between the MoE ones (moe_every > 1) or combine weights not
// renormalised, none of which Mixtral has.
bool hf_qwen2_moe(const ModelConfig& cfg);

// The model's tensors in HF's names, in the order HF saves them.
std::vector<HfTensorMap> hf_tensor_map(const ModelConfig& cfg);
// The family tables (model/gpt2/gpt2_hf_names.cpp, model/llama/llama_hf_names.cpp).
std::vector<HfTensorMap> gpt2_hf_tensor_map(const ModelConfig& cfg);
std::vector<HfTensorMap> llama_hf_tensor_map(const ModelConfig& cfg);

// HF tensors a checkpoint of the family may hold that carry no parameter
// (buffers transformers ignores on load: GPT-2's attn.bias / attn.masked_bias
// masks, older LLaMA conversions' rotary_emb.inv_freq, a tied model's saved
// lm_head.weight), by name.
bool hf_ignored_tensor(const ModelConfig& cfg, const std::string& hf_name);

}  // namespace loom
