#include "checkpoint/model_fields.h"

#include "core/check.h"

namespace loom {

std::map<std::string, int64_t> model_fields(const GPTConfig& cfg) {
  return {{"vocab_size", cfg.vocab_size}, {"n_layer", cfg.n_layer}, {"n_head", cfg.n_head},
          {"d_model", cfg.d_model},       {"seq_len", cfg.seq_len}};
}

GPTConfig gpt_config_from_fields(const std::map<std::string, int64_t>& fields, const std::string& origin) {
  auto get = [&](const char* key) {
    auto it = fields.find(key);
    LOOM_USER_CHECK(it != fields.end(), "%s: model field '%s' is missing", origin.c_str(), key);
    LOOM_USER_CHECK(it->second > 0 && it->second < (int64_t(1) << 31), "%s: model field '%s' = %lld is out of range",
                    origin.c_str(), key, (long long)it->second);
    return int(it->second);
  };
  GPTConfig c;
  c.vocab_size = get("vocab_size");
  c.n_layer = get("n_layer");
  c.n_head = get("n_head");
  c.d_model = get("d_model");
  c.seq_len = get("seq_len");
  c.validate();
  return c;
}

}  // namespace loom
