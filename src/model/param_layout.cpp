#include "model/param_layout.h"

#include <cmath>

namespace loom {

ParamLayout ParamLayout::gpt2(const GPTConfig& cfg) {
  ParamLayout lay;
  const int64_t C = cfg.d_model, V = cfg.vocab_size, T = cfg.seq_len;
  const float std = 0.02f;
  const float proj_std = 0.02f / std::sqrt(2.0f * float(cfg.n_layer));  // GPT-2's scaled residual projections
  auto add = [&](std::string name, std::vector<int64_t> shape, Init init, float init_std = 0.f) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    p.weight_decay = p.shape.size() >= 2;
    p.init = init;
    p.init_std = init_std;
    p.offset = lay.total;
    lay.total += (p.numel + 15) / 16 * 16;  // 64-byte alignment
    lay.params.push_back(std::move(p));
    return int(lay.params.size()) - 1;
  };
  lay.lnf_w = add("ln_f.weight", {C}, Init::Ones);
  lay.lnf_b = add("ln_f.bias", {C}, Init::Zeros);
  lay.blocks.resize(cfg.n_layer);
  for (int l = cfg.n_layer - 1; l >= 0; l--) {
    std::string h = "h." + std::to_string(l) + ".";
    BlockParams& b = lay.blocks[l];
    b.fc_proj_w = add(h + "mlp.c_proj.weight", {C, 4 * C}, Init::Normal, proj_std);
    b.fc_proj_b = add(h + "mlp.c_proj.bias", {C}, Init::Zeros);
    b.fc_w = add(h + "mlp.c_fc.weight", {4 * C, C}, Init::Normal, std);
    b.fc_b = add(h + "mlp.c_fc.bias", {4 * C}, Init::Zeros);
    b.ln2_w = add(h + "ln_2.weight", {C}, Init::Ones);
    b.ln2_b = add(h + "ln_2.bias", {C}, Init::Zeros);
    b.attn_proj_w = add(h + "attn.c_proj.weight", {C, C}, Init::Normal, proj_std);
    b.attn_proj_b = add(h + "attn.c_proj.bias", {C}, Init::Zeros);
    b.qkv_w = add(h + "attn.c_attn.weight", {3 * C, C}, Init::Normal, std);
    b.qkv_b = add(h + "attn.c_attn.bias", {3 * C}, Init::Zeros);
    b.ln1_w = add(h + "ln_1.weight", {C}, Init::Ones);
    b.ln1_b = add(h + "ln_1.bias", {C}, Init::Zeros);
  }
  lay.wpe = add("wpe.weight", {T, C}, Init::Normal, std);
  lay.wte = add("wte.weight", {V, C}, Init::Normal, std);
  return lay;
}

FlatLayout ParamLayout::flat() const {
  FlatLayout f;
  for (const auto& p : params) f.tensors.push_back({p.offset, p.numel, p.weight_decay});
  f.total = total;
  return f;
}

const ParamSpec* ParamLayout::find(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace loom
