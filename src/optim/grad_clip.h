// Global-norm gradient clipping over the flat gradient buffer.
#pragma once

#include "model/param_layout.h"

namespace loom {

// L2 norm of every gradient tensor together (padding excluded).
double global_grad_norm(const ParamLayout& layout, const float* grads);

}  // namespace loom
