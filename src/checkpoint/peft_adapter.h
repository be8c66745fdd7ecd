// LoRA adapters in Hugging Face PEFT's format, both ways: a folder with
// adapter_config.json (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha,
// target_modules, lora_dropout, bias, fan_in_fan_out: true for GPT-2's
// Conv1D layers, base_model_name_or_path) and adapter_model.safetensors,
// whose keys are "base_model.model.<HF module path>.lora_A.weight" ([r, in])
// and ".lora_B.weight" ([out, r]) and, with bias "all", the trained biases
// under "base_model.model.<HF name>" (LLaMA's fused q/k/v bias cut in three).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/global_tensors.h"
#include "checkpoint/safetensors.h"
#include "model/config.h"

namespace loom {

struct PeftExportResult {
  std::string weights_path, config_path;
  int tensors = 0;
  uint64_t bytes = 0;
};

// Writes out_dir/adapter_model.safetensors and out_dir/adapter_config.json
// from `model` (a LoRA model of config `cfg`: its adapters and, with bias
// "all", its biases), each atomically. `base` is base_model_name_or_path.
PeftExportResult export_peft(const GlobalTensors& model, const ModelConfig& cfg, const std::string& base,
                             const std::string& out_dir, StDType dtype);

// A PEFT adapter folder read as loom's global tensors of a LoRA model of
// config `cfg`: its factors (and trained biases) by loom's names. Throws
// UserError naming the file and field when the folder's adapter is not the
// run's [lora] (another rank, alpha, targets, bias, rsLoRA or DoRA), or a
// factor is missing or mis-shaped.
class PeftAdapter : public GlobalTensors {
 public:
  static std::unique_ptr<PeftAdapter> open(const std::string& dir, const ModelConfig& cfg);
  ~PeftAdapter() override;

  bool has(const std::string& name) const override;
  const std::vector<int64_t>& global_shape(const std::string& name) const override;
  void read_region(const std::string& name, const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                   float* out) const override;
  using GlobalTensors::read_region;

 private:
  PeftAdapter() = default;
  std::string dir_;
  std::unique_ptr<SafetensorsFile> file_;
  struct Source {
    std::string key;
    std::vector<int64_t> shape;  // loom's global shape
    std::vector<std::pair<std::string, int64_t>> parts;  // stacked by rows (a fused bias); empty: key alone
  };
  std::map<std::string, Source> sources_;  // by loom name
};

}  // namespace loom
