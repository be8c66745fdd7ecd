// RMSNorm over the last dimension (LLaMA; Hugging Face's LlamaRMSNorm in
// fp32): y = x * rsqrt(mean(x^2) + eps) * weight. No mean, no bias.
#pragma once

#include "core/dtype.h"

namespace loom::cpu {

// out[N,C] = inp * rstd * weight[C]; saves rstd[N] = 1/sqrt(mean_c(inp^2) + eps).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);

// The same with out rounded once to 16 bits: out is bit for bit the fp32
// kernel's output, rounded; rstd (fp32) is the fp32 kernel's.
void rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);
void rmsnorm_forward(f16* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);

// Accumulates: dinp[N,C] += ..., dweight[C] += ... (dinp accumulates
// because an rmsnorm's input is the residual stream). dweight sums the rows
// in order: the same bits for any thread count; nullptr: not computed (a
// frozen norm).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C);

}  // namespace loom::cpu
