#include "checkpoint/model_fields.h"

#include "core/check.h"

namespace loom {

std::map<std::string, int64_t> model_fields(const ModelConfig& cfg) {
  std::map<std::string, int64_t> f = {{"family", cfg.is_llama() ? 1 : 0}, {"vocab_size", cfg.vocab_size},
                                      {"n_layer", cfg.n_layer},              {"n_head", cfg.n_head},
                                      {"d_model", cfg.d_model},              {"seq_len", cfg.seq_len}};
  if (cfg.is_llama()) {  // GPT-2's are fixed by the family
    f["n_kv_head"] = cfg.kv_heads();
    f["ffn_hidden"] = cfg.ffn();
    f["tie_embeddings"] = cfg.tied() ? 1 : 0;
    // Written only where set, so older checkpoints (without them) read as before.
    if (cfg.qkv_bias) f["qkv_bias"] = 1;
    if (cfg.rope_scaling.kind == RopeScaling::Kind::llama3) {
      f["rope_scaling"] = 1;
      f["rope_original_max_positions"] = cfg.rope_scaling.original_max_positions;
    }
  }
  if (cfg.is_moe()) {  // the mixtral family's experts
    f["n_experts"] = cfg.n_experts, f["top_k"] = cfg.top_k;
    f["moe_ffn_hidden"] = cfg.expert_ffn(), f["moe_every"] = cfg.moe_every;
    if (cfg.moe_sigmoid) f["moe_sigmoid"] = 1;  // the router's scores (absent: softmax)
    if (cfg.moe_shared_ffn > 0) f["moe_shared_ffn"] = cfg.moe_shared_ffn;
    if (!cfg.moe_renormalize) f["moe_raw_weights"] = 1;  // the chosen scores not renormalised
  }
  if (cfg.lora.enabled()) {  // the adapters' shapes: which layers, what rank
    const std::vector<std::string> names = lora_target_names(cfg.is_llama());
    int64_t mask = 0;
    for (size_t i = 0; i < names.size(); i++)
      for (const std::string& t : cfg.lora.targets)
        if (t == names[i]) mask |= int64_t(1) << i;
    f["lora_rank"] = cfg.lora.rank;
    f["lora_targets"] = mask;
    f["lora_bias_all"] = cfg.lora.train_biases ? 1 : 0;
  }
  return f;
}

std::map<std::string, double> model_real_fields(const ModelConfig& cfg) {
  std::map<std::string, double> f;
  if (cfg.lora.enabled()) f["lora_alpha"] = cfg.lora.alpha;
  if (!cfg.is_llama()) return f;
  f["rope_theta"] = cfg.rope_theta, f["norm_eps"] = cfg.norm_eps;
  if (cfg.rope_scaling.kind == RopeScaling::Kind::llama3) {
    f["rope_factor"] = cfg.rope_scaling.factor;
    f["rope_low_freq_factor"] = cfg.rope_scaling.low_freq_factor;
    f["rope_high_freq_factor"] = cfg.rope_scaling.high_freq_factor;
  }
  return f;
}

ModelConfig model_config_from_fields(const std::map<std::string, int64_t>& fields,
                                     const std::map<std::string, double>& real, const std::string& origin) {
  auto get = [&](const char* key) {
    auto it = fields.find(key);
    LOOM_USER_CHECK(it != fields.end(), "%s: model field '%s' is missing", origin.c_str(), key);
    LOOM_USER_CHECK(it->second >= 0 && it->second < (int64_t(1) << 31), "%s: model field '%s' = %lld is out of range",
                    origin.c_str(), key, (long long)it->second);
    return int(it->second);
  };
  ModelConfig c;
  const auto family = fields.find("family");
  LOOM_USER_CHECK(family == fields.end() || family->second == 0 || family->second == 1,
                  "%s: model field 'family' must be 0 (gpt2) or 1 (llama)", origin.c_str());
  c.family = family != fields.end() && family->second == 1 ? ModelFamily::llama : ModelFamily::gpt2;
  c.vocab_size = get("vocab_size");
  c.n_layer = get("n_layer");
  c.n_head = get("n_head");
  c.d_model = get("d_model");
  c.seq_len = get("seq_len");
  if (c.is_llama()) {
    c.n_kv_head = get("n_kv_head");
    c.ffn_hidden = get("ffn_hidden");
    c.tie_embeddings = get("tie_embeddings") != 0;
    auto real_field = [&](const char* key, double* field) {
      auto it = real.find(key);
      LOOM_USER_CHECK(it != real.end(), "%s: model field '%s' (model_real) is missing", origin.c_str(), key);
      *field = it->second;
    };
    real_field("rope_theta", &c.rope_theta);
    real_field("norm_eps", &c.norm_eps);
    c.qkv_bias = fields.count("qkv_bias") && get("qkv_bias") != 0;
    if (fields.count("rope_scaling") && get("rope_scaling") == 1) {
      c.rope_scaling.kind = RopeScaling::Kind::llama3;
      c.rope_scaling.original_max_positions = get("rope_original_max_positions");
      real_field("rope_factor", &c.rope_scaling.factor);
      real_field("rope_low_freq_factor", &c.rope_scaling.low_freq_factor);
      real_field("rope_high_freq_factor", &c.rope_scaling.high_freq_factor);
    }
  }
  if (fields.count("n_experts")) {
    c.n_experts = get("n_experts"), c.top_k = get("top_k");
    c.moe_ffn_hidden = get("moe_ffn_hidden"), c.moe_every = get("moe_every");
    c.moe_sigmoid = fields.count("moe_sigmoid") && get("moe_sigmoid") != 0;
    c.moe_shared_ffn = fields.count("moe_shared_ffn") ? int(get("moe_shared_ffn")) : 0;
    c.moe_renormalize = !(fields.count("moe_raw_weights") && get("moe_raw_weights") != 0);
  }
  if (fields.count("lora_rank")) {
    c.lora.rank = get("lora_rank");
    const std::vector<std::string> names = lora_target_names(c.is_llama());
    const int mask = get("lora_targets");
    for (size_t i = 0; i < names.size(); i++)
      if (mask & (1 << i)) c.lora.targets.push_back(names[i]);
    c.lora.train_biases = fields.count("lora_bias_all") && get("lora_bias_all") != 0;
    auto alpha = real.find("lora_alpha");
    LOOM_USER_CHECK(alpha != real.end(), "%s: model field 'lora_alpha' (model_real) is missing", origin.c_str());
    c.lora.alpha = alpha->second;
  }
  c.validate();
  return c;
}

}  // namespace loom
