// Where every parameter lives in the one flat parameter buffer, and which
// part of the global tensor each local tensor is.
//
// Tensors are laid out in the order backward produces their gradients
// (final layernorm first, last layer to first, embeddings last), each
// aligned to 64 bytes, so that the same offsets index the gradient buffer
// and gradient bucketing can cut it into contiguous ranges. Under tensor
// parallelism a rank's layout holds its slices (ModelShard), every tp rank
// with the same sizes, so data-parallel buckets and ZeRO shards line up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/flat_layout.h"
#include "model/config.h"
#include "model/shard.h"

namespace loom {

enum class Init : uint8_t { Normal, Zeros, Ones };

// How a tensor is split over the tensor-parallel ranks. Along `dim` the global
// tensor (of `padded` rows/columns there, padding included) is viewed as
// `parts` equal blocks (3 for the fused QKV: q, k and v); rank r holds piece r
// of each block, the pieces concatenated block by block.
struct TensorSplit {
  int dim = -1;        // -1: not split (every tp rank holds all of it)
  int parts = 1;
  int64_t padded = 0;  // length along dim with padding (>= the global shape's)
};

// A rectangle of the global tensor that a rank holds, stored contiguously
// (row-major, piece shape) at local_offset floats from the tensor's start.
struct TensorPiece {
  std::vector<int64_t> global_offset, shape;
  int64_t local_offset = 0;
};

struct ParamSpec {
  std::string name;                  // global name, e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;        // global shape
  std::vector<int64_t> local_shape;  // this rank's slice (padding included)
  TensorSplit split;
  int64_t offset = 0;  // in floats from the buffer start
  int64_t numel = 0;   // local
  bool weight_decay = false;  // 2-D matrices (embeddings included)
  Init init = Init::Zeros;
  float init_std = 0.f;  // for Init::Normal
};

// The tensors of one transformer block, as indices into ParamLayout::params.
struct BlockParams {
  int ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
  int ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
};

struct ParamLayout {
  std::vector<ParamSpec> params;
  std::vector<BlockParams> blocks;  // blocks[l - shard.first_layer] for layer l
  int wte = -1, wpe = -1, lnf_w = -1, lnf_b = -1;  // -1 where the shard has none
  int64_t total = 0;  // floats, including alignment padding
  ModelShard shard;

  static ParamLayout gpt2(const GPTConfig& cfg, const ModelShard& shard = {});
  const ParamSpec* find(const std::string& name) const;
  // The same tensors as plain ranges, for optim/ and parallel/.
  FlatLayout flat() const;
  // The rectangles of the global tensor that params[i] holds (padding rows
  // belong to none).
  std::vector<TensorPiece> pieces(int i) const;
  // GPT-2 initialization of buffer[total]: each value comes from the
  // counter-based RNG keyed by (seed, tensor name, index in the global
  // tensor), so every layout starts from the same weights; padding is 0.
  void init_parameters(float* buffer, uint64_t seed) const;
};

}  // namespace loom
