// LayerNorm over the last dimension, eps = 1e-5 (as GPT-2 / PyTorch).
#pragma once

namespace loom::cpu {

constexpr float kLayerNormEps = 1e-5f;

// out[B,T,C] = (inp - mean) * rstd * weight + bias; saves mean[B,T], rstd[B,T].
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C);

// Accumulates: dinp[B,T,C] += ..., dweight[C] += ..., dbias[C] += ...
// (dinp accumulates because a layernorm's input is the residual stream.)
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int B, int T, int C);

}  // namespace loom::cpu
