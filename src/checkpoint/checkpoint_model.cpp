#include "checkpoint/checkpoint_model.h"

#include <cstring>
#include <toml++/toml.h>

#include "checkpoint/base_fingerprint.h"
#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/model_fields.h"
#include "core/check.h"
#include "model/lora/lora_layout.h"

namespace loom {

void cut_box(const std::vector<float>& all, const std::vector<int64_t>& whole, const std::vector<int64_t>& offset,
             const std::vector<int64_t>& shape, float* out) {
  const int64_t cols = whole.size() > 1 ? whole[1] : 1, box_cols = shape.size() > 1 ? shape[1] : 1;
  const int64_t col0 = offset.size() > 1 ? offset[1] : 0;
  for (int64_t r = 0; r < shape[0]; r++)
    std::memcpy(out + r * box_cols, all.data() + (offset[0] + r) * cols + col0, size_t(box_cols) * sizeof(float));
}

namespace {

// train.init_from as the checkpoint's recorded config says ("" if none).
std::string recorded_init_from(const Checkpoint& ckpt) {
  try {
    const toml::table config = toml::parse(ckpt.manifest().config_toml);
    return config.at_path("train.init_from").value_or(std::string());
  } catch (const toml::parse_error& e) {
    throw UserError(strprintf("checkpoint '%s': the run config it records does not parse: %s", ckpt.dir().c_str(),
                              std::string(e.description()).c_str()));
  }
}

}  // namespace

CheckpointModel::CheckpointModel(const Checkpoint& ckpt, const std::string& base_dir)
    : ckpt_(ckpt),
      cfg_(model_config_from_fields(ckpt.manifest().model, ckpt.manifest().model_real, ckpt.dir() + "/manifest.json")),
      layout_(ParamLayout::for_model(cfg_)),
      seed_(ckpt.manifest().seed) {
  if (!cfg_.lora.enabled()) return;
  // The adapters alone: the base is the run's starting point.
  const std::string init_from = base_dir.empty() ? recorded_init_from(ckpt) : "hf:" + base_dir;
  const std::string recorded = ckpt.manifest().extra.value("lora_base", std::string("(none recorded)"));
  const std::string here = lora_base_identity(init_from, seed_);
  LOOM_USER_CHECK(here == recorded,
                  "checkpoint '%s' holds LoRA adapters trained on the base '%s', but %s is '%s'%s", ckpt.dir().c_str(),
                  recorded.c_str(), init_from.empty() ? "loom's initialization" : init_from.c_str(), here.c_str(),
                  base_dir.empty() ? " (--base DIR names the base folder if it moved)" : "");
  base_source_ = init_from.empty() ? here : init_from;
  if (!init_from.empty()) hf_base_ = HfCheckpoint::open(init_from.substr(3), cfg_);
}

CheckpointModel::~CheckpointModel() = default;

const std::vector<int64_t>& CheckpointModel::global_shape(const std::string& name) const {
  const ParamSpec* p = layout_.find(name);
  LOOM_USER_CHECK(p != nullptr, "checkpoint '%s': the model has no tensor '%s'", ckpt_.dir().c_str(), name.c_str());
  return p->shape;
}

void CheckpointModel::read_region(const std::string& name, const std::vector<int64_t>& offset,
                                  const std::vector<int64_t>& shape, float* out) const {
  const ParamSpec* p = layout_.find(name);
  LOOM_USER_CHECK(p != nullptr, "checkpoint '%s': the model has no tensor '%s'", ckpt_.dir().c_str(), name.c_str());
  const ShardedTensors& t = ckpt_.tensors();
  for (const std::string& stored : {name, "master." + name})
    if (t.has(stored)) {
      LOOM_USER_CHECK(t.global_shape(stored) == p->shape,
                      "checkpoint '%s': parameter '%s' does not have the shape its model needs", ckpt_.dir().c_str(),
                      stored.c_str());
      t.read_region(stored, offset, shape, out);
      return;
    }
  LOOM_USER_CHECK(cfg_.lora.enabled(), "checkpoint '%s' has no parameter '%s'", ckpt_.dir().c_str(), name.c_str());
  if (hf_base_) {
    hf_base_->read_region(name, offset, shape, out);
    return;
  }
  // loom's own initialization: the whole tensor from the seed, then the box.
  std::vector<float> all(size_t(p->numel));
  layout_.init_range(all.data(), p->offset, p->offset + p->numel, uint64_t(seed_));
  cut_box(all, p->shape, offset, shape, out);
}

MergedLora::MergedLora(const GlobalTensors& model, const ModelConfig& cfg)
    : model_(model), cfg_(cfg), plain_(cfg), plain_layout_() {
  plain_.lora = {};
  plain_layout_ = ParamLayout::for_model(plain_);
}

bool MergedLora::has(const std::string& name) const { return plain_layout_.find(name) != nullptr; }

const std::vector<int64_t>& MergedLora::global_shape(const std::string& name) const {
  const ParamSpec* p = plain_layout_.find(name);
  LOOM_USER_CHECK(p != nullptr, "merged model: no tensor '%s'", name.c_str());
  return p->shape;
}

void MergedLora::read_region(const std::string& name, const std::vector<int64_t>& offset,
                             const std::vector<int64_t>& shape, float* out) const {
  std::vector<float> w = model_.read_global(name);
  const std::vector<int64_t>& whole = global_shape(name);
  const float s = cfg_.lora.scale();
  for (const lora::AdapterSite& site : lora::adapter_sites(cfg_)) {
    if (site.base != name) continue;
    // W[row0 + i, k] += s sum_j B[i, j] A[j, k]
    const std::vector<float> a = model_.read_global(site.a), b = model_.read_global(site.b);
    const int64_t r = cfg_.lora.rank, in = whole[1];
    for (int64_t i = 0; i < site.rows; i++)
      for (int64_t j = 0; j < r; j++) {
        const float bij = s * b[size_t(i * r + j)];
        float* row = w.data() + (site.row0 + i) * in;
        const float* arow = a.data() + j * in;
        for (int64_t k = 0; k < in; k++) row[k] += bij * arow[k];
      }
  }
  cut_box(w, whole, offset, shape, out);
}

}  // namespace loom
