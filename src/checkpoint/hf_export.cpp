#include "checkpoint/hf_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>
#include <utility>

#include "checkpoint/checkpoint_model.h"
#include "checkpoint/model_fields.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/dtype.h"
#include "model/hf_names.h"
#include "model/moe/router_state.h"

namespace loom {
namespace {

struct HfTensor {
  std::string hf_name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<uint16_t> narrow;  // the values in BF16/F16 when asked
};

// [rows, cols] -> [cols, rows]
std::vector<float> transposed(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) t[size_t(c * rows + r)] = a[size_t(r * cols + c)];
  return t;
}

// The HF tensors, read from a checkpoint's global parameters.
class HfTensors {
 public:
  HfTensors(const GlobalTensors& model, std::string origin) : model_(model), origin_(std::move(origin)) {}

  // Parameter `loom_name` of shape `shape` as `hf_name`, transposed
  // ([out, in] -> [in, out]) when asked.
  void add(const std::string& loom_name, const std::vector<int64_t>& shape, const std::string& hf_name,
           bool transpose = false) {
    HfTensor h{hf_name, shape, read(loom_name, shape), {}};
    if (transpose) {
      h.values = transposed(h.values, shape[0], shape[1]);
      std::swap(h.shape[0], h.shape[1]);
    }
    out_.push_back(std::move(h));
  }

  // Parameter `loom_name` of shape `shape` ([rows, cols], or [rows]: a
  // vector) cut by rows into consecutive tensors: (HF name, rows) in order,
  // covering every row.
  void add_rows(const std::string& loom_name, const std::vector<int64_t>& shape,
                const std::vector<std::pair<std::string, int64_t>>& parts) {
    const std::vector<float> all = read(loom_name, shape);
    const bool vector = shape.size() == 1;
    const int64_t cols = vector ? 1 : shape[1];
    int64_t row0 = 0;
    for (const auto& [hf_name, rows] : parts) {
      const auto begin = all.begin() + row0 * cols;
      out_.push_back(HfTensor{hf_name, vector ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols},
                              std::vector<float>(begin, begin + rows * cols), {}});
      row0 += rows;
    }
    LOOM_CHECK(row0 == shape[0], "%s: the parts cover %lld of %lld rows", loom_name.c_str(), (long long)row0,
               (long long)shape[0]);
  }

  // A tensor of zeros loom has no parameter for (Qwen2MoeForCausalLM's q/k/v
  // biases of a model without them).
  void add_zeros(const std::string& hf_name, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out_.push_back(HfTensor{hf_name, shape, std::vector<float>(size_t(n), 0.f), {}});
  }

  // The safetensors entries, in `dtype` (F32, BF16 or F16).
  std::vector<StEntry> entries(StDType dtype) {
    std::vector<StEntry> e;
    for (HfTensor& h : out_) {
      StEntry s{h.hf_name, dtype, h.shape, h.values.data()};
      if (dtype != StDType::F32) {
        h.narrow.resize(h.values.size());
        if (dtype == StDType::BF16) convert_f32_to_bf16(reinterpret_cast<bf16*>(h.narrow.data()), h.values.data(), h.values.size());
        else convert_f32_to_f16(reinterpret_cast<f16*>(h.narrow.data()), h.values.data(), h.values.size());
        s.data = h.narrow.data();
      }
      e.push_back(s);
    }
    return e;
  }

 private:
  std::vector<float> read(const std::string& loom_name, const std::vector<int64_t>& shape) const {
    LOOM_USER_CHECK(model_.has(loom_name), "%s has no parameter '%s'", origin_.c_str(), loom_name.c_str());
    LOOM_USER_CHECK(model_.global_shape(loom_name) == shape,
                    "%s: parameter '%s' does not have the shape its model needs", origin_.c_str(), loom_name.c_str());
    return model_.read_global(loom_name);
  }

  const GlobalTensors& model_;
  std::string origin_;
  std::vector<HfTensor> out_;
};

// Every tensor of the family's name table (model/hf_names.h).
void add_all(HfTensors& t, const ModelConfig& cfg) {
  for (const HfTensorMap& m : hf_tensor_map(cfg)) {
    if (m.parts.size() > 1) {
      std::vector<std::pair<std::string, int64_t>> parts;
      for (const HfPart& p : m.parts) parts.push_back({p.name, p.rows});
      t.add_rows(m.loom, m.shape, parts);
    } else {
      t.add(m.loom, m.shape, m.parts[0].name, m.transpose);
    }
  }
}

nlohmann::ordered_json token_id(std::optional<int> id) { return id ? nlohmann::ordered_json(*id) : nullptr; }

nlohmann::ordered_json gpt2_config(const ModelConfig& cfg) {
  return {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", cfg.vocab_size},
      {"n_positions", cfg.seq_len},
      {"n_ctx", cfg.seq_len},
      {"n_embd", cfg.d_model},
      {"n_layer", cfg.n_layer},
      {"n_head", cfg.n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
  };
}

nlohmann::ordered_json rope_scaling_json(const RopeScaling& r) {
  if (r.kind == RopeScaling::Kind::none) return nullptr;
  return {{"rope_type", rope_scaling_name(r.kind)},
          {"factor", r.factor},
          {"low_freq_factor", r.low_freq_factor},
          {"high_freq_factor", r.high_freq_factor},
          {"original_max_position_embeddings", r.original_max_positions}};
}

// LLaMA's shape as LlamaForCausalLM, or, with q/k/v biases, as
// Qwen2ForCausalLM (Qwen2 is LLaMA with exactly those biases).
nlohmann::ordered_json llama_config(const ModelConfig& cfg) {
  const bool qwen2 = cfg.qkv_bias;
  nlohmann::ordered_json j = {
      {"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", qwen2 ? "qwen2" : "llama"},
      {"vocab_size", cfg.vocab_size},
      {"hidden_size", cfg.d_model},
      {"intermediate_size", cfg.ffn()},
      {"num_hidden_layers", cfg.n_layer},
      {"num_attention_heads", cfg.n_head},
      {"num_key_value_heads", cfg.kv_heads()},
      {"max_position_embeddings", cfg.seq_len},
      {"rms_norm_eps", cfg.norm_eps},
      {"rope_theta", cfg.rope_theta},
      {"rope_scaling", rope_scaling_json(cfg.rope_scaling)},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", cfg.tied()},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"use_cache", true},
  };
  if (hf_qwen2_moe(cfg)) {  // Qwen2MoeForCausalLM: q/k/v biases, a shared expert, MoE every moe_every-th block
    j["architectures"] = {"Qwen2MoeForCausalLM"};
    j["model_type"] = "qwen2_moe";
    j["moe_intermediate_size"] = cfg.expert_ffn();
    j["shared_expert_intermediate_size"] = cfg.moe_shared_ffn;
    j["num_experts"] = cfg.n_experts;
    j["num_experts_per_tok"] = cfg.top_k;
    j["decoder_sparse_step"] = cfg.moe_every;
    j["norm_topk_prob"] = cfg.moe_renormalize;
    j["mlp_only_layers"] = nlohmann::ordered_json::array();
    j["qkv_bias"] = true;  // transformers 4.x always has them; a model without writes zeros
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.0;
    j["use_sliding_window"] = false;
  } else if (cfg.is_moe()) {  // MixtralForCausalLM: LLaMA's attention, experts in every block
    j["architectures"] = {"MixtralForCausalLM"};
    j["model_type"] = "mixtral";
    j["intermediate_size"] = cfg.expert_ffn();
    j["num_local_experts"] = cfg.n_experts;
    j["num_experts_per_tok"] = cfg.top_k;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.0;
    j["router_jitter_noise"] = 0.0;
    j["sliding_window"] = nullptr;
    j["head_dim"] = cfg.head_dim();
  } else if (qwen2) {
    j["use_sliding_window"] = false;
  } else {
    j["head_dim"] = cfg.head_dim();  // read by transformers >= 4.45; older ones derive the same
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  return j;
}

}  // namespace

RunData run_data(const CheckpointManifest& m, const std::string& origin) {
  toml::table config;
  try {
    config = toml::parse(m.config_toml);
  } catch (const toml::parse_error& e) {
    throw UserError(strprintf("%s: the run config it records does not parse: %s", origin.c_str(),
                              std::string(e.description()).c_str()));
  }
  return {config.at_path("data.format").value_or(std::string("shards")),
          config.at_path("data.path").value_or(std::string(".cache/data"))};
}

std::string parameter_key(const Checkpoint& ckpt, const std::string& name) {
  const ShardedTensors& t = ckpt.tensors();
  if (t.has(name)) return name;
  if (t.has("master." + name)) return "master." + name;
  throw UserError(strprintf("checkpoint '%s' has no parameter '%s'", ckpt.dir().c_str(), name.c_str()));
}

std::vector<float> read_parameter(const Checkpoint& ckpt, const std::string& name) {
  return ckpt.tensors().read_global(parameter_key(ckpt, name));
}

HfExportResult export_hf(const Checkpoint& ckpt, const std::string& out_dir, const HfExportOptions& opt) {
  const CheckpointModel model(ckpt, opt.base_dir);
  const ModelConfig& cfg = model.config();
  LOOM_USER_CHECK(!hf_qwen2_moe(cfg) || cfg.moe_shared_ffn > 0,
                  "export: checkpoint '%s' is a mixture of experts MixtralForCausalLM cannot hold (model.moe_every "
                  "= %d, model.qkv_bias = %s, model.moe_renormalize = %s), and Qwen2MoeForCausalLM, which can, has "
                  "a shared expert in every MoE block: model.moe_shared_ffn is 0",
                  ckpt.dir().c_str(), cfg.moe_every, cfg.qkv_bias ? "true" : "false",
                  cfg.moe_renormalize ? "true" : "false");
  LOOM_USER_CHECK(!cfg.moe_sigmoid,
                  "export: checkpoint '%s' routes by sigmoid scores (model.moe_router = \"sigmoid\"): "
                  "MixtralForCausalLM's and Qwen2MoeForCausalLM's routers are a softmax",
                  ckpt.dir().c_str());
  if (cfg.is_moe() && !opt.drop_router_bias)
    for (int l = 0; l < cfg.n_layer; l++) {
      const std::string name = moe::RouterState::bias_name(l);
      if (!ckpt.tensors().has(name)) continue;
      float most = 0;
      for (float b : ckpt.tensors().read_global(name)) most = std::max(most, std::fabs(b));
      LOOM_USER_CHECK(most == 0,
                      "export: checkpoint '%s' routes with balancing biases (model.moe_balance = \"aux_free\"; "
                      "layer %d's largest is %g), which MixtralForCausalLM and Qwen2MoeForCausalLM have no place "
                      "for: pass "
                      "--drop-router-bias to export without them (the exported model then chooses experts by the "
                      "router's softmax alone, so some tokens may route differently)",
                      ckpt.dir().c_str(), l, double(most));
    }
  if (!cfg.lora.enabled()) return export_hf(model, cfg, ckpt.manifest().step, "checkpoint '" + ckpt.dir() + "'", out_dir, opt);
  LOOM_USER_CHECK(opt.merge_lora,
                  "export: checkpoint '%s' holds LoRA adapters: --format hf writes a plain model, so it needs --merge "
                  "(the adapters folded into the base); --format peft writes the adapters alone",
                  ckpt.dir().c_str());
  const MergedLora merged(model, cfg);
  return export_hf(merged, merged.config(), ckpt.manifest().step, "checkpoint '" + ckpt.dir() + "' merged", out_dir,
                   opt);
}

HfExportResult export_hf(const GlobalTensors& model, const ModelConfig& cfg, int64_t step, const std::string& origin,
                         const std::string& out_dir, const HfExportOptions& opt) {
  LOOM_USER_CHECK(opt.dtype != StDType::I32, "export: weights cannot be I32");
  for (std::optional<int> id : {opt.tokens.bos, opt.tokens.eos})
    LOOM_USER_CHECK(!id || (*id >= 0 && *id < cfg.vocab_size), "export: token id %d is outside the model's vocabulary of %d",
                    *id, cfg.vocab_size);

  HfTensors tensors(model, origin);
  add_all(tensors, cfg);
  if (hf_qwen2_moe(cfg) && !cfg.qkv_bias)
    for (int l = 0; l < cfg.n_layer; l++) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      const int64_t q = int64_t(cfg.n_head) * cfg.head_dim(), kv = int64_t(cfg.kv_heads()) * cfg.head_dim();
      tensors.add_zeros(p + "q_proj.bias", {q}), tensors.add_zeros(p + "k_proj.bias", {kv});
      tensors.add_zeros(p + "v_proj.bias", {kv});
    }
  const std::vector<StEntry> entries = tensors.entries(opt.dtype);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  LOOM_USER_CHECK(!ec, "export: cannot create '%s': %s", out_dir.c_str(), ec.message().c_str());
  HfExportResult r;
  r.weights_path = out_dir + "/model.safetensors";
  r.config_path = out_dir + "/config.json";
  // transformers refuses safetensors files whose metadata lacks format "pt".
  WrittenFile w = write_safetensors(r.weights_path, entries, {{"format", "pt"}});
  r.tensors = int(entries.size());
  r.bytes = w.bytes;

  nlohmann::ordered_json config = cfg.is_llama() ? llama_config(cfg) : gpt2_config(cfg);
  config["bos_token_id"] = token_id(opt.tokens.bos);
  config["eos_token_id"] = token_id(opt.tokens.eos);
  // transformers 4.56+ reads `dtype` (5.x deprecates `torch_dtype`); older versions read only `torch_dtype`.
  const char* dtype = opt.dtype == StDType::F32 ? "float32" : opt.dtype == StDType::BF16 ? "bfloat16" : "float16";
  config["dtype"] = dtype;
  config["torch_dtype"] = dtype;
  config["loom_checkpoint_step"] = step;
  write_file_atomically(r.config_path, config.dump(2) + "\n");
  return r;
}

}  // namespace loom
