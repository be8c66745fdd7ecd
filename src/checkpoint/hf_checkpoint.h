// A Hugging Face checkpoint folder read as loom's global tensors:
// config.json, and model.safetensors or the shards a
// model.safetensors.index.json lists, each mapped, never read whole. The
// family's name table (model/hf_names.h) turns every loom tensor's box into
// reads of the HF tensors it comes from (transposed, or by rows from the
// stacked parts), in F32, BF16 or F16, so a rank of any layout reads only
// the bytes of its own pieces (`train.init_from = "hf:DIR"`).
//
// Supported: GPT2LMHeadModel (with or without the "transformer." prefix;
// the attn.bias / attn.masked_bias buffers ignored) and LlamaForCausalLM
// (Llama 2 and 3 without rope_scaling; tied or untied; an older
// conversion's rotary_emb.inv_freq ignored), and MistralForCausalLM (LLaMA's
// names and math, its sliding window no shorter than the run's seq_len). Everything else is refused
// naming the file and field: an unknown architecture, a config field not on
// the family's list of understood fields or with a value that changes the
// math loom does not do, a missing or mis-shaped tensor, a dtype other than
// F32 / BF16 / F16, a truncated file, an index naming a missing shard.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/global_tensors.h"
#include "checkpoint/safetensors.h"
#include "model/config.h"
#include "model/hf_names.h"

namespace loom {

struct HfModelConfig {
  std::string architecture;  // "GPT2LMHeadModel", "LlamaForCausalLM"
  ModelConfig model;         // seq_len = the position limit (GPT-2 n_positions, LLaMA max_position_embeddings)
  std::vector<std::string> notes;  // what was read but does not change loom's math (dropout: loom has none)
  // Mistral: each token attends to this many before it (0: all). loom
  // attends to the whole sequence, so it must cover model.seq_len.
  int sliding_window = 0;
};

// Reads and checks DIR/config.json.
HfModelConfig read_hf_config(const std::string& dir);

class HfCheckpoint : public GlobalTensors {
 public:
  // Opens the weights of `model` (its seq_len may be below the checkpoint's
  // position limit) and checks every tensor it needs is there with its shape.
  static std::unique_ptr<HfCheckpoint> open(const std::string& dir, const ModelConfig& model);

  bool has(const std::string& name) const override { return maps_.count(name) != 0; }
  const std::vector<int64_t>& global_shape(const std::string& name) const override;
  void read_region(const std::string& name, const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                   float* out) const override;
  using GlobalTensors::read_region;
  // HF tensors the checkpoint holds that no loom tensor reads and
  // transformers ignores too (buffers), and any other extras (reported).
  const std::vector<std::string>& unused() const { return unused_; }
  // Bytes of tensor data read so far (what this rank's pieces cover), and
  // the checkpoint's files' bytes.
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t file_bytes() const;

 private:
  struct Source {
    const SafetensorsFile* file;
    const StTensorInfo* info;
  };
  const Source& source(const std::string& hf_name) const;
  void read(const Source& s, int64_t first, int64_t n, float* out) const;

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Source> sources_;  // by HF name (GPT-2: without "transformer.")
  std::map<std::string, HfTensorMap> maps_;  // by loom name
  std::vector<std::string> unused_;
  mutable uint64_t bytes_read_ = 0;
};

}  // namespace loom
