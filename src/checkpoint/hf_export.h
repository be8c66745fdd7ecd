// Export to Hugging Face's formats: one model.safetensors with HF's tensor
// names and a config.json, assembled from the global tensors of a checkpoint
// of any layout. The family's name table (model/hf_names.h: GPT-2's Conv1D
// weights transposed, LLaMA's fused projections cut by rows) is the one
// import reads too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/safetensors.h"
#include "model/config.h"

namespace loom {

struct HfExportResult {
  std::string weights_path, config_path;
  int tensors = 0;
  uint64_t bytes = 0;
};

// What config.json says generate() starts and stops with. loom's tokenizers
// (`loom prepare`) have an end-of-text piece and no beginning-of-text one;
// every training document follows the previous one's end-of-text, so that id
// is both HF's eos_token_id and bos_token_id (GPT-2's <|endoftext|>
// convention). Byte-level data has neither: both null, and generate() runs to
// max_new_tokens, as `loom generate` does.
struct HfSpecialTokens {
  std::optional<int> bos, eos;  // nullopt: null
  static HfSpecialTokens from_eos(std::optional<int> eos) { return {eos, eos}; }
};

struct HfExportOptions {
  StDType dtype = StDType::F32;  // of the tensors: F32, BF16 or F16
  HfSpecialTokens tokens;
  // A LoRA checkpoint (adapters alone): fold them into the base (required
  // for a plain model), and where the base is if its folder moved ("":
  // where the run took it).
  bool merge_lora = false;
  std::string base_dir;
  // A mixture of experts balanced by aux_free biases: MixtralForCausalLM has
  // no place for them, so export refuses unless told to leave them out (the
  // exported model then routes by the router's softmax alone).
  bool drop_router_bias = false;
};

// The data a checkpoint's run read, as its recorded config names it:
// data.format ("shards" or "bytes") and data.path (as written, unresolved).
struct RunData {
  std::string format, path;
};
// Throws UserError naming `origin` if the recorded config does not parse.
RunData run_data(const CheckpointManifest& m, const std::string& origin);

// Where parameter `name` ("h.0.attn.c_attn.weight") is stored: under its own
// name, or as its fp32 master copy "master.<name>" if only that was saved.
// Throws UserError naming the checkpoint if neither is there.
std::string parameter_key(const Checkpoint& ckpt, const std::string& name);
// Its global values.
std::vector<float> read_parameter(const Checkpoint& ckpt, const std::string& name);

// Writes <out_dir>/model.safetensors and <out_dir>/config.json for the
// checkpoint's model family, each atomically. Throws UserError naming the
// checkpoint and tensor when a tensor is missing or has the wrong shape.
// A LoRA checkpoint needs opt.merge_lora (checkpoint/checkpoint_model.h).
HfExportResult export_hf(const Checkpoint& ckpt, const std::string& out_dir, const HfExportOptions& opt = {});
// The same from any global tensors of model `cfg` (`origin` names them in errors).
HfExportResult export_hf(const GlobalTensors& model, const ModelConfig& cfg, int64_t step, const std::string& origin,
                         const std::string& out_dir, const HfExportOptions& opt);

}  // namespace loom
