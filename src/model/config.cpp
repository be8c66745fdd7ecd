#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace loom {

const char* model_family_name(ModelFamily f) { return f == ModelFamily::llama ? "llama" : "gpt2"; }

std::optional<ModelFamily> parse_model_family(const std::string& name) {
  if (name == "gpt2") return ModelFamily::gpt2;
  if (name == "llama") return ModelFamily::llama;
  return std::nullopt;
}

int ModelConfig::ffn() const {
  if (ffn_hidden > 0) return ffn_hidden;
  if (family == ModelFamily::gpt2) return 4 * d_model;
  // LLaMA: 2/3 of 4 d_model, rounded up to a multiple of ffn_multiple_of.
  const int64_t m = ffn_multiple_of > 0 ? ffn_multiple_of : 1;
  const int64_t want = 8 * int64_t(d_model) / 3;
  return int((want + m - 1) / m * m);
}

const char* attention_kind_name(AttentionKind k) {
  return k == AttentionKind::tiled ? "tiled" : k == AttentionKind::materialized ? "materialized" : "auto";
}

std::optional<AttentionKind> parse_attention_kind(const std::string& name) {
  for (AttentionKind k : {AttentionKind::auto_, AttentionKind::tiled, AttentionKind::materialized})
    if (name == attention_kind_name(k)) return k;
  return std::nullopt;
}

const char* rope_scaling_name(RopeScaling::Kind k) { return k == RopeScaling::Kind::llama3 ? "llama3" : "none"; }

std::optional<RopeScaling::Kind> parse_rope_scaling(const std::string& name) {
  for (RopeScaling::Kind k : {RopeScaling::Kind::none, RopeScaling::Kind::llama3})
    if (name == rope_scaling_name(k)) return k;
  return std::nullopt;
}

const char* moe_balance_name(MoeBalance b) {
  switch (b) {
    case MoeBalance::aux_free: return "aux_free";
    case MoeBalance::sequence: return "sequence";
    case MoeBalance::switch_: return "switch";
    default: return "none";
  }
}

std::optional<MoeBalance> parse_moe_balance(const std::string& name) {
  for (MoeBalance b : {MoeBalance::aux_free, MoeBalance::sequence, MoeBalance::switch_, MoeBalance::none})
    if (name == moe_balance_name(b)) return b;
  return std::nullopt;
}

std::vector<double> ModelConfig::rope_inverse_frequencies() const {
  const int hd = head_dim();
  std::vector<double> inv(size_t(hd / 2));
  for (int i = 0; i < hd / 2; i++) inv[size_t(i)] = std::pow(rope_theta, -2.0 * i / hd);
  if (rope_scaling.kind != RopeScaling::Kind::llama3) return inv;
  // Llama 3.1: long wavelengths stretched by factor, short ones kept, a
  // linear blend (in 1 / wavelength) between.
  const RopeScaling& r = rope_scaling;
  const double old_len = r.original_max_positions;
  const double low_freq_wavelen = old_len / r.low_freq_factor, high_freq_wavelen = old_len / r.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * M_PI / f;
    if (wavelen > low_freq_wavelen) {
      f /= r.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      f = (1 - smooth) * f / r.factor + smooth * f;
    }
  }
  return inv;
}

void ModelConfig::validate() const {
  auto positive = [](int v, const char* field) {
    LOOM_USER_CHECK(v > 0, "config field '%s' must be > 0 (got %d)", field, v);
  };
  positive(vocab_size, "model.vocab_size");
  positive(n_layer, "model.n_layer");
  positive(n_head, "model.n_head");
  positive(d_model, "model.d_model");
  positive(seq_len, "model.seq_len");
  LOOM_USER_CHECK(d_model % n_head == 0,
                  "config field 'model.d_model' (%d) must be divisible by 'model.n_head' (%d)", d_model, n_head);
  // Sanity bounds: far beyond any model this code can hold, and they keep
  // the layout and size arithmetic below from overflowing.
  LOOM_USER_CHECK(n_layer <= 4096, "config field 'model.n_layer' is too large (%d > 4096)", n_layer);
  LOOM_USER_CHECK(d_model <= 65536, "config field 'model.d_model' is too large (%d > 65536)", d_model);
  LOOM_USER_CHECK(seq_len <= (1 << 20), "config field 'model.seq_len' is too large (%d > 1048576)", seq_len);
  // int32 tokens and int offsets inside kernels.
  LOOM_USER_CHECK(vocab_size <= (1 << 30), "config field 'model.vocab_size' is too large (%d)", vocab_size);
  LOOM_USER_CHECK(int64_t(seq_len) * d_model <= (int64_t(1) << 31),
                  "config fields 'model.seq_len' x 'model.d_model' are too large");
  LOOM_USER_CHECK(n_kv_head >= 0, "config field 'model.n_kv_head' must be >= 0 (0 = model.n_head), got %d",
                  n_kv_head);
  LOOM_USER_CHECK(ffn_hidden >= 0 && ffn_hidden <= (1 << 20),
                  "config field 'model.ffn_hidden' must be in [1, 1048576] (0 = the family's rule), got %d",
                  ffn_hidden);
  LOOM_USER_CHECK(ffn_multiple_of >= 1 && ffn_multiple_of <= 65536,
                  "config field 'model.ffn_multiple_of' must be in [1, 65536], got %d", ffn_multiple_of);
  LOOM_USER_CHECK(tie_embeddings >= -1 && tie_embeddings <= 1, "config field 'model.tie_embeddings' must be a boolean");
  LOOM_USER_CHECK(std::isfinite(norm_eps) && norm_eps > 0 && norm_eps < 1,
                  "config field 'model.norm_eps' must be in (0, 1), got %g", norm_eps);
  LOOM_USER_CHECK(std::isfinite(rope_theta) && rope_theta > 1 && rope_theta < 1e12,
                  "config field 'model.rope_theta' must be in (1, 1e12), got %g", rope_theta);
  if (family == ModelFamily::gpt2) {
    // GPT-2 has none of these: refuse rather than silently train something else.
    LOOM_USER_CHECK(kv_heads() == n_head,
                    "config field 'model.n_kv_head' (%d) is LLaMA's: GPT-2 has n_head key/value heads "
                    "(set model.family = \"llama\" for grouped-query attention)",
                    n_kv_head);
    LOOM_USER_CHECK(ffn_hidden == 0 || ffn_hidden == 4 * d_model,
                    "config field 'model.ffn_hidden' (%d) is LLaMA's: GPT-2's MLP is 4 x d_model = %d wide",
                    ffn_hidden, 4 * d_model);
    LOOM_USER_CHECK(tied(), "config field 'model.tie_embeddings' = false is LLaMA's: GPT-2's head is the token table");
    LOOM_USER_CHECK(norm_eps == 1e-5, "config field 'model.norm_eps' is LLaMA's: GPT-2's LayerNorm uses 1e-5");
    LOOM_USER_CHECK(rope_theta == 10000.0, "config field 'model.rope_theta' is LLaMA's: GPT-2 has learned positions");
    LOOM_USER_CHECK(rope_scaling.kind == RopeScaling::Kind::none,
                    "config field 'model.rope_scaling' is LLaMA's: GPT-2 has learned positions");
    LOOM_USER_CHECK(!qkv_bias, "config field 'model.qkv_bias' is LLaMA's: GPT-2 always has its biases");
  } else {
    if (rope_scaling.kind == RopeScaling::Kind::llama3) {
      const RopeScaling& r = rope_scaling;
      LOOM_USER_CHECK(std::isfinite(r.factor) && r.factor >= 1 && r.factor <= 1e6,
                      "config field 'model.rope_factor' must be in [1, 1e6], got %g", r.factor);
      LOOM_USER_CHECK(std::isfinite(r.low_freq_factor) && r.low_freq_factor > 0,
                      "config field 'model.rope_low_freq_factor' must be > 0, got %g", r.low_freq_factor);
      LOOM_USER_CHECK(std::isfinite(r.high_freq_factor) && r.high_freq_factor > r.low_freq_factor,
                      "config field 'model.rope_high_freq_factor' (%g) must be above model.rope_low_freq_factor (%g)",
                      r.high_freq_factor, r.low_freq_factor);
      LOOM_USER_CHECK(r.original_max_positions >= 1,
                      "config field 'model.rope_original_max_positions' must be >= 1, got %d",
                      r.original_max_positions);
    }
    LOOM_USER_CHECK(n_head % kv_heads() == 0,
                    "config field 'model.n_head' (%d) must be divisible by 'model.n_kv_head' (%d): each key/value "
                    "head serves the same number of query heads",
                    n_head, kv_heads());
    LOOM_USER_CHECK(head_dim() % 2 == 0,
                    "rotary positions rotate pairs of features: the head dimension model.d_model / model.n_head = "
                    "%d must be even",
                    head_dim());
  }
  if (n_experts != 0 || moe_ffn_hidden != 0) {
    LOOM_USER_CHECK(is_llama(), "config field 'model.n_experts': experts are the mixtral family's (model.family = "
                                "\"mixtral\": LLaMA's attention with a mixture-of-experts MLP)");
    LOOM_USER_CHECK(n_experts >= 1 && n_experts <= 256, "config field 'model.n_experts' must be in [1, 256] (got %d)",
                    n_experts);
    LOOM_USER_CHECK(top_k >= 1 && top_k <= std::min(n_experts, 64),
                    "config field 'model.top_k' must be in [1, min(model.n_experts, 64)] = [1, %d] (got %d)",
                    std::min(n_experts, 64), top_k);
    LOOM_USER_CHECK(moe_every >= 1 && moe_every <= n_layer,
                    "config field 'model.moe_every' must be in [1, model.n_layer] (got %d)", moe_every);
    LOOM_USER_CHECK(std::isfinite(moe_bias_rate) && moe_bias_rate >= 0 && moe_bias_rate < 1,
                    "config field 'model.moe_bias_rate' must be in [0, 1) (got %g)", moe_bias_rate);
    LOOM_USER_CHECK(std::isfinite(moe_aux_coef) && moe_aux_coef >= 0,
                    "config field 'model.moe_aux_coef' must be a number >= 0 (got %g)", moe_aux_coef);
    LOOM_USER_CHECK(std::isfinite(moe_z_coef) && moe_z_coef >= 0,
                    "config field 'model.moe_z_coef' must be a number >= 0 (got %g)", moe_z_coef);
    LOOM_USER_CHECK(!moe_sigmoid || moe_balance != MoeBalance::switch_,
                    "config field 'model.moe_balance': \"switch\" is Mixtral's loss on softmax probabilities; with "
                    "model.moe_router = \"sigmoid\" use \"aux_free\" or \"sequence\"");
    LOOM_USER_CHECK(moe_shared_ffn >= 0, "config field 'model.moe_shared_ffn' must be >= 0 (got %d)", moe_shared_ffn);
    LOOM_USER_CHECK(moe_ffn_hidden >= 0, "config field 'model.moe_ffn_hidden' must be >= 0 (got %d)", moe_ffn_hidden);
  }
  validate_lora(lora, *this);
}

int64_t ModelConfig::num_parameters() const {
  const int64_t C = d_model, L = n_layer, F = ffn(), V = vocab_size;
  if (family == ModelFamily::llama) {
    // Norms, fused q/k/v (and its bias, Qwen2), output projection, gate/up and down.
    const int64_t per_layer = 2 * C + qkv_rows() * (C + (qkv_bias ? 1 : 0)) + C * C + 3 * F * C;
    // An MoE block's MLP: the router and every expert's gate/up and down.
    const int64_t moe_layers = is_moe() ? L / moe_every : 0;
    const int64_t moe_mlp = int64_t(n_experts) * C + int64_t(n_experts) * 3 * expert_ffn() * C +
                            (moe_shared_ffn > 0 ? 3 * int64_t(moe_shared_ffn) * C + C : 0);
    return V * C * (tied() ? 1 : 2) + L * per_layer + moe_layers * (moe_mlp - 3 * F * C) + C;
  }
  const int64_t per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (F * C + F) + (F * C + C);
  return V * C + int64_t(seq_len) * C + L * per_layer + 2 * C;
}

double ModelConfig::train_flops_per_token(int T) const {
  // Lookups do no multiply-adds: GPT-2's position table, and an untied
  // token table (its head is a separate matrix that does).
  const int64_t lookups = family == ModelFamily::gpt2 ? int64_t(seq_len) * d_model
                          : tied()                    ? 0
                                                      : int64_t(vocab_size) * d_model;
  double n = double(num_parameters() - lookups);
  // A mixture of experts: each token runs top_k of the n_experts experts.
  if (is_moe())
    n -= double(n_layer / moe_every) * double(n_experts - top_k) * 3.0 * expert_ffn() * d_model;
  // LoRA: the frozen base's products run forward and for the input
  // gradient (4 N), never for its weight gradient; the adapters all three.
  const double products = lora.enabled() ? 4.0 * n + 6.0 * double(lora_parameters(*this)) : 6.0 * n;
  return products + 12.0 * n_layer * d_model * double(T);
}

}  // namespace loom
