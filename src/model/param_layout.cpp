#include "model/param_layout.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/rng.h"

namespace loom {

int ParamLayout::add(std::string name, std::vector<int64_t> shape, Init init, float init_std, TensorSplit split) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.local_shape = p.shape;
  p.rows = p.shape.empty() ? 1 : p.shape[0];
  if (split.experts > 0 && shard.ep_size > 1) {
    const int ep = shard.ep_size;
    LOOM_CHECK(split.experts % ep == 0 && p.shape[0] % ep == 0, "%s: %lld experts do not split over %d ep ranks",
               p.name.c_str(), (long long)split.experts, ep);
    p.rows = p.shape[0] / ep, p.row0 = p.rows * shard.ep_rank;
    p.local_shape[0] = p.rows;
    if (split.dim == 0) {  // the blocks of this rank's window
      LOOM_CHECK(split.blocks.size() % size_t(ep) == 0, "%s: blocks do not split over ep", p.name.c_str());
      const size_t per = split.blocks.size() / size_t(ep), from = per * size_t(shard.ep_rank);
      split.blocks = std::vector<int64_t>(split.blocks.begin() + long(from), split.blocks.begin() + long(from + per));
    }
  }
  if (split.dim >= 0) {
    if (split.blocks.empty()) split.blocks = {p.local_shape[size_t(split.dim)]};
    int64_t padded = 0;
    for (int64_t b : split.blocks) {
      LOOM_CHECK(b % shard.tp_size == 0, "%s: a block of %lld rows does not split over %d tp ranks", p.name.c_str(),
                 (long long)b, shard.tp_size);
      padded += b;
    }
    p.local_shape[size_t(split.dim)] = padded / shard.tp_size;
  }
  p.split = std::move(split);
  p.numel = 1;
  for (int64_t d : p.local_shape) p.numel *= d;
  p.weight_decay = p.shape.size() >= 2;
  p.block = adding_block;
  p.products_only = adding_block >= 0 && p.shape.size() >= 2;
  p.init = init;
  p.init_std = init_std;
  p.offset = total;
  total += (p.numel + 15) / 16 * 16;  // 64-byte alignment
  params.push_back(std::move(p));
  return int(params.size()) - 1;
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
        const uint64_t stream = stable_hash(p.name.c_str()) ^ p.init_salt;
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

void ParamLayout::init_range(float* out, int64_t begin, int64_t end, uint64_t seed) const {
  std::fill(out, out + (end - begin), 0.f);  // padding stays 0
  for (size_t i = 0; i < params.size(); i++) {
    const ParamSpec& p = params[i];
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    if (p.init == Init::Ones) std::fill(out + (lo - begin), out + (hi - begin), 1.f);
    if (p.init != Init::Normal) continue;
    const uint64_t stream = stable_hash(p.name.c_str()) ^ p.init_salt;
    const int64_t global_cols = p.shape.size() > 1 ? p.shape[1] : 1;
    for (const TensorPiece& piece : pieces(int(i))) {
      const int64_t cols = piece.shape.size() > 1 ? piece.shape[1] : 1;
      const int64_t row0 = piece.global_offset[0], col0 = piece.shape.size() > 1 ? piece.global_offset[1] : 0;
      // Row r of the piece: local [start, start + cols), global index (row0 + r) x global_cols + col0 on.
      const int64_t first = p.offset + piece.local_offset;
      const int64_t r_lo = std::max<int64_t>(0, (lo - first) / cols);
      const int64_t r_hi = std::min<int64_t>(piece.shape[0], (hi - first + cols - 1) / cols);
      for (int64_t r = r_lo; r < r_hi; r++) {
        const int64_t start = first + r * cols;
        const int64_t a = std::max(lo, start), b = std::min(hi, start + cols);
        if (a >= b) continue;
        rng_fill_normal(out + (a - begin), b - a, seed, stream, uint64_t((row0 + r) * global_cols + col0 + (a - start)),
                        0.f, p.init_std);
      }
    }
  }
}

std::vector<TensorPiece> ParamLayout::pieces(int i) const {
  const ParamSpec& p = params[size_t(i)];
  const int64_t r = shard.tp_rank;
  std::vector<TensorPiece> out;
  if (p.split.dim < 0) {
    std::vector<int64_t> at(p.shape.size(), 0), shape = p.shape;
    if (!shape.empty()) at[0] = p.row0, shape[0] = p.rows;
    out.push_back({at, shape, 0});
  } else if (p.split.dim == 0) {
    // Row blocks: each part's piece is contiguous in both tensors.
    const int64_t cols = p.shape.size() > 1 ? p.shape[1] : 1;
    int64_t block_row0 = p.row0, local_row0 = 0;
    for (int64_t block : p.split.blocks) {
      const int64_t local_rows = block / shard.tp_size;
      const int64_t row0 = block_row0 + r * local_rows;
      const int64_t n = std::min(local_rows, p.row0 + p.rows - row0);  // padding rows are not part of the tensor
      if (n > 0) {
        TensorPiece piece{{row0}, {n}, local_row0 * cols};
        if (p.shape.size() > 1) piece.global_offset.push_back(0), piece.shape.push_back(cols);
        out.push_back(std::move(piece));
      }
      block_row0 += block, local_row0 += local_rows;
    }
  } else {
    const int64_t local_cols = p.local_shape[1];
    out.push_back({{p.row0, r * local_cols}, {p.rows, local_cols}, 0});
  }
  return out;
}

FlatLayout ParamLayout::flat() const {
  FlatLayout f;
  for (const auto& p : params)
    f.tensors.push_back({p.offset, p.numel, p.weight_decay, p.split.dim < 0 ? shard.tp_size : 1, p.products_only});
  f.total = total;
  return f;
}

const ParamSpec* ParamLayout::find(const std::string& name) const {
  const int i = index_of(name);
  return i < 0 ? nullptr : &params[size_t(i)];
}

int ParamLayout::index_of(const std::string& name) const {
  for (size_t i = 0; i < params.size(); i++)
    if (params[i].name == name) return int(i);
  return -1;
}

std::vector<int> ParamLayout::sequence_partial() const {
  std::vector<int> out;
  for (size_t i = 0; i < params.size(); i++)
    if (params[i].sequence_partial) out.push_back(int(i));
  return out;
}

std::vector<int> ParamLayout::tied_across_stages() const {
  std::vector<int> out;
  for (size_t i = 0; i < params.size(); i++)
    if (params[i].tied_across_stages) out.push_back(int(i));
  return out;
}

}  // namespace loom
