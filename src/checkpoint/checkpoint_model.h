// A checkpoint's whole model as global tensors, for the tools that read a
// checkpoint outside training (`loom export`, `loom generate`).
//
// A full run's checkpoint holds every parameter (under its name, or its fp32
// master copy "master.<name>"). A LoRA run's holds the adapters alone
// (train/replica.h): the frozen base comes from where the run took it, the
// Hugging Face folder of its train.init_from (or `base_dir` given instead)
// or loom's own initialization from train.seed, and must be the base the
// checkpoint records (checkpoint/base_fingerprint.h), else UserError.
//
// MergedLora: the same model with each adapter folded into its base tensor
// (W + (alpha / r) B A on the adapter's rows) and no adapter tensors: the
// plain model (`loom export --format hf --merge`).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/global_tensors.h"
#include "model/config.h"
#include "model/param_layout.h"

namespace loom {

class CheckpointModel : public GlobalTensors {
 public:
  explicit CheckpointModel(const Checkpoint& ckpt, const std::string& base_dir = "");
  ~CheckpointModel() override;

  const ModelConfig& config() const { return cfg_; }
  const Checkpoint& checkpoint() const { return ckpt_; }
  // Where the base comes from: "" (the checkpoint holds it), "hf:DIR" or "init seed N".
  const std::string& base_source() const { return base_source_; }

  bool has(const std::string& name) const override { return layout_.find(name) != nullptr; }
  const std::vector<int64_t>& global_shape(const std::string& name) const override;
  void read_region(const std::string& name, const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                   float* out) const override;
  using GlobalTensors::read_region;

 private:
  const Checkpoint& ckpt_;
  ModelConfig cfg_;
  ParamLayout layout_;  // the whole model's, with the adapters
  std::string base_source_;
  int64_t seed_ = 0;
  std::unique_ptr<GlobalTensors> hf_base_;
};

class MergedLora : public GlobalTensors {
 public:
  // `model` holds a LoRA model of config `cfg` (with adapters).
  MergedLora(const GlobalTensors& model, const ModelConfig& cfg);
  // The merged model's config: `cfg` without [lora].
  const ModelConfig& config() const { return plain_; }

  bool has(const std::string& name) const override;
  const std::vector<int64_t>& global_shape(const std::string& name) const override;
  void read_region(const std::string& name, const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                   float* out) const override;
  using GlobalTensors::read_region;

 private:
  const GlobalTensors& model_;
  ModelConfig cfg_, plain_;
  ParamLayout plain_layout_;
};

// The box [offset, offset + shape) of a whole row-major tensor `all` of
// shape `whole`, into out (1-D or 2-D).
void cut_box(const std::vector<float>& all, const std::vector<int64_t>& whole, const std::vector<int64_t>& offset,
             const std::vector<int64_t>& shape, float* out);

}  // namespace loom
