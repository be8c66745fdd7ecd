// ModelShard: which part of the global model one rank holds.
//
// Tensor parallelism (Megatron-LM's scheme) splits every block's matrices
// over tp ranks: QKV and the first MLP linear by output rows (column-parallel),
// the two output projections by input columns (row-parallel), the token
// embedding by vocabulary rows. Norms and the row-parallel biases stay whole
// on every rank. Sequence parallelism additionally splits the rows of the
// residual stream (the B x T tokens) between the tensor-parallel regions.
// Pipeline parallelism gives each stage a contiguous range of blocks; the
// first holds the embeddings, the last the final norm and the (tied) head.
// Expert parallelism gives each of ep ranks E / ep consecutive experts of
// every MoE block (TensorSplit::experts), split over tp within.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace loom {

struct ModelShard {
  int tp_rank = 0, tp_size = 1;
  bool sequence_parallel = false;
  int first_layer = 0, end_layer = -1;  // blocks [first_layer, end_layer); -1: n_layer
  bool embedding = true;                 // holds the token (and position) table, does the input lookup
  bool head = true;                      // holds the final norm and the LM head (tied: a copy of the token table)
  int ep_rank = 0, ep_size = 1;          // experts [ep_rank E / ep_size, (ep_rank + 1) E / ep_size)

  int layers_end(const ModelConfig& cfg) const { return end_layer < 0 ? cfg.n_layer : end_layer; }
  int num_layers(const ModelConfig& cfg) const { return layers_end(cfg) - first_layer; }
  int local_experts(const ModelConfig& cfg) const { return cfg.n_experts / ep_size; }
  int first_expert(const ModelConfig& cfg) const { return ep_rank * local_experts(cfg); }
  // Vocabulary rows of the embedding table: padded to a multiple of 64 x tp
  // when split (every rank the same count; padding rows are zero and masked
  // out of the loss); unpadded on one rank.
  int64_t padded_vocab(const ModelConfig& cfg) const {
    if (tp_size == 1) return cfg.vocab_size;
    const int64_t m = 64 * int64_t(tp_size);
    return (cfg.vocab_size + m - 1) / m * m;
  }
  int64_t vocab_per_rank(const ModelConfig& cfg) const { return padded_vocab(cfg) / tp_size; }
  int64_t vocab_begin(const ModelConfig& cfg) const { return vocab_per_rank(cfg) * tp_rank; }
  // Real (unpadded) vocabulary rows on this rank.
  int64_t vocab_valid(const ModelConfig& cfg) const {
    int64_t end = vocab_begin(cfg) + vocab_per_rank(cfg);
    int64_t valid = (end < cfg.vocab_size ? end : cfg.vocab_size) - vocab_begin(cfg);
    return valid > 0 ? valid : 0;
  }
};

}  // namespace loom
