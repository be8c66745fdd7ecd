// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include <cstddef>

namespace loom::cpu {

// out[N] = gelu(inp[N])
void gelu_forward(float* out, const float* inp, size_t N);
// dinp[N] = gelu'(inp) * dout   (overwrites; dinp may alias dout)
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N);

}  // namespace loom::cpu
