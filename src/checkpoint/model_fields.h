// The model section as the flat key/value maps a checkpoint manifest records
// ("family", "n_layer", "n_head", "d_model", "vocab_size", "seq_len",
// "n_kv_head", "ffn_hidden", "tie_embeddings"; and, real-valued, "rope_theta"
// and "norm_eps"; where set, "qkv_bias" and the llama3 rope scaling's
// "rope_scaling", "rope_original_max_positions", "rope_factor",
// "rope_low_freq_factor", "rope_high_freq_factor"; with LoRA "lora_rank",
// "lora_targets" (a bit per name of lora_target_names), "lora_bias_all" and,
// real-valued, "lora_alpha"), and back.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/config.h"

namespace loom {

std::map<std::string, int64_t> model_fields(const ModelConfig& cfg);
std::map<std::string, double> model_real_fields(const ModelConfig& cfg);
// Throws UserError naming `origin` and the missing field. A manifest without
// "family" is GPT-2's (written before LLaMA).
ModelConfig model_config_from_fields(const std::map<std::string, int64_t>& fields,
                                     const std::map<std::string, double>& real, const std::string& origin);

}  // namespace loom
