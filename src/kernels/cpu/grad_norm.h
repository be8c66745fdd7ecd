// The kernel of global-norm gradient clipping (optim/grad_clip.h clips).
#pragma once
#include <cstddef>

namespace loom::cpu {

// sum_i x[i]^2, accumulated in double (deterministic for a fixed thread count).
double sum_of_squares(const float* x, size_t n);

}  // namespace loom::cpu
