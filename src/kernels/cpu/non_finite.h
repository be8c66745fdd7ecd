// Finding inf/NaN in gradients, and unscaling them in the same pass.
//
// After a backward pass with a scaled loss, every gradient must be divided by
// the scale and checked for overflow; doing both in one read of the buffer
// halves the memory traffic of the check. Both run on all OpenMP threads
// for large buffers (the gradient buffer is the model's size).
#pragma once

#include <cstddef>

namespace loom::cpu {

// True if any of x[n] is inf or NaN.
bool has_non_finite(const float* x, size_t n);

// x[i] *= inv_scale for every i; true if any result is inf or NaN (an inf or
// NaN input stays one, so this also reports overflow from backward).
// With a power-of-two scale (LossScaler keeps it one) the multiplication is
// exact unless the result becomes subnormal.
bool unscale_and_check(float* x, size_t n, float inv_scale);

}  // namespace loom::cpu
