// Causal self-attention without the T x T probability matrix (Dao et al.,
// FlashAttention), fp32 math, on the same qkv layout as attention.h
// (multi-head or grouped-query). Forward runs over tiles of queries and keys
// with an online softmax and keeps only the output and each row's
// log-sum-exp; backward recomputes each tile's probabilities from them.
// Extra memory is O(T) per head plus a fixed per-thread tile work space,
// against the materialized kernel's B x NH x T x T.
//
// The span calls attend a run of query rows to a run of key rows at given
// global positions (causal: key position <= query position; packed rows:
// and in the query's document, whose key tiles alone are visited) and merge into
// what earlier spans gave, so a caller can visit the keys in blocks, in any
// order: context parallelism (parallel/cp/) passes key/value blocks around
// a ring this way. The whole-sequence calls are one span.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace loom::cpu {

// Per-thread work space the tiled kernels need, in floats, for `threads`
// OpenMP threads.
size_t attention_tiled_work_floats(int threads);

// Whole sequence, fp32. out[B,T,C]; lse[B,NH,T]: each query row's
// log-sum-exp of its scaled scores (kept for backward).
void attention_tiled_forward(float* out, float* lse, const float* qkv, float* work, int B, int T, int C, int NH,
                             int NKV = 0, const int32_t* doc = nullptr);
// dqkv[B,T,(NH + 2 NKV) x hs] = gradient (overwrites), from the forward's
// out and lse; a kv head's gradient sums over its query heads in order.
void attention_tiled_backward(float* dqkv, float* work, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int C, int NH, int NKV = 0,
                              const int32_t* doc = nullptr);

// Whole sequence, 16-bit storage: qkv and out in H (bf16 or f16), math in
// fp32 on copies widened into `wide` (attention_tiled_wide_floats), out
// rounded once; dout and lse fp32; dqkv rounded once.
size_t attention_tiled_wide_floats(int B, int T, int C, int NH, int NKV = 0);
template <class H>
void attention_tiled_forward(H* out, float* lse, const H* qkv, float* wide, float* work, int B, int T, int C, int NH,
                             int NKV = 0, const int32_t* doc = nullptr);
template <class H>
void attention_tiled_backward(H* dqkv, float* wide, float* work, const float* dout, const H* qkv, const H* out,
                              const float* lse, int B, int T, int C, int NH, int NKV = 0,
                              const int32_t* doc = nullptr);

// Keys and values [B, T, ld]: kv head g's keys at column kofs + g hs, its
// values at vofs + g hs (qkv itself: ld = C + 2 NKV hs, kofs = C,
// vofs = C + NKV hs; a packed block: ld = 2 NKV hs, kofs = 0, vofs = NKV hs).
struct KvRows {
  const float* base;
  int T;
  int64_t ld, kofs, vofs;
};
struct KvGradRows {  // their gradient, same layout
  float* base;
  int64_t ld, kofs, vofs;
};
// Query rows [q0, q0 + nq) of qkv[B,Tq,...] at global positions q_pos.., and
// key rows [k0, k0 + nk) of a KvRows at positions k_pos... Packed rows:
// doc[B,Tq] gives each query row's document start (a global position; it
// sees keys from there to itself: attention_common.h), null: none.
struct AttnSpan {
  int q0, nq, q_pos;
  int k0, nk, k_pos;
  const int32_t* doc = nullptr;
};

// Marks lse[B,NH,Tq] empty (-inf): no keys seen yet.
void attention_tiled_begin(float* lse, int B, int Tq, int NH);
// Merges the span's keys into out[B,Tq,C] and lse (normalized output and
// log-sum-exp of what the row has seen; out rows with lse = -inf are
// ignored and overwritten).
void attention_tiled_forward_span(float* out, float* lse, const float* qkv, int Tq, const KvRows& kv,
                                  const AttnSpan& s, float* work, int B, int C, int NH, int NKV = 0);
// Adds the span's share of the gradient to the query part of dqkv[B,Tq,...]
// and to dkv, given the finished forward's out and lse.
void attention_tiled_backward_span(float* dqkv, const KvGradRows& dkv, const float* dout, const float* qkv,
                                   const float* out, const float* lse, int Tq, const KvRows& kv, const AttnSpan& s,
                                   float* work, int B, int C, int NH, int NKV = 0);

}  // namespace loom::cpu
