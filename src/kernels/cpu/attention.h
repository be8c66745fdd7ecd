// Causal multi-head self-attention (GPT-2), fp32.
//
// qkv[B,T,3C] holds q, k, v side by side; each is [NH, hs] with hs = C / NH.
// Scores are scaled by 1/sqrt(hs); position t attends to positions <= t.
#pragma once

namespace loom::cpu {

// out[B,T,C]: heads concatenated; att[B,NH,T,T]: softmax probabilities
// (entries above the diagonal are 0), saved for the backward pass.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);

// dqkv[B,T,3C] = gradient (overwrites). scratch[B,NH,T,T] is work space.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH);

}  // namespace loom::cpu
