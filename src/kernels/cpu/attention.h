// Causal self-attention, fp32: multi-head (GPT-2) or grouped-query (LLaMA).
//
// qkv[B,T,(NH + 2 NKV) x hs], hs = C / NH: per row the NH query heads (C
// features), then NKV key heads, then NKV value heads; query head h reads
// kv head h / (NH / NKV). NKV == NH is GPT-2's qkv[B,T,3C] (q, k, v side by
// side); NKV = 0, the default, means NKV = NH. Scores are scaled by
// 1/sqrt(hs); position t attends to positions <= t, and with packed rows
// (doc non-null, [B,T]) only to those from doc[t], its document's start.
#pragma once

#include <cstdint>

namespace loom::cpu {

// out[B,T,C]: heads concatenated; att[B,NH,T,T]: softmax probabilities
// (entries above the diagonal are 0), saved for the backward pass.
// Backward needs no doc: the masked probabilities are exact zeros.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH, int NKV = 0,
                       const int32_t* doc = nullptr);

// dqkv[B,T,(NH + 2 NKV) x hs] = gradient (overwrites); a kv head's gradient
// sums over its NH / NKV query heads, in head order. scratch[B,NH,T,T] is
// work space.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH, int NKV = 0);

}  // namespace loom::cpu
