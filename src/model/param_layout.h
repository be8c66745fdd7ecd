// Where every parameter lives in the one flat parameter buffer.
//
// Tensors are laid out in the order backward produces their gradients
// (final layernorm first, last layer to first, embeddings last), each
// aligned to 64 bytes, so that the same offsets index the gradient buffer
// and a later gradient bucketing can cut it into contiguous ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/flat_layout.h"
#include "model/config.h"

namespace loom {

enum class Init : uint8_t { Normal, Zeros, Ones };

struct ParamSpec {
  std::string name;             // global name, e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;   // global shape
  int64_t offset = 0;           // in floats from the buffer start
  int64_t numel = 0;
  bool weight_decay = false;    // 2-D matrices (embeddings included)
  Init init = Init::Zeros;
  float init_std = 0.f;         // for Init::Normal
};

// The tensors of one transformer block, as indices into ParamLayout::params.
struct BlockParams {
  int ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
  int ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
};

struct ParamLayout {
  std::vector<ParamSpec> params;
  std::vector<BlockParams> blocks;  // blocks[l] for layer l
  int wte = -1, wpe = -1, lnf_w = -1, lnf_b = -1;
  int64_t total = 0;  // floats, including alignment padding

  static ParamLayout gpt2(const GPTConfig& cfg);
  const ParamSpec* find(const std::string& name) const;
  // The same tensors as plain ranges, for optim/ and parallel/.
  FlatLayout flat() const;
};

}  // namespace loom
