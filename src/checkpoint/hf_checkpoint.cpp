#include "checkpoint/hf_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/regular_file.h"

namespace loom {
namespace {

using Json = nlohmann::json;

Json read_json(const std::string& path) {
  require_regular_file(path, "Hugging Face checkpoint file");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Json::exception& e) {
    throw UserError(strprintf("%s: not valid JSON: %s", path.c_str(), e.what()));
  }
}

// The fields of config.json loom reads, each checked, and the rest refused
// unless known not to change the math.
class ConfigFields {
 public:
  ConfigFields(const Json& j, std::string path) : j_(j), path_(std::move(path)) {
    LOOM_USER_CHECK(j.is_object(), "%s: expected a JSON object", path_.c_str());
  }
  bool present(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) {
    used_.insert(key);
    if (!present(key)) {
      LOOM_USER_CHECK(fallback.has_value(), "%s: field '%s' is missing", path_.c_str(), key);
      return *fallback;
    }
    const Json& v = j_.at(key);
    LOOM_USER_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() < (int64_t(1) << 31),
                    "%s: field '%s' must be a positive integer below 2^31", path_.c_str(), key);
    return v.get<int64_t>();
  }
  double number(const char* key, double fallback) {
    used_.insert(key);
    if (!present(key)) return fallback;
    const Json& v = j_.at(key);
    LOOM_USER_CHECK(v.is_number() && std::isfinite(v.get<double>()), "%s: field '%s' must be a finite number",
                    path_.c_str(), key);
    return v.get<double>();
  }
  bool flag(const char* key, bool fallback) {
    used_.insert(key);
    if (!present(key)) return fallback;
    LOOM_USER_CHECK(j_.at(key).is_boolean(), "%s: field '%s' must be true or false", path_.c_str(), key);
    return j_.at(key).get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) {
    used_.insert(key);
    if (!present(key)) return fallback;
    LOOM_USER_CHECK(j_.at(key).is_string(), "%s: field '%s' must be a string", path_.c_str(), key);
    return j_.at(key).get<std::string>();
  }
  // The field must hold `want` (or be absent): another value changes the math.
  template <class T>
  void require(const char* key, const T& value, const T& want, const char* why) {
    LOOM_USER_CHECK(value == want, "%s: field '%s' is not supported with this value (%s)", path_.c_str(), key, why);
  }
  void ignore(std::initializer_list<const char*> keys) {
    for (const char* k : keys) used_.insert(k);
  }
  // Fields no rule read: refused, naming the first.
  void refuse_unknown() const {
    for (const auto& [key, value] : j_.items())
      LOOM_USER_CHECK(used_.count(key) != 0,
                      "%s: field '%s' is not one loom understands (it may change the model's math); "
                      "remove it if it does not",
                      path_.c_str(), key.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  const Json& j_;
  std::string path_;
  std::set<std::string> used_;
};

// What every config.json may hold without changing the math.
const std::initializer_list<const char*> kBookkeeping = {
    "architectures", "model_type", "_name_or_path", "transformers_version", "torch_dtype", "dtype",
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range", "loom_checkpoint_step",
    "output_attentions", "output_hidden_states", "return_dict", "tokenizer_class", "task_specific_params"};

void read_gpt2(ConfigFields& f, HfModelConfig& out) {
  ModelConfig& m = out.model;
  m.family = ModelFamily::gpt2;
  m.vocab_size = int(f.integer("vocab_size"));
  m.seq_len = int(f.integer("n_positions"));
  m.d_model = int(f.integer("n_embd"));
  m.n_layer = int(f.integer("n_layer"));
  m.n_head = int(f.integer("n_head"));
  const int64_t inner = f.integer("n_inner", 4 * int64_t(m.d_model));
  f.require("n_inner", inner, 4 * int64_t(m.d_model), "loom's GPT-2 MLP is 4 x n_embd wide");
  const std::string act = f.text("activation_function", "gelu_new");
  f.require("activation_function", act == "gelu_new" || act == "gelu_pytorch_tanh", true,
            "loom's GPT-2 uses the tanh GELU: gelu_new or gelu_pytorch_tanh");
  f.require("layer_norm_epsilon", std::abs(f.number("layer_norm_epsilon", 1e-5) - 1e-5) < 1e-12, true,
            "loom's GPT-2 layer norms use epsilon 1e-5");
  f.require("scale_attn_weights", f.flag("scale_attn_weights", true), true, "attention scaled by 1/sqrt(head_dim)");
  f.require("scale_attn_by_inverse_layer_idx", f.flag("scale_attn_by_inverse_layer_idx", false), false,
            "no per-layer attention scaling");
  f.require("add_cross_attention", f.flag("add_cross_attention", false), false, "a decoder-only model");
  f.require("tie_word_embeddings", f.flag("tie_word_embeddings", true), true, "GPT-2's head is its token table");
  f.flag("reorder_and_upcast_attn", false);  // fp32 attention scores: loom keeps them in fp32 anyway
  f.ignore({"n_ctx", "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
            "summary_first_dropout"});
  for (const char* dropout : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
    if (f.number(dropout, 0) != 0) out.notes.push_back(std::string(dropout) + " ignored: loom trains without dropout");
}

// Rotary settings: transformers 4.x's rope_scaling (null, or a rope_type /
// older "type" with its parameters), or 5.x's rope_parameters (rope_type,
// rope_theta and the same parameters). Only the default and llama3 kinds.
void read_rope(const Json& r, const std::string& field, const std::string& path, ModelConfig& m) {
  LOOM_USER_CHECK(r.is_object(), "%s: field '%s' must be an object or null", path.c_str(), field.c_str());
  auto text = [&](const char* key, const char* fallback) {
    if (!r.contains(key)) return std::string(fallback);
    LOOM_USER_CHECK(r.at(key).is_string(), "%s: field '%s.%s' must be a string", path.c_str(), field.c_str(), key);
    return r.at(key).get<std::string>();
  };
  auto number = [&](const char* key) {
    LOOM_USER_CHECK(r.contains(key) && r.at(key).is_number() && std::isfinite(r.at(key).get<double>()),
                    "%s: field '%s.%s' must be a finite number", path.c_str(), field.c_str(), key);
    return r.at(key).get<double>();
  };
  const std::string type = text("rope_type", text("type", "default").c_str());
  std::set<std::string> known = {"rope_type", "type", "rope_theta"};
  if (r.contains("rope_theta")) m.rope_theta = number("rope_theta");
  if (type == "llama3") {
    RopeScaling& s = m.rope_scaling;
    s.kind = RopeScaling::Kind::llama3;
    s.factor = number("factor");
    s.low_freq_factor = number("low_freq_factor");
    s.high_freq_factor = number("high_freq_factor");
    const double original = number("original_max_position_embeddings");
    LOOM_USER_CHECK(original >= 1 && original < 1e9 && original == std::floor(original),
                    "%s: field '%s.original_max_position_embeddings' must be a positive integer", path.c_str(),
                    field.c_str());
    s.original_max_positions = int(original);
    known.insert({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  } else {
    LOOM_USER_CHECK(type == "default", "%s: field '%s' has rope_type '%s': only default and llama3 rotary "
                    "embeddings are supported", path.c_str(), field.c_str(), type.c_str());
  }
  for (const auto& [key, value] : r.items())
    LOOM_USER_CHECK(known.count(key) != 0, "%s: field '%s.%s' is not one loom understands for rope_type %s",
                    path.c_str(), field.c_str(), key.c_str(), type.c_str());
}

// LlamaForCausalLM, MistralForCausalLM and (qwen2) Qwen2ForCausalLM: one
// family; Qwen2 has q/k/v biases and none of LLaMA's bias switches.
void read_llama(ConfigFields& f, const Json& j, HfModelConfig& out, bool qwen2) {
  ModelConfig& m = out.model;
  m.family = ModelFamily::llama;
  m.vocab_size = int(f.integer("vocab_size"));
  m.d_model = int(f.integer("hidden_size"));
  m.ffn_hidden = int(f.integer("intermediate_size"));
  m.n_layer = int(f.integer("num_hidden_layers"));
  m.n_head = int(f.integer("num_attention_heads"));
  m.n_kv_head = int(f.integer("num_key_value_heads", m.n_head));
  m.seq_len = int(f.integer("max_position_embeddings"));
  m.norm_eps = f.number("rms_norm_eps", 1e-6);
  m.rope_theta = f.number("rope_theta", 10000.0);
  f.ignore({"rope_scaling", "rope_parameters"});
  if (f.present("rope_scaling")) read_rope(j.at("rope_scaling"), "rope_scaling", f.path(), m);
  if (f.present("rope_parameters")) read_rope(j.at("rope_parameters"), "rope_parameters", f.path(), m);
  f.require("hidden_act", f.text("hidden_act", "silu"), std::string("silu"), "SwiGLU with SiLU");
  m.tie_embeddings = f.flag("tie_word_embeddings", false) ? 1 : 0;
  if (qwen2) {
    m.qkv_bias = true;
    // Qwen2 slides its window only with use_sliding_window, from layer
    // max_window_layers on.
    f.ignore({"sliding_window", "max_window_layers"});
    const bool sliding = f.flag("use_sliding_window", false);
    if (sliding && f.present("sliding_window")) out.sliding_window = int(f.integer("sliding_window"));
    // transformers 5.x also writes each layer's kind, which says the same.
    if (f.present("layer_types")) {
      const Json& kinds = j.at("layer_types");
      LOOM_USER_CHECK(kinds.is_array(), "%s: field 'layer_types' must be a list", f.path().c_str());
      for (const Json& k : kinds) {
        const std::string kind = k.is_string() ? k.get<std::string>() : "";
        LOOM_USER_CHECK(kind == "full_attention" || (kind == "sliding_attention" && sliding),
                        "%s: field 'layer_types' holds '%s': loom's attention is full (or, with "
                        "use_sliding_window, the window checked against the sequence)",
                        f.path().c_str(), kind.c_str());
      }
      f.ignore({"layer_types"});
    }
  } else {
    const int64_t head_dim = f.integer("head_dim", m.d_model / m.n_head);
    f.require("head_dim", head_dim * m.n_head, int64_t(m.d_model),
              "loom's heads are hidden_size / num_attention_heads wide");
    f.require("attention_bias", f.flag("attention_bias", false), false, "no q/k/v/o biases");
    f.require("mlp_bias", f.flag("mlp_bias", false), false, "no MLP biases");
    f.require("pretraining_tp", f.integer("pretraining_tp", 1), int64_t(1), "pretraining_tp > 1 slices the products");
  }
  if (f.number("attention_dropout", 0) != 0) out.notes.push_back("attention_dropout ignored: loom trains without dropout");
}

}  // namespace

HfModelConfig read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const Json j = read_json(path);
  ConfigFields f(j, path);
  f.ignore(kBookkeeping);
  HfModelConfig out;
  LOOM_USER_CHECK(j.contains("architectures") && j.at("architectures").is_array() &&
                      j.at("architectures").size() == 1 && j.at("architectures")[0].is_string(),
                  "%s: field 'architectures' must list one architecture", path.c_str());
  out.architecture = j.at("architectures")[0].get<std::string>();
  if (out.architecture == "GPT2LMHeadModel") {
    read_gpt2(f, out);
  } else if (out.architecture == "LlamaForCausalLM" || out.architecture == "MistralForCausalLM" ||
             out.architecture == "Qwen2ForCausalLM" || out.architecture == "MixtralForCausalLM" ||
             out.architecture == "Qwen2MoeForCausalLM") {
    // Mistral is LLaMA's math and names with a sliding attention window,
    // which changes nothing while it covers the whole sequence; Qwen2 adds
    // q/k/v biases.
    const bool qwen2_moe = out.architecture == "Qwen2MoeForCausalLM";
    read_llama(f, j, out, out.architecture == "Qwen2ForCausalLM" || qwen2_moe);
    if (out.architecture == "MistralForCausalLM" || out.architecture == "MixtralForCausalLM") {
      f.ignore({"sliding_window"});
      if (f.present("sliding_window")) out.sliding_window = int(f.integer("sliding_window"));
    }
    if (out.architecture == "MixtralForCausalLM") {
      // Every block a mixture of experts of intermediate_size each.
      ModelConfig& m = out.model;
      m.n_experts = int(f.integer("num_local_experts"));
      m.top_k = int(f.integer("num_experts_per_tok"));
      m.moe_ffn_hidden = m.ffn_hidden;
      f.require("router_jitter_noise", f.number("router_jitter_noise", 0), 0.0, "routing without noise");
      f.ignore({"output_router_logits", "router_aux_loss_coef"});
      out.notes.push_back("router_aux_loss_coef ignored: loom's balancing is its own (model/moe/)");
    }
    if (qwen2_moe) {
      // MoE blocks every decoder_sparse_step-th, each with a gated shared
      // expert; the dense ones of intermediate_size.
      ModelConfig& m = out.model;
      m.qkv_bias = f.flag("qkv_bias", true);  // transformers 5.x's switch; 4.x always has them
      m.n_experts = int(f.integer("num_experts"));
      m.top_k = int(f.integer("num_experts_per_tok"));
      m.moe_ffn_hidden = int(f.integer("moe_intermediate_size"));
      m.moe_shared_ffn = int(f.integer("shared_expert_intermediate_size"));
      LOOM_USER_CHECK(m.moe_shared_ffn > 0, "%s: field 'shared_expert_intermediate_size' must be > 0 (loom's MoE "
                      "blocks without a shared expert are MixtralForCausalLM's)", path.c_str());
      m.moe_every = int(f.integer("decoder_sparse_step", 1));
      m.moe_renormalize = f.flag("norm_topk_prob", false);
      if (f.present("mlp_only_layers")) {
        const Json& dense = j.at("mlp_only_layers");
        LOOM_USER_CHECK(dense.is_array() && dense.empty(), "%s: field 'mlp_only_layers' lists dense layers: loom "
                        "places its MoE blocks by decoder_sparse_step alone", path.c_str());
        f.ignore({"mlp_only_layers"});
      }
      f.ignore({"output_router_logits", "router_aux_loss_coef"});
      out.notes.push_back("router_aux_loss_coef ignored: loom's balancing is its own (model/moe/)");
    }
  } else {
    throw UserError(strprintf("%s: architecture '%s' is not supported (GPT2LMHeadModel, LlamaForCausalLM, "
                              "MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM)",
                              path.c_str(), out.architecture.c_str()));
  }
  f.refuse_unknown();
  try {
    out.model.validate();
  } catch (const UserError& e) {
    throw UserError(strprintf("%s: %s", path.c_str(), e.what()));
  }
  return out;
}

namespace {

// GPT-2 checkpoints are saved with or without the "transformer." prefix
// (GPT2LMHeadModel or GPT2Model): both are read as the same name.
std::string hf_key(const ModelConfig& m, const std::string& name) {
  const std::string prefix = "transformer.";
  if (!m.is_llama() && name.compare(0, prefix.size(), prefix) == 0) return name.substr(prefix.size());
  return name;
}

}  // namespace

std::unique_ptr<HfCheckpoint> HfCheckpoint::open(const std::string& dir, const ModelConfig& model) {
  auto ck = std::unique_ptr<HfCheckpoint>(new HfCheckpoint());
  ck->dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> listed;  // HF name -> shard file (sharded checkpoints)
  std::vector<std::string> files;
  if (std::filesystem::exists(index_path)) {
    const Json index = read_json(index_path);
    LOOM_USER_CHECK(index.is_object() && index.contains("weight_map") && index.at("weight_map").is_object(),
                    "%s: field 'weight_map' is missing", index_path.c_str());
    std::set<std::string> seen;
    for (const auto& [name, file] : index.at("weight_map").items()) {
      LOOM_USER_CHECK(file.is_string() && file.get<std::string>().find('/') == std::string::npos &&
                          !file.get<std::string>().empty(),
                      "%s: weight_map entry '%s' must name a file in the folder", index_path.c_str(), name.c_str());
      listed[name] = file.get<std::string>();
      if (seen.insert(file.get<std::string>()).second) files.push_back(file.get<std::string>());
    }
  } else {
    LOOM_USER_CHECK(std::filesystem::exists(dir + "/model.safetensors"),
                    "%s: neither model.safetensors nor model.safetensors.index.json (loom reads safetensors; "
                    "save with safe_serialization=True)",
                    dir.c_str());
    files.push_back("model.safetensors");
  }
  for (const std::string& file : files) {
    const std::string path = dir + "/" + file;
    require_regular_file(path, "Hugging Face checkpoint shard");
    ck->files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(path)));
    for (const auto& [name, info] : ck->files_.back()->tensors()) {
      const std::string key = hf_key(model, name);
      LOOM_USER_CHECK(ck->sources_.count(key) == 0, "%s: tensor '%s' is held twice (also as %s)", path.c_str(),
                      name.c_str(), key.c_str());
      ck->sources_[key] = Source{ck->files_.back().get(), &info};
    }
  }
  for (const auto& [name, file] : listed)
    LOOM_USER_CHECK(ck->sources_.count(hf_key(model, name)) != 0, "%s: lists tensor '%s' in %s, which does not hold it",
                    index_path.c_str(), name.c_str(), file.c_str());
  std::set<std::string> read;
  for (HfTensorMap& m : hf_tensor_map(model)) {
    const int64_t cols = m.shape.size() > 1 ? m.shape[1] : 1;
    for (HfPart& part : m.parts) {
      part.name = hf_key(model, part.name);
      const auto it = ck->sources_.find(part.name);
      LOOM_USER_CHECK(it != ck->sources_.end(), "%s: tensor '%s' is missing (loom's %s)", dir.c_str(),
                      part.name.c_str(), m.loom.c_str());
      const StTensorInfo& info = *it->second.info;
      const std::string where = it->second.file->path();
      LOOM_USER_CHECK(info.dtype != StDType::I32, "%s: tensor '%s' is I32; weights must be F32, BF16 or F16",
                      where.c_str(), part.name.c_str());
      std::vector<int64_t> want = m.shape;
      if (m.transpose) std::swap(want[0], want[1]);
      else want[0] = part.rows;
      bool ok = info.shape.size() == want.size();
      for (size_t d = 0; ok && d < want.size(); d++)
        ok = d == 0 && m.leading_rows ? info.shape[d] >= want[d] : info.shape[d] == want[d];
      auto dims = [](const std::vector<int64_t>& s) {
        std::string t;
        for (int64_t d : s) t += (t.empty() ? "" : ", ") + std::to_string(d);
        return "[" + t + "]";
      };
      LOOM_USER_CHECK(ok, "%s: tensor '%s' has shape %s; the model in config.json needs %s%s", where.c_str(),
                      part.name.c_str(), dims(info.shape).c_str(), dims(want).c_str(),
                      m.leading_rows ? " (or more rows)" : "");
      (void)cols;
      read.insert(part.name);
    }
    ck->maps_[m.loom] = m;
  }
  for (const auto& [key, source] : ck->sources_)
    if (!read.count(key) && !hf_ignored_tensor(model, key) && !hf_ignored_tensor(model, "transformer." + key))
      ck->unused_.push_back(key);
  return ck;
}

const std::vector<int64_t>& HfCheckpoint::global_shape(const std::string& name) const {
  const auto it = maps_.find(name);
  LOOM_USER_CHECK(it != maps_.end(), "%s: no tensor for loom's '%s'", dir_.c_str(), name.c_str());
  return it->second.shape;
}

const HfCheckpoint::Source& HfCheckpoint::source(const std::string& hf_name) const { return sources_.at(hf_name); }

void HfCheckpoint::read(const Source& s, int64_t first, int64_t n, float* out) const {
  s.file->read_floats(*s.info, first, n, out);
  bytes_read_ += uint64_t(n) * st_dtype_size(s.info->dtype);
}

uint64_t HfCheckpoint::file_bytes() const {
  uint64_t sum = 0;
  for (const auto& f : files_) sum += f->file_bytes();
  return sum;
}

void HfCheckpoint::read_region(const std::string& name, const std::vector<int64_t>& offset,
                               const std::vector<int64_t>& shape, float* out) const {
  const HfTensorMap& m = maps_.at(name);
  LOOM_CHECK(offset.size() == m.shape.size() && shape.size() == m.shape.size(), "%s: a box of another rank",
             name.c_str());
  for (size_t d = 0; d < shape.size(); d++)
    LOOM_CHECK(offset[d] >= 0 && offset[d] + shape[d] <= m.shape[d], "%s: a box outside the tensor", name.c_str());
  // A vector is one column: its elements are rows (of one part, or of
  // stacked parts: Qwen2's q/k/v biases).
  const bool vector = m.shape.size() == 1;
  const int64_t rows = shape[0], cols = vector ? 1 : shape[1], col0 = vector ? 0 : offset[1];
  if (m.transpose) {
    // HF holds [in, out]: loom's (r, c) is HF's (c, r); each HF row is a loom column.
    const Source& s = source(m.parts[0].name);
    const int64_t hf_cols = s.info->shape[1];
    std::vector<float> line(static_cast<size_t>(rows));
    for (int64_t c = 0; c < cols; c++) {
      read(s, (offset[1] + c) * hf_cols + offset[0], rows, line.data());
      for (int64_t r = 0; r < rows; r++) out[r * cols + c] = line[size_t(r)];
    }
    return;
  }
  // Rows from the stacked parts, each HF row's columns [offset[1], + cols).
  int64_t part_begin = 0;
  size_t p = 0;
  for (int64_t r = offset[0]; r < offset[0] + rows; r++) {
    while (r >= part_begin + m.parts[p].rows) part_begin += m.parts[p].rows, p++;
    const Source& s = source(m.parts[p].name);
    const int64_t hf_cols = vector ? 1 : s.info->shape[1];
    read(s, (r - part_begin) * hf_cols + col0, cols, out + (r - offset[0]) * cols);
  }
}

}  // namespace loom
