// Export to Hugging Face's GPT-2 format (GPT2LMHeadModel): one
// model.safetensors with HF's tensor names and a config.json, assembled from
// the global tensors of a checkpoint of any layout.
//
// loom stores linear weights as [out, in]; HF's GPT-2 uses Conv1D, whose
// weight is [in, out], so those four per block are transposed. The LM head
// is tied to wte (HF ties it on load; it is not stored).
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/safetensors.h"

namespace loom {

struct HfExportResult {
  std::string weights_path, config_path;
  int tensors = 0;
  uint64_t bytes = 0;
};

// Where parameter `name` ("h.0.attn.c_attn.weight") is stored: under its own
// name, or as its fp32 master copy "master.<name>" if only that was saved.
// Throws UserError naming the checkpoint if neither is there.
std::string parameter_key(const Checkpoint& ckpt, const std::string& name);
// Its global values.
std::vector<float> read_parameter(const Checkpoint& ckpt, const std::string& name);

// Writes <out_dir>/model.safetensors (tensors in `dtype`: F32, BF16 or F16)
// and <out_dir>/config.json, each atomically. Throws UserError naming the
// checkpoint and tensor when a tensor is missing or has the wrong shape.
HfExportResult export_hf_gpt2(const Checkpoint& ckpt, const std::string& out_dir, StDType dtype = StDType::F32);

}  // namespace loom
