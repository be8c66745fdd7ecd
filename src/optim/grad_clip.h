// Global-norm gradient clipping over the flat gradient buffer.
#pragma once

#include "core/flat_layout.h"

namespace loom {

// L2 norm of every gradient tensor together (padding excluded).
double global_grad_norm(const FlatLayout& layout, const float* grads);

}  // namespace loom
