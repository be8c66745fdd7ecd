// Residual add. Its backward is the identity into both inputs (no kernel).
#pragma once
#include <cstddef>

namespace loom::cpu {

// out[N] = a[N] + b[N]   (out may alias a or b)
void residual_forward(float* out, const float* a, const float* b, size_t N);

}  // namespace loom::cpu
