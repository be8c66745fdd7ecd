// LayerNorm over the last dimension, eps = 1e-5 (as GPT-2 / PyTorch).
#pragma once

#include "core/dtype.h"

namespace loom::cpu {

constexpr float kLayerNormEps = 1e-5f;

// out[B,T,C] = (inp - mean) * rstd * weight + bias; saves mean[B,T], rstd[B,T].
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C);

// The same with out rounded once to 16 bits: out is bit for bit the fp32
// kernel's output, rounded; mean and rstd (fp32) are the fp32 kernel's.
void layernorm_forward(bf16* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C);
void layernorm_forward(f16* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C);

// Accumulates: dinp[B,T,C] += ..., dweight[C] += ..., dbias[C] += ...
// (dinp accumulates because a layernorm's input is the residual stream.)
// dweight / dbias nullptr: not computed (a frozen norm).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int B, int T, int C);

}  // namespace loom::cpu
