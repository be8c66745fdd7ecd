#include "model/llama/llama_layout.h"

#include <cmath>
#include <string>
#include <vector>

namespace loom::llama {

ParamLayout make_layout(const ModelConfig& cfg, const ModelShard& shard, Tensors* out) {
  ParamLayout lay;
  lay.shard = shard;
  Tensors t;
  const int64_t C = cfg.d_model, V = cfg.vocab_size, F = cfg.ffn(), hd = cfg.head_dim();
  const int64_t q_rows = int64_t(cfg.n_head) * hd, kv_rows = int64_t(cfg.kv_heads()) * hd;
  const float std = 0.02f;
  // The residual projections scaled as GPT-2's (and Megatron's) are.
  const float proj_std = 0.02f / std::sqrt(2.0f * float(cfg.n_layer));
  const TensorSplit cols{1, {}};
  auto norm = [&](const std::string& name) {
    const int i = lay.add(name, {C}, Init::Ones, 0, {});
    lay.params[size_t(i)].sequence_partial = true;
    return i;
  };
  const TensorSplit vocab_rows{0, {shard.padded_vocab(cfg)}};
  const bool tied = cfg.tied();
  if (shard.head) {
    if (!tied) {
      t.head = lay.add("lm_head.weight", {V, C}, Init::Normal, std, vocab_rows);
      lay.params[size_t(t.head)].products_only = true;
    }
    t.norm = norm("model.norm.weight");
  }
  const int first = shard.first_layer, end = shard.layers_end(cfg);
  t.blocks.resize(size_t(end - first));
  for (int l = end - 1; l >= first; l--) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    lay.adding_block = l;
    BlockTensors& b = t.blocks[size_t(l - first)];
    b.layer = l;
    if (cfg.moe_block(l)) {
      const int64_t E = cfg.n_experts, Fe = cfg.expert_ffn();
      const std::string m = h + "block_sparse_moe.";
      // Stacks of E experts: ep ranks each hold E / ep of them.
      b.experts_down = lay.add(m + "experts.down.weight", {E * C, Fe}, Init::Normal, proj_std, TensorSplit{1, {}, E});
      std::vector<int64_t> rows;  // each expert's gate and up, split over tp
      for (int64_t e = 0; e < 2 * E; e++) rows.push_back(Fe);
      b.experts_gate_up = lay.add(m + "experts.gate_up.weight", {E * 2 * Fe, C}, Init::Normal, std, TensorSplit{0, rows, E});
      if (cfg.moe_shared_ffn > 0) {
        const int64_t Fs = cfg.moe_shared_ffn;
        b.shared_down = lay.add(m + "shared_expert.down_proj.weight", {C, Fs}, Init::Normal, proj_std, cols);
        b.shared_gate_up =
            lay.add(m + "shared_expert.gate_up_proj.weight", {2 * Fs, C}, Init::Normal, std, TensorSplit{0, {Fs, Fs}});
        b.shared_gate = lay.add(m + "shared_expert_gate.weight", {1, C}, Init::Normal, std, {});
        lay.params[size_t(b.shared_gate)].products_only = false;
        lay.params[size_t(b.shared_gate)].tp_partial = true;
      }
      b.router = lay.add(m + "gate.weight", {E, C}, Init::Normal, std, {});
      // Read in fp32 (the router is kept in fp32); each tp rank's gradient
      // comes from its slice of the experts' outputs: a partial sum.
      lay.params[size_t(b.router)].products_only = false;
      lay.params[size_t(b.router)].tp_partial = true;
      b.gate_up = b.down = -1;
    } else {
      b.down = lay.add(h + "mlp.down_proj.weight", {C, F}, Init::Normal, proj_std, cols);
      b.down_lora = lora::add_row(lay, cfg.lora, h + "mlp.down_proj", h + "mlp.down_proj", F, C);
      b.gate_up = lay.add(h + "mlp.gate_up_proj.weight", {2 * F, C}, Init::Normal, std, TensorSplit{0, {F, F}});
      b.up_lora = lora::add_column(lay, cfg.lora, h + "mlp.up_proj", h + "mlp.up_proj", C, F);
      b.gate_lora = lora::add_column(lay, cfg.lora, h + "mlp.gate_proj", h + "mlp.gate_proj", C, F);
    }
    b.mlp_norm = norm(h + "post_attention_layernorm.weight");
    b.o_proj = lay.add(h + "self_attn.o_proj.weight", {C, q_rows}, Init::Normal, proj_std, cols);
    b.o_lora = lora::add_row(lay, cfg.lora, h + "self_attn.o_proj", h + "self_attn.o_proj", q_rows, C);
    b.qkv = lay.add(h + "self_attn.qkv_proj.weight", {q_rows + 2 * kv_rows, C}, Init::Normal, std,
                    TensorSplit{0, {q_rows, kv_rows, kv_rows}});
    b.v_lora = lora::add_column(lay, cfg.lora, h + "self_attn.v_proj", h + "self_attn.v_proj", C, kv_rows);
    b.k_lora = lora::add_column(lay, cfg.lora, h + "self_attn.k_proj", h + "self_attn.k_proj", C, kv_rows);
    b.q_lora = lora::add_column(lay, cfg.lora, h + "self_attn.q_proj", h + "self_attn.q_proj", C, q_rows);
    if (cfg.qkv_bias)
      b.qkv_bias = lay.add(h + "self_attn.qkv_proj.bias", {q_rows + 2 * kv_rows}, Init::Zeros, 0,
                           TensorSplit{0, {q_rows, kv_rows, kv_rows}});
    b.attn_norm = norm(h + "input_layernorm.weight");
  }
  lay.adding_block = -1;
  if (shard.embedding || (tied && shard.head)) {
    t.embed = lay.add("model.embed_tokens.weight", {V, C}, Init::Normal, std, vocab_rows);
    lay.params[size_t(t.embed)].tied_across_stages = tied && !(shard.embedding && shard.head);
  }
  if (tied) t.head = t.embed;
  if (out) *out = std::move(t);
  return lay;
}

}  // namespace loom::llama
