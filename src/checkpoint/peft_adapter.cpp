#include "checkpoint/peft_adapter.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "checkpoint/checkpoint_model.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/dtype.h"
#include "model/hf_names.h"
#include "model/lora/lora_layout.h"

namespace loom {
namespace {

const std::string kPrefix = "base_model.model.";

// The trained biases of a LoRA model with bias "all": (loom name, shape, HF parts).
std::vector<HfTensorMap> trained_biases(const ModelConfig& cfg) {
  std::vector<HfTensorMap> out;
  if (!cfg.lora.train_biases) return out;
  for (HfTensorMap& m : hf_tensor_map(cfg))
    if (m.loom.ends_with(".bias")) out.push_back(std::move(m));
  return out;
}

std::string json_text(const std::string& path) {
  std::ifstream in(path);
  LOOM_USER_CHECK(in.good(), "%s: cannot open (a PEFT adapter folder has adapter_config.json)", path.c_str());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

PeftExportResult export_peft(const GlobalTensors& model, const ModelConfig& cfg, const std::string& base,
                             const std::string& out_dir, StDType dtype) {
  LOOM_USER_CHECK(cfg.lora.enabled(), "export: --format peft needs a LoRA checkpoint (a run with a [lora] section)");
  struct Tensor {
    std::string key;
    std::vector<int64_t> shape;
    std::vector<float> values;
    std::vector<uint16_t> narrow;
  };
  std::vector<Tensor> tensors;
  for (const lora::AdapterSite& s : lora::adapter_sites(cfg)) {
    tensors.push_back({kPrefix + s.hf_module + ".lora_A.weight", {cfg.lora.rank, s.in}, model.read_global(s.a), {}});
    tensors.push_back({kPrefix + s.hf_module + ".lora_B.weight", {s.rows, cfg.lora.rank}, model.read_global(s.b), {}});
  }
  for (const HfTensorMap& m : trained_biases(cfg)) {
    const std::vector<float> all = model.read_global(m.loom);
    int64_t row0 = 0;
    for (const HfPart& p : m.parts) {
      tensors.push_back({kPrefix + p.name, {p.rows}, std::vector<float>(all.begin() + row0, all.begin() + row0 + p.rows), {}});
      row0 += p.rows;
    }
  }
  std::vector<StEntry> entries;
  for (Tensor& t : tensors) {
    StEntry e{t.key, dtype, t.shape, t.values.data()};
    if (dtype != StDType::F32) {
      t.narrow.resize(t.values.size());
      if (dtype == StDType::BF16) convert_f32_to_bf16(reinterpret_cast<bf16*>(t.narrow.data()), t.values.data(), t.values.size());
      else convert_f32_to_f16(reinterpret_cast<f16*>(t.narrow.data()), t.values.data(), t.values.size());
      e.data = t.narrow.data();
    }
    entries.push_back(e);
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  LOOM_USER_CHECK(!ec, "export: cannot create '%s': %s", out_dir.c_str(), ec.message().c_str());
  PeftExportResult r;
  r.weights_path = out_dir + "/adapter_model.safetensors";
  r.config_path = out_dir + "/adapter_config.json";
  r.bytes = write_safetensors(r.weights_path, entries, {{"format", "pt"}}).bytes;
  r.tensors = int(entries.size());
  const LoraConfig& l = cfg.lora;
  nlohmann::ordered_json j = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base},
      {"r", l.rank},
      {"lora_alpha", l.alpha},
      {"target_modules", l.targets},
      {"lora_dropout", l.dropout},
      {"bias", l.train_biases ? "all" : "none"},
      {"fan_in_fan_out", !cfg.is_llama()},  // GPT-2's Conv1D keeps its weight as [in, out]
      {"use_rslora", false},
      {"use_dora", false},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"rank_pattern", nlohmann::ordered_json::object()},
      {"alpha_pattern", nlohmann::ordered_json::object()},
      {"revision", nullptr},
  };
  write_file_atomically(r.config_path, j.dump(2) + "\n");
  return r;
}

std::unique_ptr<PeftAdapter> PeftAdapter::open(const std::string& dir, const ModelConfig& cfg) {
  LOOM_USER_CHECK(cfg.lora.enabled(), "train.init_adapter needs a [lora] section (the adapter's rank and targets)");
  const std::string config_path = dir + "/adapter_config.json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text(config_path));
  } catch (const nlohmann::json::exception& e) {
    throw UserError(strprintf("%s: not valid JSON: %s", config_path.c_str(), e.what()));
  }
  const LoraConfig& l = cfg.lora;
  auto field = [&](const char* key) -> const nlohmann::json& {
    LOOM_USER_CHECK(j.is_object() && j.contains(key), "%s: field '%s' is missing", config_path.c_str(), key);
    return j.at(key);
  };
  LOOM_USER_CHECK(field("peft_type") == "LORA", "%s: field 'peft_type' is %s; loom reads LoRA adapters (LORA)",
                  config_path.c_str(), field("peft_type").dump().c_str());
  LOOM_USER_CHECK(field("r").is_number_integer() && field("r").get<int>() == l.rank,
                  "%s: field 'r' is %s but this run's lora.rank is %d", config_path.c_str(), field("r").dump().c_str(),
                  l.rank);
  LOOM_USER_CHECK(field("lora_alpha").is_number() && field("lora_alpha").get<double>() == l.alpha,
                  "%s: field 'lora_alpha' is %s but this run's lora.alpha is %g", config_path.c_str(),
                  field("lora_alpha").dump().c_str(), l.alpha);
  std::set<std::string> theirs, ours(l.targets.begin(), l.targets.end());
  const nlohmann::json& targets = field("target_modules");
  if (targets.is_string()) theirs.insert(targets.get<std::string>());
  else if (targets.is_array())
    for (const auto& t : targets)
      if (t.is_string()) theirs.insert(t.get<std::string>());
  LOOM_USER_CHECK(theirs == ours, "%s: field 'target_modules' is %s but this run's lora.targets are %s",
                  config_path.c_str(), targets.dump().c_str(), nlohmann::json(l.targets).dump().c_str());
  const std::string bias = j.value("bias", std::string("none"));
  LOOM_USER_CHECK(bias == (l.train_biases ? "all" : "none"), "%s: field 'bias' is \"%s\" but this run's lora.bias is \"%s\"",
                  config_path.c_str(), bias.c_str(), l.train_biases ? "all" : "none");
  for (const char* off : {"use_rslora", "use_dora"})
    LOOM_USER_CHECK(!j.contains(off) || j.at(off).is_null() || j.at(off) == false,
                    "%s: field '%s' is true; loom's LoRA is the plain one (scale alpha / r)", config_path.c_str(), off);
  for (const char* none : {"layers_to_transform", "modules_to_save"})
    LOOM_USER_CHECK(!j.contains(none) || j.at(none).is_null(), "%s: field '%s' is set; loom adapts every layer's targets",
                    config_path.c_str(), none);
  for (const char* empty : {"rank_pattern", "alpha_pattern"})
    LOOM_USER_CHECK(!j.contains(empty) || j.at(empty).is_null() || j.at(empty).empty(),
                    "%s: field '%s' is set; loom's adapters share one rank and alpha", config_path.c_str(), empty);

  const std::string weights = dir + "/adapter_model.safetensors";
  LOOM_USER_CHECK(std::filesystem::exists(weights),
                  "%s: no adapter_model.safetensors (PEFT's save_pretrained writes it; the older .bin is not read)",
                  dir.c_str());
  std::unique_ptr<PeftAdapter> a(new PeftAdapter());
  a->dir_ = dir;
  a->file_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(weights));
  auto expect = [&](const std::string& key, const std::vector<int64_t>& shape) {
    const StTensorInfo* t = a->file_->find(key);
    LOOM_USER_CHECK(t != nullptr, "%s: tensor '%s' is missing", weights.c_str(), key.c_str());
    LOOM_USER_CHECK(t->shape == shape, "%s: tensor '%s' has shape %s; this run's model needs %s", weights.c_str(),
                    key.c_str(), nlohmann::json(t->shape).dump().c_str(), nlohmann::json(shape).dump().c_str());
  };
  for (const lora::AdapterSite& s : lora::adapter_sites(cfg)) {
    const std::string ka = kPrefix + s.hf_module + ".lora_A.weight", kb = kPrefix + s.hf_module + ".lora_B.weight";
    expect(ka, {l.rank, s.in}), expect(kb, {s.rows, l.rank});
    a->sources_[s.a] = {ka, {l.rank, s.in}, {}};
    a->sources_[s.b] = {kb, {s.rows, l.rank}, {}};
  }
  for (const HfTensorMap& m : trained_biases(cfg)) {
    Source src{"", m.shape, {}};
    for (const HfPart& p : m.parts) {
      expect(kPrefix + p.name, {p.rows});
      src.parts.push_back({kPrefix + p.name, p.rows});
    }
    a->sources_[m.loom] = std::move(src);
  }
  return a;
}

PeftAdapter::~PeftAdapter() = default;

bool PeftAdapter::has(const std::string& name) const { return sources_.count(name) != 0; }

const std::vector<int64_t>& PeftAdapter::global_shape(const std::string& name) const {
  auto it = sources_.find(name);
  LOOM_USER_CHECK(it != sources_.end(), "%s: no tensor for loom's '%s'", dir_.c_str(), name.c_str());
  return it->second.shape;
}

void PeftAdapter::read_region(const std::string& name, const std::vector<int64_t>& offset,
                              const std::vector<int64_t>& shape, float* out) const {
  const Source& src = sources_.at(name);
  std::vector<float> all(size_t(shape_numel(src.shape)));
  if (src.parts.empty()) {
    file_->read_floats(*file_->find(src.key), 0, int64_t(all.size()), all.data());
  } else {
    int64_t row0 = 0;
    for (const auto& [key, rows] : src.parts) file_->read_floats(*file_->find(key), 0, rows, all.data() + row0), row0 += rows;
  }
  cut_box(all, src.shape, offset, shape, out);
}

}  // namespace loom
