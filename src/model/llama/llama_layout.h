// LLaMA's parameters: Hugging Face's LlamaForCausalLM names, except that
// q/k/v are one fused tensor (qkv_proj: q's rows, then k's, then v's) and
// gate/up another (gate_up_proj: gate's rows, then up's), so each is one
// product; the export splits them (checkpoint/hf_export). q and k rows are
// in HF's order: loom applies rotary positions with HF's rotate-half
// convention. Qwen2's q/k/v biases are one fused qkv_proj.bias the same way.
#pragma once

#include <vector>

#include "model/lora/lora_layout.h"
#include "model/param_layout.h"

namespace loom::llama {

struct BlockTensors {
  int attn_norm, qkv, o_proj, mlp_norm, gate_up, down;
  int qkv_bias = -1;  // -1: none (Qwen2 has one)
  // LoRA adapters ([lora]), one per HF projection (off where not a target):
  // q, k, v on blocks of the fused qkv product's columns, gate and up on
  // gate_up's.
  lora::Adapter q_lora, k_lora, v_lora, o_lora, gate_lora, up_lora, down_lora;
  // A mixture-of-experts block (the mixtral family; gate_up and down are
  // then -1): the router [E, C] (fp32, whole on every tp rank) and the
  // experts stacked, gate_up [E x 2F, C] (each expert's gate rows, then its
  // up rows; tp splits each by rows) and down [E x C, F] (tp splits the F
  // columns).
  int router = -1, experts_gate_up = -1, experts_down = -1;
  // model.moe_shared_ffn: the shared expert (gate_up split by rows, down by
  // columns, as the dense MLP) and its gate [1, C] (fp32, whole, tp_partial).
  int shared_gate_up = -1, shared_down = -1, shared_gate = -1;
  int layer = -1;  // the block's global index
  bool moe() const { return router >= 0; }
};

struct Tensors {
  std::vector<BlockTensors> blocks;  // blocks[l - shard.first_layer] for layer l
  int embed = -1, norm = -1, head = -1;  // head: lm_head, or embed when tied
};

ParamLayout make_layout(const ModelConfig& cfg, const ModelShard& shard, Tensors* tensors = nullptr);

}  // namespace loom::llama
