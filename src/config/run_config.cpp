#include "config/run_config.h"

#include <algorithm>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "core/check.h"
#include "checkpoint/hf_checkpoint.h"
#include "model/param_groups.h"
#include "model/split_rules.h"
#include "core/regular_file.h"
#include "core/cpu_info.h"

namespace loom {
namespace {

// Reads typed fields out of a TOML tree, remembering which keys it used so
// that anything left over can be reported as unknown.
class FieldReader {
 public:
  FieldReader(const toml::table& root, std::string origin) : root_(root), origin_(std::move(origin)) {}

  template <class T>
  void get(const std::string& key, T* out) {
    used_.insert(key);
    toml::node_view<const toml::node> node = root_.at_path(key);
    if (!node) return;
    if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      const toml::array* arr = node.as_array();
      if (!arr) fail(key, "an array of strings");
      out->clear();
      for (const toml::node& e : *arr) {
        if (!e.is_string()) fail(key, "an array of strings");
        out->push_back(*e.value<std::string>());
      }
    } else if constexpr (std::is_same_v<T, std::vector<int>>) {
      const toml::array* arr = node.as_array();
      if (!arr) fail(key, "an array of integers");
      out->clear();
      for (const toml::node& e : *arr) {
        if (!e.is_integer() || *e.value<int64_t>() < INT32_MIN || *e.value<int64_t>() > INT32_MAX)
          fail(key, "an array of integers");
        out->push_back(int(*e.value<int64_t>()));
      }
    } else if constexpr (std::is_same_v<T, std::string>) {
      auto v = node.value<std::string>();
      if (!v || !node.is_string()) fail(key, "a string");
      *out = *v;
    } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::optional<bool>>) {
      if (!node.is_boolean()) fail(key, "true or false");
      *out = *node.value<bool>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!node.is_number() || !std::isfinite(*node.value<double>())) fail(key, "a finite number");
      *out = T(*node.value<double>());
    } else {
      if (!node.is_integer()) fail(key, "an integer");
      int64_t v = *node.value<int64_t>();
      LOOM_USER_CHECK(v >= int64_t(std::numeric_limits<T>::min()) && v <= int64_t(std::numeric_limits<T>::max()),
                      "config field '%s' in %s: %lld is out of range", key.c_str(), origin_.c_str(),
                      (long long)v);
      *out = T(v);
    }
  }

  bool has(const std::string& key) const { return bool(root_.at_path(key)); }
  // Every key in the tree that no get() asked for.
  void reject_unknown() const { walk(root_, ""); }

 private:
  [[noreturn]] void fail(const std::string& key, const char* expected) const {
    throw UserError(strprintf("config field '%s' in %s: expected %s", key.c_str(), origin_.c_str(), expected));
  }
  void walk(const toml::table& t, const std::string& prefix) const {
    for (auto&& [k, v] : t) {
      std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      if (const toml::table* sub = v.as_table()) {
        walk(*sub, key);
      } else if (!used_.count(key)) {
        throw UserError(strprintf("unknown config field '%s' in %s", key.c_str(), origin_.c_str()));
      }
    }
  }
  const toml::table& root_;
  std::string origin_;
  std::set<std::string> used_;
};

// train.init_from = "hf:DIR": the model is the checkpoint's (its
// config.json). A [model] field the config sets must agree with it;
// model.seq_len is the run's choice (at most GPT-2's position table; by
// default the checkpoint's limit, at most 1024) and model.attention a kernel
// choice.
void model_from_hf(const FieldReader& r, RunConfig& c) {
  const std::string dir = c.train.init_from.substr(3);
  const HfModelConfig hf = read_hf_config(dir);
  ModelConfig m = hf.model;
  const int limit = m.seq_len;
  m.seq_len = r.has("model.seq_len") ? c.model.seq_len : std::min(limit, 1024);
  LOOM_USER_CHECK(m.is_llama() || m.seq_len <= limit,
                  "config field 'model.seq_len' is %d, longer than the position table of %s/config.json (%d)",
                  m.seq_len, dir.c_str(), limit);
  LOOM_USER_CHECK(hf.sliding_window == 0 || m.seq_len <= hf.sliding_window,
                  "config field 'model.seq_len' is %d, longer than the sliding window of %s/config.json (%d): "
                  "loom attends to the whole sequence; train with model.seq_len <= %d",
                  m.seq_len, dir.c_str(), hf.sliding_window, hf.sliding_window);
  m.attention = c.model.attention;
  auto agree = [&](const char* key, double given, double want) {
    LOOM_USER_CHECK(!r.has(key) || given == want,
                    "config field '%s' is %g but %s/config.json says %g (train.init_from takes the model from the "
                    "checkpoint: leave the field out)",
                    key, given, dir.c_str(), want);
  };
  LOOM_USER_CHECK(!r.has("model.family") || c.model.family == m.family,
                  "config field 'model.family' disagrees with %s/config.json (%s): leave it out", dir.c_str(),
                  hf.architecture.c_str());
  agree("model.vocab_size", c.model.vocab_size, m.vocab_size);
  agree("model.n_layer", c.model.n_layer, m.n_layer);
  agree("model.n_head", c.model.n_head, m.n_head);
  agree("model.d_model", c.model.d_model, m.d_model);
  agree("model.n_kv_head", c.model.kv_heads(), m.kv_heads());
  agree("model.ffn_hidden", c.model.ffn(), m.ffn());
  agree("model.rope_theta", c.model.rope_theta, m.rope_theta);
  agree("model.norm_eps", c.model.norm_eps, m.norm_eps);
  agree("model.tie_embeddings", c.model.tied(), m.tied());
  agree("model.qkv_bias", c.model.qkv_bias, m.qkv_bias);
  LOOM_USER_CHECK(!r.has("model.rope_scaling") || c.model.rope_scaling.kind == m.rope_scaling.kind,
                  "config field 'model.rope_scaling' disagrees with %s/config.json: leave it out", dir.c_str());
  agree("model.rope_factor", c.model.rope_scaling.factor, m.rope_scaling.factor);
  agree("model.rope_low_freq_factor", c.model.rope_scaling.low_freq_factor, m.rope_scaling.low_freq_factor);
  agree("model.rope_high_freq_factor", c.model.rope_scaling.high_freq_factor, m.rope_scaling.high_freq_factor);
  agree("model.rope_original_max_positions", c.model.rope_scaling.original_max_positions,
        m.rope_scaling.original_max_positions);
  c.model = m;
}

// [lora]: adapters on the named layers, the base frozen (model/lora/).
void read_lora(FieldReader& r, LoraConfig& lora) {
  r.get("lora.rank", &lora.rank);
  r.get("lora.alpha", &lora.alpha);
  r.get("lora.targets", &lora.targets);
  std::string bias = lora.train_biases ? "all" : "none";
  r.get("lora.bias", &bias);
  LOOM_USER_CHECK(bias == "none" || bias == "all",
                  "config field 'lora.bias' must be \"none\" (biases frozen with the base) or \"all\" (every bias "
                  "trained), got \"%s\"",
                  bias.c_str());
  lora.train_biases = bias == "all";
  int64_t seed = int64_t(lora.seed);
  r.get("lora.seed", &seed);
  LOOM_USER_CHECK(seed >= 0, "config field 'lora.seed' must be >= 0 (got %lld)", (long long)seed);
  lora.seed = uint64_t(seed);
  r.get("lora.dropout", &lora.dropout);
}

void read_fields(FieldReader& r, RunConfig& c) {
  std::string family = c.model.family_name();
  r.get("model.family", &family);
  // "mixtral": LLaMA with a mixture-of-experts MLP (8 experts, top 2 unless set).
  const bool mixtral = family == "mixtral";
  const std::optional<ModelFamily> parsed = mixtral ? ModelFamily::llama : parse_model_family(family);
  LOOM_USER_CHECK(parsed.has_value(),
                  "config field 'model.family' must be \"gpt2\", \"llama\" or \"mixtral\" (got \"%s\")",
                  family.c_str());
  c.model.family = *parsed;
  r.get("model.n_experts", &c.model.n_experts);
  r.get("model.top_k", &c.model.top_k);
  r.get("model.moe_ffn_hidden", &c.model.moe_ffn_hidden);
  r.get("model.moe_every", &c.model.moe_every);
  r.get("model.moe_shared_ffn", &c.model.moe_shared_ffn);
  if (mixtral && c.model.n_experts == 0) c.model.n_experts = 8;
  std::string balance = moe_balance_name(c.model.moe_balance);
  r.get("model.moe_balance", &balance);
  const std::optional<MoeBalance> parsed_balance = parse_moe_balance(balance);
  LOOM_USER_CHECK(parsed_balance.has_value(),
                  "config field 'model.moe_balance' must be \"aux_free\", \"sequence\", \"switch\" or \"none\" "
                  "(got \"%s\")",
                  balance.c_str());
  c.model.moe_balance = *parsed_balance;
  r.get("model.moe_bias_rate", &c.model.moe_bias_rate);
  r.get("model.moe_aux_coef", &c.model.moe_aux_coef);
  r.get("model.moe_z_coef", &c.model.moe_z_coef);
  std::string router = c.model.moe_sigmoid ? "sigmoid" : "softmax";
  r.get("model.moe_router", &router);
  LOOM_USER_CHECK(router == "softmax" || router == "sigmoid",
                  "config field 'model.moe_router' must be \"softmax\" or \"sigmoid\" (got \"%s\")", router.c_str());
  c.model.moe_sigmoid = router == "sigmoid";
  r.get("model.moe_renormalize", &c.model.moe_renormalize);
  LOOM_USER_CHECK(mixtral || c.model.n_experts == 0,
                  "config field 'model.n_experts' is set on a %s model: experts are the mixtral family's "
                  "(model.family = \"mixtral\")",
                  family.c_str());
  r.get("model.vocab_size", &c.model.vocab_size);
  r.get("model.n_layer", &c.model.n_layer);
  r.get("model.n_head", &c.model.n_head);
  r.get("model.d_model", &c.model.d_model);
  r.get("model.seq_len", &c.model.seq_len);
  r.get("model.n_kv_head", &c.model.n_kv_head);
  r.get("model.ffn_hidden", &c.model.ffn_hidden);
  r.get("model.ffn_multiple_of", &c.model.ffn_multiple_of);
  r.get("model.rope_theta", &c.model.rope_theta);
  r.get("model.norm_eps", &c.model.norm_eps);
  r.get("model.qkv_bias", &c.model.qkv_bias);
  std::string rope_scaling = rope_scaling_name(c.model.rope_scaling.kind);
  r.get("model.rope_scaling", &rope_scaling);
  const std::optional<RopeScaling::Kind> scaling = parse_rope_scaling(rope_scaling);
  LOOM_USER_CHECK(scaling.has_value(), "config field 'model.rope_scaling' must be \"none\" or \"llama3\" (got \"%s\")",
                  rope_scaling.c_str());
  c.model.rope_scaling.kind = *scaling;
  r.get("model.rope_factor", &c.model.rope_scaling.factor);
  r.get("model.rope_low_freq_factor", &c.model.rope_scaling.low_freq_factor);
  r.get("model.rope_high_freq_factor", &c.model.rope_scaling.high_freq_factor);
  r.get("model.rope_original_max_positions", &c.model.rope_scaling.original_max_positions);
  std::optional<bool> tie;
  r.get("model.tie_embeddings", &tie);
  if (tie) c.model.tie_embeddings = *tie ? 1 : 0;
  std::string attention = attention_kind_name(c.model.attention);
  r.get("model.attention", &attention);
  const std::optional<AttentionKind> kind = parse_attention_kind(attention);
  LOOM_USER_CHECK(kind.has_value(),
                  "config field 'model.attention' must be \"auto\", \"tiled\" or \"materialized\" (got \"%s\")",
                  attention.c_str());
  c.model.attention = *kind;
  r.get("train.batch_size", &c.train.batch_size);
  r.get("train.micro_batch_size", &c.train.micro_batch_size);
  r.get("train.steps", &c.train.steps);
  r.get("train.lr", &c.train.lr);
  r.get("train.min_lr", &c.train.min_lr);
  r.get("train.warmup_steps", &c.train.warmup_steps);
  r.get("train.weight_decay", &c.train.weight_decay);
  r.get("train.beta1", &c.train.beta1);
  r.get("train.beta2", &c.train.beta2);
  r.get("train.eps", &c.train.eps);
  r.get("train.grad_clip", &c.train.grad_clip);
  r.get("train.eval_every", &c.train.eval_every);
  r.get("train.eval_batches", &c.train.eval_batches);
  r.get("train.log_every", &c.train.log_every);
  r.get("train.sample_tokens", &c.train.sample_tokens);
  r.get("train.sample_prompt", &c.train.sample_prompt);
  r.get("train.freeze", &c.train.freeze);
  r.get("train.init_from", &c.train.init_from);
  r.get("train.init_adapter", &c.train.init_adapter);
  if (c.train.init_from.rfind("hf:", 0) == 0) model_from_hf(r, c);
  read_lora(r, c.model.lora);
  r.get("train.seed", &c.train.seed);
  r.get("train.run_dir", &c.train.run_dir);
  r.get("train.run_name", &c.train.run_name);
  r.get("train.checkpoint_every", &c.train.checkpoint_every);
  r.get("train.checkpoint_dir", &c.train.checkpoint_dir);
  r.get("train.keep_checkpoints", &c.train.keep_checkpoints);
  r.get("train.async_checkpoint", &c.train.async_checkpoint);
  r.get("train.tensorboard", &c.train.tensorboard);
  r.get("train.trace_flush_every", &c.train.trace_flush_every);
  r.get("train.guard_window", &c.train.guard_window);
  r.get("train.guard_z", &c.train.guard_z);
  r.get("train.guard_warmup", &c.train.guard_warmup);
  r.get("train.guard_max_skips", &c.train.guard_max_skips);
  r.get("train.recompute", &c.train.recompute);
  r.get("train.straggler_factor", &c.train.straggler_factor);
  r.get("train.straggler_window", &c.train.straggler_window);
  r.get("data.path", &c.data.path);
  r.get("data.format", &c.data.format);
  r.get("data.rows", &c.data.rows);
  r.get("data.long_samples", &c.data.long_samples);
  r.get("data.val_fraction", &c.data.val_fraction);
  r.get("parallel.dp", &c.parallel.dp);
  r.get("parallel.tp", &c.parallel.tp);
  r.get("parallel.pp", &c.parallel.pp);
  r.get("parallel.cp", &c.parallel.cp);
  r.get("parallel.ep", &c.parallel.ep);
  r.get("parallel.sequence_parallel", &c.parallel.sequence_parallel);
  r.get("parallel.schedule", &c.parallel.schedule);
  r.get("parallel.virtual_stages", &c.parallel.virtual_stages);
  // ZB-V is two chunks per stage: the schedule implies them unless the count is given.
  if (c.parallel.schedule == "zb-v" && !r.has("parallel.virtual_stages")) c.parallel.virtual_stages = 2;
  r.get("parallel.pp_layers", &c.parallel.pp_layers);
  r.get("parallel.order", &c.parallel.order);
  r.get("parallel.zero", &c.parallel.zero);
  r.get("parallel.bucket_mb", &c.parallel.bucket_mb);
  r.get("parallel.dp_reduce", &c.parallel.dp_reduce);
  r.get("precision.compute", &c.precision.compute);
  r.get("precision.loss_scale", &c.precision.loss_scale);
  r.get("precision.initial_scale", &c.precision.initial_scale);
  r.get("precision.growth_factor", &c.precision.growth_factor);
  r.get("precision.backoff_factor", &c.precision.backoff_factor);
  r.get("precision.growth_interval", &c.precision.growth_interval);
  r.get("precision.hysteresis", &c.precision.hysteresis);
  r.get("precision.min_scale", &c.precision.min_scale);
  r.get("precision.allow_unscaled_fp16", &c.precision.allow_unscaled_fp16);
  r.get("precision.grad_reduce", &c.precision.grad_reduce);
  r.get("runtime.threads", &c.runtime.threads);
  r.get("runtime.isa", &c.runtime.isa);
  r.get("runtime.comm_timeout_s", &c.runtime.comm_timeout_s);
  r.get("runtime.progress_thread", &c.runtime.progress_thread);
  r.get("runtime.progress_poll_us", &c.runtime.progress_poll_us);
  r.get("runtime.heartbeat_stale_s", &c.runtime.heartbeat_stale_s);
  r.reject_unknown();
}

// Sets root[a.b.c] = value parsed as TOML, creating tables on the way.
void apply_override(toml::table& root, const std::string& assignment) {
  size_t eq = assignment.find('=');
  LOOM_USER_CHECK(eq != std::string::npos && eq > 0, "--set expects key=value, got '%s'", assignment.c_str());
  std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", text}};  // bare words are strings: --set data.path=foo.txt
  }
  toml::table* t = &root;
  size_t start = 0;
  for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1) {
    std::string part = key.substr(start, dot - start);
    if (!t->contains(part)) t->insert(part, toml::table{});
    t = (*t)[part].as_table();
    LOOM_USER_CHECK(t != nullptr, "--set %s: '%s' is not a section", key.c_str(), part.c_str());
  }
  t->insert_or_assign(key.substr(start), *parsed["v"].node());
}

}  // namespace

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  toml::table root;
  std::string origin = path.empty() ? "--set" : path;
  if (!path.empty()) {
    // A directory, /dev/null or a FIFO is not a config (toml would read it as
    // empty, or block): refused by name.
    require_regular_file(path, "config file");
    try {
      root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      const auto& where = e.source().begin;
      throw UserError(strprintf("config file %s:%u:%u: %s", path.c_str(), where.line, where.column,
                                std::string(e.description()).c_str()));
    }
  }
  for (const auto& o : overrides) apply_override(root, o);
  if (!overrides.empty() && !path.empty()) origin = path + " (with --set)";
  RunConfig c;
  FieldReader reader(root, origin);
  read_fields(reader, c);
  c.validate();
  return c;
}

void RunConfig::validate() const {
  model.validate();
  const TrainConfig& t = train;
  auto require = [](bool ok, const char* field, const char* rule) {
    LOOM_USER_CHECK(ok, "config field '%s' must be %s", field, rule);
  };
  require(t.batch_size >= 1, "train.batch_size", ">= 1");
  require(t.micro_batch_size >= 0 && t.micro_batch_size <= t.batch_size, "train.micro_batch_size",
          "in [0, train.batch_size] (0 = batch_size / dp)");
  require(t.steps >= 1, "train.steps", ">= 1");
  require(t.checkpoint_every >= 0, "train.checkpoint_every", ">= 0 (0 = never)");
  require(t.keep_checkpoints >= 1, "train.keep_checkpoints", ">= 1");
  // A name inside run_dir, not a path: it may not climb out of it.
  require(t.run_name.find('/') == std::string::npos && t.run_name != "." && t.run_name != "..", "train.run_name",
          "a name without '/' (and not '.' or '..'): runs go to run_dir/run_name");
  require(std::none_of(t.run_name.begin(), t.run_name.end(),
                       [](char ch) { return (unsigned char)ch < 0x20 || ch == 0x7f; }),
          "train.run_name", "a name without newlines, tabs or other control characters (it names a folder and "
          "appears in logs and reports)");
  require(t.init_from.empty() || (t.init_from.rfind("hf:", 0) == 0 && t.init_from.size() > 3), "train.init_from",
          "\"hf:DIR\" (a Hugging Face checkpoint folder: config.json and safetensors) or empty");
  require(t.init_adapter.empty() || model.lora.enabled(), "train.init_adapter",
          "empty without a [lora] section (the adapter's rank and targets)");
  if (!t.freeze.empty()) {
    const std::string problem = freeze_problem(model, t.freeze);
    LOOM_USER_CHECK(problem.empty(), "config field 'train.freeze': %s", problem.c_str());
  }
  require(t.trace_flush_every >= 0, "train.trace_flush_every", ">= 0 (0 = only trace.json at the end)");
  require(t.checkpoint_every == 0 || !t.checkpoint_dir.empty(), "train.checkpoint_dir", "a folder");
  require(t.guard_window >= 2, "train.guard_window", ">= 2");
  require(t.guard_z >= 0, "train.guard_z", ">= 0 (0 = off)");
  require(t.guard_warmup >= 2 && t.guard_warmup <= t.guard_window, "train.guard_warmup",
          "in [2, train.guard_window]");
  require(t.guard_max_skips >= 1, "train.guard_max_skips", ">= 1");
  t.recompute_mode();  // names the field when unknown
  require(t.straggler_factor == 0 || (t.straggler_factor > 1 && t.straggler_factor <= 100), "train.straggler_factor",
          "0 (off) or in (1, 100]");
  require(t.straggler_window >= 2 && t.straggler_window <= 10000, "train.straggler_window", "in [2, 10000]");
  require(t.lr > 0 && t.lr < 10, "train.lr", "in (0, 10)");
  require(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr", "in [0, train.lr]");
  require(t.warmup_steps >= 0, "train.warmup_steps", ">= 0");
  require(t.weight_decay >= 0, "train.weight_decay", ">= 0");
  require(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "in [0, 1)");
  require(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "in [0, 1)");
  require(t.eps > 0, "train.eps", "> 0");
  require(t.grad_clip >= 0, "train.grad_clip", ">= 0 (0 disables clipping)");
  require(t.eval_every >= 0, "train.eval_every", ">= 0 (0 disables)");
  require(t.eval_batches >= 1, "train.eval_batches", ">= 1");
  require(t.log_every >= 1, "train.log_every", ">= 1");
  require(t.sample_tokens >= 0 && t.sample_tokens <= 4096, "train.sample_tokens", "in [0, 4096] (0 = no sample)");
  require(t.sample_tokens == 0 || !t.sample_prompt.empty(), "train.sample_prompt", "non-empty when sample_tokens > 0");
  require(t.seed >= 0, "train.seed", ">= 0");
  require(data.format == "bytes" || data.format == "shards", "data.format", "\"shards\" or \"bytes\"");
  require(!data.path.empty(), "data.path", "a file path");
  require(data.rows == "windows" || data.rows == "padded" || data.rows == "packed", "data.rows",
          "\"windows\", \"padded\" or \"packed\"");
  require(data.long_samples == "truncate" || data.long_samples == "skip", "data.long_samples",
          "\"truncate\" or \"skip\"");
  require(data.rows == "windows" || data.format == "shards", "data.rows",
          "\"windows\" with data.format = \"bytes\" (padded and packed rows need instruction data from loom prepare)");
  require(data.val_fraction > 0 && data.val_fraction < 1, "data.val_fraction", "in (0, 1)");
  require(model.vocab_size >= 256, "model.vocab_size", ">= 256 (every byte needs an id)");
  require(runtime.isa == "auto" || parse_isa(runtime.isa).has_value(), "runtime.isa",
          "auto or one of avx2, avx512, avx512_bf16, amx (the highest instruction set the kernels may use)");
  require(runtime.threads >= 0 && runtime.threads <= 1024, "runtime.threads", "in [0, 1024] (0 = all cores)");
  require(runtime.comm_timeout_s == 0 || (runtime.comm_timeout_s >= 1 && runtime.comm_timeout_s <= 1e6),
          "runtime.comm_timeout_s", "0 (wait forever) or in [1, 1e6] seconds");
  require(runtime.heartbeat_stale_s >= 1 && runtime.heartbeat_stale_s <= 1e6, "runtime.heartbeat_stale_s",
          "in [1, 1e6] seconds");
  require(runtime.progress_poll_us >= 1 && runtime.progress_poll_us <= 100000, "runtime.progress_poll_us",
          "in [1, 100000] microseconds");
  require(parallel.dp >= 0, "parallel.dp", ">= 0 (0 = infer from the world size)");
  require(parallel.tp >= 1, "parallel.tp", ">= 1");
  require(parallel.pp >= 1, "parallel.pp", ">= 1");
  require(parallel.cp >= 1 && parallel.cp <= 4096, "parallel.cp", "in [1, 4096]");
  const std::string cp_problem = cp_split_problem(model, parallel.cp);  // the rule every layout check shares
  LOOM_USER_CHECK(cp_problem.empty(), "config field %s", cp_problem.c_str());
  require(parallel.ep >= 1 && parallel.ep <= 4096, "parallel.ep", "in [1, 4096]");
  require(parallel.ep == 1 || model.is_moe(), "parallel.ep",
          "1 for a model without experts (expert parallelism spreads a mixtral model's experts)");
  require(parallel.ep == 1 || model.n_experts % parallel.ep == 0, "parallel.ep",
          strprintf("a divisor of model.n_experts (%d): each ep rank holds an equal share of the experts",
                    model.n_experts).c_str());
  require(parallel.zero >= 0 && parallel.zero <= 3, "parallel.zero", "0, 1, 2 or 3");
  require(parallel.schedule == "1f1b" || parallel.schedule == "gpipe" || parallel.schedule == "interleaved" ||
              parallel.schedule == "zb-h1" || parallel.schedule == "zb-v",
          "parallel.schedule", "\"1f1b\", \"gpipe\", \"interleaved\", \"zb-h1\" or \"zb-v\"");
  // The split backward keeps the weight pass's operands in the block's
  // stored buffers, which full recomputation does not keep.
  const bool zero_bubble = parallel.schedule == "zb-h1" || parallel.schedule == "zb-v";
  require(!zero_bubble || t.recompute_mode() != Recompute::full, "train.recompute",
          "\"none\" or \"selective\" with a zero-bubble parallel.schedule (\"zb-h1\", \"zb-v\": its weight pass "
          "reads the activations full recomputation drops)");
  require(parallel.virtual_stages >= 1 && parallel.virtual_stages <= 64, "parallel.virtual_stages", "in [1, 64]");
  require(parallel.schedule != "zb-v" || parallel.virtual_stages == 2, "parallel.virtual_stages",
          "2 with parallel.schedule = \"zb-v\" (its two chunks per stage)");
  require(parallel.virtual_stages == 1 || parallel.schedule == "interleaved" || parallel.schedule == "zb-v",
          "parallel.virtual_stages", "1 unless parallel.schedule = \"interleaved\" (or 2 with \"zb-v\")");
  require(parallel.bucket_mb > 0 && parallel.bucket_mb <= 65536, "parallel.bucket_mb",
          "in (0, 65536] (MiB of gradients per reduction bucket)");
  require(parallel.dp_reduce == "auto" || parallel.dp_reduce == "flat" || parallel.dp_reduce == "hierarchical",
          "parallel.dp_reduce", "\"auto\", \"flat\" or \"hierarchical\"");
  const ComputePrecision compute = precision.compute_precision();  // names precision.compute if unknown
  check_loss_scaling(compute, precision.loss_scale_mode(), precision.allow_unscaled_fp16);
  precision.scaler_options().validate();
  require(precision.grad_reduce == "fp32" || precision.grad_reduce == "bf16", "precision.grad_reduce",
          "\"fp32\" or \"bf16\"");
}

LossScaleMode PrecisionConfig::loss_scale_mode() const {
  return loss_scale.empty() ? default_loss_scale_mode(compute_precision()) : parse_loss_scale_mode(loss_scale);
}

LossScalerOptions PrecisionConfig::scaler_options() const {
  LossScalerOptions o;
  o.mode = loss_scale_mode();
  o.initial_scale = initial_scale;
  o.growth_factor = growth_factor;
  o.backoff_factor = backoff_factor;
  o.growth_interval = growth_interval;
  o.hysteresis = hysteresis;
  o.min_scale = min_scale;
  return o;
}

// The inside of a TOML basic string: quotes, backslashes and control
// characters escaped, so any path round-trips.
// A double exactly, in the shortest form that reads back as the same
// number (1e-05, not 1.0000000000000001e-05).
static std::string toml_number(double v) {
  for (int digits = 6; digits < 17; digits++) {
    std::string s = strprintf("%.*g", digits, v);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return strprintf("%.17g", v);
}

static std::string toml_escaped(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c < 0x20 || c == 0x7f) out += strprintf("\\u%04x", c);
    else out += char(c);
  }
  return out;
}

std::string RunConfig::to_toml() const {
  std::ostringstream s;
  s << "[model]\nfamily = \"" << model.family_name() << "\"\nvocab_size = " << model.vocab_size << "\nn_layer = " << model.n_layer
    << "\nn_head = " << model.n_head << "\nd_model = " << model.d_model << "\nseq_len = " << model.seq_len
    << "\nn_kv_head = " << model.n_kv_head << "\nffn_hidden = " << model.ffn_hidden
    << "\nffn_multiple_of = " << model.ffn_multiple_of << "\nrope_theta = " << toml_number(model.rope_theta)
    << "\nnorm_eps = " << toml_number(model.norm_eps) << (model.qkv_bias ? "\nqkv_bias = true" : "")
    << [&] {
         const RopeScaling& r = model.rope_scaling;
         if (r.kind == RopeScaling::Kind::none) return std::string();
         return std::string("\nrope_scaling = \"") + rope_scaling_name(r.kind) + "\"\nrope_factor = " +
                toml_number(r.factor) + "\nrope_low_freq_factor = " + toml_number(r.low_freq_factor) +
                "\nrope_high_freq_factor = " + toml_number(r.high_freq_factor) +
                "\nrope_original_max_positions = " + std::to_string(r.original_max_positions);
       }()
    << (model.tie_embeddings < 0 ? "" : model.tie_embeddings ? "\ntie_embeddings = true" : "\ntie_embeddings = false")
    << "\nattention = \"" << attention_kind_name(model.attention) << "\""
    << (model.is_moe() ? strprintf("\nn_experts = %d\ntop_k = %d\nmoe_ffn_hidden = %d\nmoe_every = %d"
                                   "\nmoe_balance = \"%s\"\nmoe_bias_rate = %s\nmoe_aux_coef = %s\nmoe_z_coef = %s"
                                   "\nmoe_router = \"%s\"\nmoe_shared_ffn = %d\nmoe_renormalize = %s",
                                   model.n_experts, model.top_k, model.moe_ffn_hidden, model.moe_every,
                                   moe_balance_name(model.moe_balance), toml_number(model.moe_bias_rate).c_str(),
                                   toml_number(model.moe_aux_coef).c_str(), toml_number(model.moe_z_coef).c_str(),
                                   model.moe_sigmoid ? "sigmoid" : "softmax", model.moe_shared_ffn,
                                   model.moe_renormalize ? "true" : "false")
                       : std::string())
    << "\n[train]\nbatch_size = " << train.batch_size
    << "\nmicro_batch_size = " << train.micro_batch_size << "\nsteps = " << train.steps << "\nlr = " << train.lr
    << "\nmin_lr = " << train.min_lr << "\nwarmup_steps = " << train.warmup_steps
    << "\nweight_decay = " << train.weight_decay << "\nbeta1 = " << train.beta1 << "\nbeta2 = " << train.beta2
    << "\neps = " << train.eps << "\ngrad_clip = " << train.grad_clip << "\neval_every = " << train.eval_every
    << "\neval_batches = " << train.eval_batches << "\nlog_every = " << train.log_every
    << "\nsample_tokens = " << train.sample_tokens << "\nsample_prompt = \"" << toml_escaped(train.sample_prompt) << "\""
    << "\nseed = " << train.seed << "\nfreeze = [" << [&] {
         std::string list;
         for (const std::string& f : train.freeze) list += (list.empty() ? "\"" : ", \"") + toml_escaped(f) + "\"";
         return list;
       }() << "]"
    << "\ninit_from = \"" << toml_escaped(train.init_from) << "\""
    << "\ninit_adapter = \"" << toml_escaped(train.init_adapter) << "\""
    << "\ncheckpoint_every = " << train.checkpoint_every << "\ncheckpoint_dir = \""
    << toml_escaped(train.checkpoint_dir) << "\"\nkeep_checkpoints = " << train.keep_checkpoints
    << "\nasync_checkpoint = " << (train.async_checkpoint ? "true" : "false")
    << "\ntensorboard = " << (train.tensorboard ? "true" : "false")
    << "\ntrace_flush_every = " << train.trace_flush_every << "\nguard_window = "
    << train.guard_window << "\nguard_z = " << train.guard_z << "\nguard_warmup = " << train.guard_warmup
    << "\nguard_max_skips = " << train.guard_max_skips << "\nrecompute = \"" << train.recompute << "\"" << "\nstraggler_factor = " << train.straggler_factor << "\nstraggler_window = " << train.straggler_window << "\nrun_dir = \"" << toml_escaped(train.run_dir) << "\"\nrun_name = \"" << toml_escaped(train.run_name) << "\""
    << "\n[data]\npath = \"" << toml_escaped(data.path) << "\"\nformat = \"" << data.format
    << "\"\nval_fraction = " << data.val_fraction << "\nrows = \"" << data.rows << "\"\nlong_samples = \""
    << data.long_samples << "\"\n[parallel]\ndp = " << parallel.dp << "\ntp = " << parallel.tp
    << "\npp = " << parallel.pp << "\ncp = " << parallel.cp << "\nep = " << parallel.ep
    << "\nsequence_parallel = " << (parallel.sequence_parallel ? "true" : "false")
    << "\nschedule = \"" << toml_escaped(parallel.schedule) << "\"\nvirtual_stages = " << parallel.virtual_stages << "\npp_layers = ["
    << [&] {
         std::string s;
         for (size_t i = 0; i < parallel.pp_layers.size(); i++) s += (i ? ", " : "") + std::to_string(parallel.pp_layers[i]);
         return s;
       }() << "]"
    << "\norder = \"" << toml_escaped(parallel.order) << "\"\nzero = " << parallel.zero
    << "\nbucket_mb = " << parallel.bucket_mb << "\ndp_reduce = \"" << toml_escaped(parallel.dp_reduce)
    << "\"\n[precision]\ncompute = \"" << toml_escaped(precision.compute)
    << "\"\nloss_scale = \"" << toml_escaped(precision.loss_scale) << "\"\ninitial_scale = " << precision.initial_scale
    << "\ngrowth_factor = " << precision.growth_factor << "\nbackoff_factor = " << precision.backoff_factor
    << "\ngrowth_interval = " << precision.growth_interval << "\nhysteresis = " << precision.hysteresis
    << "\nmin_scale = " << precision.min_scale
    << "\nallow_unscaled_fp16 = " << (precision.allow_unscaled_fp16 ? "true" : "false") << "\ngrad_reduce = \""
    << toml_escaped(precision.grad_reduce) << "\"\n[runtime]\nthreads = " << runtime.threads
    << "\ncomm_timeout_s = " << runtime.comm_timeout_s
    << "\nprogress_thread = " << (runtime.progress_thread ? "true" : "false")
    << "\nprogress_poll_us = " << runtime.progress_poll_us << "\nheartbeat_stale_s = " << runtime.heartbeat_stale_s
    << "\nisa = \"" << toml_escaped(runtime.isa) << "\"\n";
  if (model.lora.enabled()) {
    const LoraConfig& l = model.lora;
    s << "[lora]\nrank = " << l.rank << "\nalpha = " << toml_number(l.alpha) << "\ntargets = [";
    for (size_t i = 0; i < l.targets.size(); i++) s << (i ? ", \"" : "\"") << toml_escaped(l.targets[i]) << "\"";
    s << "]\nbias = \"" << (l.train_biases ? "all" : "none") << "\"\nseed = " << l.seed
      << "\ndropout = " << toml_number(l.dropout) << "\n";
  }
  return s.str();
}

}  // namespace loom
