// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include <cstddef>

#include "core/dtype.h"

namespace loom::cpu {

// out[N] = gelu(inp[N])
void gelu_forward(float* out, const float* inp, size_t N);
// dinp[N] = gelu'(inp) * dout   (overwrites; dinp may alias dout)
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N);

// 16-bit storage, fp32 math: widen inp, run the fp32 formulas above, round
// the result once. Bit for bit the fp32 kernels on the widened input,
// rounded (same blocks, so the same elements take the vector tanhf).
void gelu_forward(bf16* out, const bf16* inp, size_t N);
void gelu_forward(f16* out, const f16* inp, size_t N);
// dinp[N] = round(gelu'(widen(inp)) * dout)   (overwrites)
void gelu_backward(bf16* dinp, const bf16* inp, const float* dout, size_t N);
void gelu_backward(f16* dinp, const f16* inp, const float* dout, size_t N);

}  // namespace loom::cpu
