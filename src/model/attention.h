// The attention core a block runs, chosen once per model (model.attention);
// its kernels are the backend's (kernels/backend.h):
//   materialized  kernels/cpu/attention*.h: keeps the softmax probabilities,
//                 B x NH x T x T, for backward
//   tiled         kernels/cpu/attention_tiled.h: keeps one log-sum-exp per
//                 query row, B x NH x T fp32, and recomputes the tiles in
//                 backward (FlashAttention's memory, at T = 8192 and 12 heads
//                 0.4 MiB per sequence and layer instead of 3 GiB)
// With context parallelism (parallel/cp/) the tiled core runs over the cp
// group's ring of key/value blocks. The object owns the kernels' work space,
// sized once for the largest micro-batch, so a step allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "kernels/backend.h"

namespace loom {

class RingAttention;

class Attention {
 public:
  // ring: the cp group's ring (tiled only); null without context parallelism.
  Attention() = default;
  Attention(Backend& ops, bool tiled, RingAttention* ring = nullptr) : ops_(&ops), tiled_(tiled), ring_(ring) {}
  bool tiled() const { return tiled_; }

  // fp32 work space, in floats, for micro-batches up to B x T on the local
  // heads (C = NH x head size), 16-bit storage or not, `threads` threads,
  // on a ring of cp ranks (1: none).
  static size_t work_floats(bool tiled, bool lowp, int cp, int B, int T, int C, int NH, int NKV, int threads);
  void reserve(bool lowp, int B, int T, int C, int NH, int NKV);
  size_t work_bytes() const { return work_floats_ * sizeof(float); }
  // What forward keeps for backward, in bytes (a = bytes of a compute-type
  // element): the probabilities (compute type) or the row log-sum-exps (fp32).
  static size_t saved_bytes(bool tiled, int B, int T, int NH, size_t a);
  // Backward's fp32 scratch, in floats (materialized only).
  static size_t scratch_floats(bool tiled, int B, int T, int NH);

  // out[B,T,C] from qkv[B,T,(NH + 2 NKV) hs] (A = float, bf16 or f16).
  // Packed rows: doc[B,T] holds each row's document start (its global
  // position; kernels/cpu/attention_common.h); null: one document a row.
  template <class A>
  void forward(A* out, void* saved, const A* qkv, int B, int T, int C, int NH, int NKV,
               const int32_t* doc = nullptr);
  // dqkv (overwritten) from dout[B,T,C] (fp32) and the forward's qkv, out,
  // saved, with the forward's doc.
  template <class A>
  void backward(A* dqkv, float* scratch, const float* dout, const A* qkv, const A* out, const void* saved, int B,
                int T, int C, int NH, int NKV, const int32_t* doc = nullptr);

 private:
  Backend* ops_ = nullptr;
  bool tiled_ = false;
  RingAttention* ring_ = nullptr;
  Arena work_;  // the backend's memory: per-thread tiles (tiled) or rows (16-bit materialized); then widened copies
  size_t work_floats_ = 0;
  size_t thread_floats_ = 0;  // the per-thread part at the front of work_
};

}  // namespace loom
