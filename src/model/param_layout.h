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
// tensor is a stack of blocks (`blocks`: their lengths there, padding
// included; one block by default, three for a fused q/k/v projection, two
// for a fused gate/up); rank r holds piece r of each block, the pieces
// concatenated block by block.
struct TensorSplit {
  int dim = -1;                 // -1: not split (every tp rank holds all of it)
  std::vector<int64_t> blocks;  // empty: one block, the whole length along dim
  // > 0: dim 0 stacks this many equal experts' slabs, and each of the
  // shard's ep ranks holds its E / ep consecutive ones (a window of rows;
  // `blocks` then cut the window as they cut the whole).
  int64_t experts = 0;
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
  TensorSplit split;  // experts: blocks already those of this rank's window
  int64_t row0 = 0, rows = 0;  // the global rows [row0, row0 + rows) the rank's part comes from (expert window)
  int64_t offset = 0;  // in floats from the buffer start
  int64_t numel = 0;   // local
  bool weight_decay = false;  // 2-D matrices (embeddings included)
  Init init = Init::Zeros;
  float init_std = 0.f;  // for Init::Normal
  uint64_t init_salt = 0;  // mixed into the tensor's RNG stream (LoRA's lora.seed); 0: the name alone
  // Family facts the train loop acts on without knowing the family:
  // with sequence parallelism each tp rank's gradient covers only its rows
  // (norm weights, a position table): summed over the tp group once a step.
  bool sequence_partial = false;
  // Its gradient is a partial sum on each tp rank whatever the sequence
  // split (a LoRA factor kept whole beside a split one): summed over the tp
  // group once a step.
  bool tp_partial = false;
  // Held by the first stage (embedding) and the last (tied head) under
  // pipeline parallelism: the two copies' gradients are summed.
  bool tied_across_stages = false;
  // The block the tensor belongs to (-1: embedding, final norm or head):
  // ZeRO-3 gathers a block's tensors together.
  int block = -1;
  // Read only by matrix products (in mixed precision through the 16-bit
  // copy): with sharded master weights no rank needs its fp32 values whole.
  bool products_only = false;
};

struct ParamLayout {
  std::vector<ParamSpec> params;
  int64_t total = 0;  // floats, including alignment padding
  ModelShard shard;
  // While a family adds block l's tensors: l (add() records it; 2-D tensors
  // of a block are products_only).
  int adding_block = -1;

  // The layout of `cfg`'s family (model/<family>/): tensors in backward order.
  static ParamLayout for_model(const ModelConfig& cfg, const ModelShard& shard = {});
  // Appends a tensor (64-byte aligned) and returns its index: the family
  // layouts' one way to add one. init_std is for Init::Normal.
  int add(std::string name, std::vector<int64_t> shape, Init init, float init_std, TensorSplit split = {});
  const ParamSpec* find(const std::string& name) const;
  // Its index; -1 when this shard does not hold it.
  int index_of(const std::string& name) const;
  // Indices of the tensors with the flag set.
  std::vector<int> sequence_partial() const;
  std::vector<int> tied_across_stages() const;
  // The same tensors as plain ranges, for optim/ and parallel/.
  FlatLayout flat() const;
  // The rectangles of the global tensor that params[i] holds (padding rows
  // belong to none).
  std::vector<TensorPiece> pieces(int i) const;
  // Initialization of buffer[total]: each value comes from the
  // counter-based RNG keyed by (seed, tensor name, index in the global
  // tensor), so every layout starts from the same weights; padding is 0.
  void init_parameters(float* buffer, uint64_t seed) const;
  // The same values for the flat range [begin, end) only, into out[end - begin]
  // (a ZeRO shard fills its part without the whole buffer).
  void init_range(float* out, int64_t begin, int64_t end, uint64_t seed) const;
};

}  // namespace loom
