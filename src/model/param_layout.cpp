#include "model/param_layout.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"

namespace loom {

ParamLayout ParamLayout::gpt2(const GPTConfig& cfg, const ModelShard& shard) {
  ParamLayout lay;
  lay.shard = shard;
  const int64_t C = cfg.d_model, V = cfg.vocab_size, T = cfg.seq_len, t = shard.tp_size;
  const float std = 0.02f;
  const float proj_std = 0.02f / std::sqrt(2.0f * float(cfg.n_layer));  // GPT-2's scaled residual projections
  auto add = [&](std::string name, std::vector<int64_t> shape, Init init, float init_std, TensorSplit split) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.local_shape = p.shape;
    if (split.dim >= 0) {
      if (split.padded == 0) split.padded = p.shape[size_t(split.dim)];
      p.local_shape[size_t(split.dim)] = split.padded / t;
    }
    p.split = split;
    p.numel = 1;
    for (int64_t d : p.local_shape) p.numel *= d;
    p.weight_decay = p.shape.size() >= 2;
    p.init = init;
    p.init_std = init_std;
    p.offset = lay.total;
    lay.total += (p.numel + 15) / 16 * 16;  // 64-byte alignment
    lay.params.push_back(std::move(p));
    return int(lay.params.size()) - 1;
  };
  const TensorSplit whole{}, rows{0, 1, 0}, cols{1, 1, 0}, qkv_rows{0, 3, 0};
  if (shard.head) {
    lay.lnf_w = add("ln_f.weight", {C}, Init::Ones, 0, whole);
    lay.lnf_b = add("ln_f.bias", {C}, Init::Zeros, 0, whole);
  }
  const int first = shard.first_layer, end = shard.layers_end(cfg);
  lay.blocks.resize(size_t(end - first));
  for (int l = end - 1; l >= first; l--) {
    std::string h = "h." + std::to_string(l) + ".";
    BlockParams& b = lay.blocks[size_t(l - first)];
    b.fc_proj_w = add(h + "mlp.c_proj.weight", {C, 4 * C}, Init::Normal, proj_std, cols);
    b.fc_proj_b = add(h + "mlp.c_proj.bias", {C}, Init::Zeros, 0, whole);
    b.fc_w = add(h + "mlp.c_fc.weight", {4 * C, C}, Init::Normal, std, rows);
    b.fc_b = add(h + "mlp.c_fc.bias", {4 * C}, Init::Zeros, 0, rows);
    b.ln2_w = add(h + "ln_2.weight", {C}, Init::Ones, 0, whole);
    b.ln2_b = add(h + "ln_2.bias", {C}, Init::Zeros, 0, whole);
    b.attn_proj_w = add(h + "attn.c_proj.weight", {C, C}, Init::Normal, proj_std, cols);
    b.attn_proj_b = add(h + "attn.c_proj.bias", {C}, Init::Zeros, 0, whole);
    b.qkv_w = add(h + "attn.c_attn.weight", {3 * C, C}, Init::Normal, std, qkv_rows);
    b.qkv_b = add(h + "attn.c_attn.bias", {3 * C}, Init::Zeros, 0, qkv_rows);
    b.ln1_w = add(h + "ln_1.weight", {C}, Init::Ones, 0, whole);
    b.ln1_b = add(h + "ln_1.bias", {C}, Init::Zeros, 0, whole);
  }
  if (shard.embedding) lay.wpe = add("wpe.weight", {T, C}, Init::Normal, std, whole);
  // The token table is the embedding (first stage) and the tied LM head (last).
  if (shard.embedding || shard.head)
    lay.wte = add("wte.weight", {V, C}, Init::Normal, std, TensorSplit{0, 1, shard.padded_vocab(cfg)});
  return lay;
}

void ParamLayout::init_parameters(float* buffer, uint64_t seed) const {
  for (size_t i = 0; i < params.size(); i++) {
    const ParamSpec& p = params[i];
    float* dst = buffer + p.offset;
    switch (p.init) {
      case Init::Zeros: std::fill(dst, dst + p.numel, 0.f); break;
      case Init::Ones: std::fill(dst, dst + p.numel, 1.f); break;
      case Init::Normal: {
        // Each value is keyed by its index in the global tensor.
        std::fill(dst, dst + p.numel, 0.f);  // padding rows stay 0
        const uint64_t stream = stable_hash(p.name.c_str());
        const int64_t global_cols = p.shape.size() > 1 ? p.shape[1] : 1;
        for (const TensorPiece& piece : pieces(int(i))) {
          const int64_t rows = piece.shape[0], cols = piece.shape.size() > 1 ? piece.shape[1] : 1;
          const int64_t row0 = piece.global_offset[0], col0 = piece.shape.size() > 1 ? piece.global_offset[1] : 0;
          for (int64_t r = 0; r < rows; r++) {
            // Whole rows are contiguous in the global tensor: fill them in one go.
            const int64_t n = cols == global_cols ? rows * cols : cols;
            rng_fill_normal(dst + piece.local_offset + r * cols, n, seed, stream,
                            uint64_t((row0 + r) * global_cols + col0), 0.f, p.init_std);
            if (cols == global_cols) break;
          }
        }
        break;
      }
    }
  }
}

std::vector<TensorPiece> ParamLayout::pieces(int i) const {
  const ParamSpec& p = params[size_t(i)];
  const int64_t r = shard.tp_rank;
  std::vector<TensorPiece> out;
  if (p.split.dim < 0) {
    out.push_back({std::vector<int64_t>(p.shape.size(), 0), p.shape, 0});
  } else if (p.split.dim == 0) {
    // Row blocks: each part's piece is contiguous in both tensors.
    const int64_t cols = p.shape.size() > 1 ? p.shape[1] : 1;
    const int64_t block = p.split.padded / p.split.parts, local_rows = block / shard.tp_size;
    for (int part = 0; part < p.split.parts; part++) {
      int64_t row0 = part * block + r * local_rows;
      int64_t n = std::min(local_rows, p.shape[0] - row0);  // padding rows are not part of the tensor
      if (n <= 0) continue;
      TensorPiece piece{{row0}, {n}, part * local_rows * cols};
      if (p.shape.size() > 1) piece.global_offset.push_back(0), piece.shape.push_back(cols);
      out.push_back(std::move(piece));
    }
  } else {
    const int64_t local_cols = p.local_shape[1];
    out.push_back({{0, r * local_cols}, {p.shape[0], local_cols}, 0});
  }
  return out;
}

FlatLayout ParamLayout::flat() const {
  FlatLayout f;
  for (const auto& p : params)
    f.tensors.push_back({p.offset, p.numel, p.weight_decay, p.split.dim < 0 ? shard.tp_size : 1});
  f.total = total;
  return f;
}

const ParamSpec* ParamLayout::find(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace loom
