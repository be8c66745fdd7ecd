// Causal self-attention without the T x T probability matrix (Dao et al.,
// FlashAttention), fp32, on the same qkv layout as attention.h (multi-head
// or grouped-query). Forward runs over tiles of queries and keys with an
// online softmax and keeps only the output and each row's log-sum-exp;
// backward recomputes each tile's probabilities from them. Extra memory is
// O(T) per head plus a fixed per-thread tile work space, against the
// materialized kernel's B x NH x T x T.
#pragma once

#include <cstddef>

namespace loom::cpu {

// Per-thread work space the tiled kernels need, in floats, for `threads`
// OpenMP threads.
size_t attention_tiled_work_floats(int threads);

// out[B,T,C]; lse[B,NH,T]: each query row's log-sum-exp of its scaled
// scores (kept for backward). work: attention_tiled_work_floats(threads).
void attention_tiled_forward(float* out, float* lse, const float* qkv, float* work, int B, int T, int C, int NH,
                             int NKV = 0);

// dqkv[B,T,(NH + 2 NKV) x hs] = gradient (overwrites), from the forward's
// out and lse; a kv head's gradient sums over its query heads in order.
void attention_tiled_backward(float* dqkv, float* work, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int C, int NH, int NKV = 0);

}  // namespace loom::cpu
