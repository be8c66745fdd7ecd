// Pieces of global-norm gradient clipping.
#pragma once
#include <cstddef>

namespace loom::cpu {

// sum_i x[i]^2, accumulated in double (deterministic for a fixed thread count).
double sum_of_squares(const float* x, size_t n);

// The factor torch.nn.utils.clip_grad_norm_ applies: min(1, max_norm / (norm + 1e-6)).
// max_norm <= 0 disables clipping (returns 1).
float clip_scale(double norm, float max_norm);

}  // namespace loom::cpu
