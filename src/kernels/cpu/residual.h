// Residual add. Its backward is the identity into both inputs (no kernel).
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::cpu {

// out[N] = a[N] + b[N]   (out may alias a or b)
void residual_forward(float* out, const float* a, const float* b, size_t N);

// out[N,C] = (a[N,C] + bias[C]) + res[N,C]   (out may alias a or res): a
// row-parallel linear's bias (nullptr: none), added once after the reduction, and the residual.
void residual_bias_forward(float* out, const float* a, const float* bias, const float* res, int64_t N, int C);

}  // namespace loom::cpu
