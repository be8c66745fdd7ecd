// GPT-2's parameters: names (Hugging Face's GPT-2 names without the
// "transformer." prefix), shapes, tensor-parallel splits, initialization.
#pragma once

#include <vector>

#include "model/lora/lora_layout.h"
#include "model/param_layout.h"

namespace loom::gpt2 {

// One block's tensors, as indices into ParamLayout::params.
struct BlockTensors {
  int ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
  int ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
  // LoRA adapters ([lora]) on the four products; off where not a target.
  lora::Adapter qkv_lora, attn_proj_lora, fc_lora, fc_proj_lora;
};

struct Tensors {
  std::vector<BlockTensors> blocks;  // blocks[l - shard.first_layer] for layer l
  int wte = -1, wpe = -1, lnf_w = -1, lnf_b = -1;  // -1 where the shard has none
};

// Tensors in backward order (ln_f first, last block to first, embeddings
// last); the tied token table on the first and the last stage.
ParamLayout make_layout(const ModelConfig& cfg, const ModelShard& shard, Tensors* tensors = nullptr);

}  // namespace loom::gpt2
