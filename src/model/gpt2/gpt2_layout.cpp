#include "model/gpt2/gpt2_layout.h"

#include <cmath>
#include <string>

namespace loom::gpt2 {

ParamLayout make_layout(const ModelConfig& cfg, const ModelShard& shard, Tensors* out) {
  ParamLayout lay;
  lay.shard = shard;
  Tensors t;
  const int64_t C = cfg.d_model, V = cfg.vocab_size, T = cfg.seq_len, F = cfg.ffn();
  const float std = 0.02f;
  const float proj_std = 0.02f / std::sqrt(2.0f * float(cfg.n_layer));  // GPT-2's scaled residual projections
  const TensorSplit whole{}, rows{0, {}}, cols{1, {}}, qkv_rows{0, {C, C, C}};
  // Norms (and the position table) see only their rows under sequence parallelism.
  auto norm = [&](const std::string& name, Init init) {
    const int i = lay.add(name, {C}, init, 0, whole);
    lay.params[size_t(i)].sequence_partial = true;
    return i;
  };
  if (shard.head) {
    t.lnf_w = norm("ln_f.weight", Init::Ones);
    t.lnf_b = norm("ln_f.bias", Init::Zeros);
  }
  const int first = shard.first_layer, end = shard.layers_end(cfg);
  t.blocks.resize(size_t(end - first));
  for (int l = end - 1; l >= first; l--) {
    std::string h = "h." + std::to_string(l) + ".";
    lay.adding_block = l;
    BlockTensors& b = t.blocks[size_t(l - first)];
    b.fc_proj_w = lay.add(h + "mlp.c_proj.weight", {C, F}, Init::Normal, proj_std, cols);
    b.fc_proj_lora = lora::add_row(lay, cfg.lora, h + "mlp.c_proj", "transformer." + h + "mlp.c_proj", F, C);
    b.fc_proj_b = lay.add(h + "mlp.c_proj.bias", {C}, Init::Zeros, 0, whole);
    b.fc_w = lay.add(h + "mlp.c_fc.weight", {F, C}, Init::Normal, std, rows);
    b.fc_lora = lora::add_column(lay, cfg.lora, h + "mlp.c_fc", "transformer." + h + "mlp.c_fc", C, F);
    b.fc_b = lay.add(h + "mlp.c_fc.bias", {F}, Init::Zeros, 0, rows);
    b.ln2_w = norm(h + "ln_2.weight", Init::Ones);
    b.ln2_b = norm(h + "ln_2.bias", Init::Zeros);
    b.attn_proj_w = lay.add(h + "attn.c_proj.weight", {C, C}, Init::Normal, proj_std, cols);
    b.attn_proj_lora = lora::add_row(lay, cfg.lora, h + "attn.c_proj", "transformer." + h + "attn.c_proj", C, C);
    b.attn_proj_b = lay.add(h + "attn.c_proj.bias", {C}, Init::Zeros, 0, whole);
    b.qkv_w = lay.add(h + "attn.c_attn.weight", {3 * C, C}, Init::Normal, std, qkv_rows);
    b.qkv_lora = lora::add_column(lay, cfg.lora, h + "attn.c_attn", "transformer." + h + "attn.c_attn", C, 3 * C,
                                  {C, C, C});
    b.qkv_b = lay.add(h + "attn.c_attn.bias", {3 * C}, Init::Zeros, 0, qkv_rows);
    b.ln1_w = norm(h + "ln_1.weight", Init::Ones);
    b.ln1_b = norm(h + "ln_1.bias", Init::Zeros);
  }
  lay.adding_block = -1;
  if (shard.embedding) {
    t.wpe = lay.add("wpe.weight", {T, C}, Init::Normal, std, whole);
    lay.params[size_t(t.wpe)].sequence_partial = true;
  }
  // The token table is the embedding (first stage) and the tied LM head (last).
  if (shard.embedding || shard.head) {
    t.wte = lay.add("wte.weight", {V, C}, Init::Normal, std, TensorSplit{0, {shard.padded_vocab(cfg)}});
    lay.params[size_t(t.wte)].tied_across_stages = !(shard.embedding && shard.head);
  }
  if (out) *out = std::move(t);
  return lay;
}

}  // namespace loom::gpt2
