// The GPT model section as the flat key/value map a checkpoint manifest
// records ("n_layer", "n_head", "d_model", "vocab_size", "seq_len"), and back.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/config.h"

namespace loom {

std::map<std::string, int64_t> model_fields(const GPTConfig& cfg);
// Throws UserError naming `origin` and the missing field.
GPTConfig gpt_config_from_fields(const std::map<std::string, int64_t>& fields, const std::string& origin);

}  // namespace loom
