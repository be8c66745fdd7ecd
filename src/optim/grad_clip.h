// Global-norm gradient clipping over the flat gradient buffer.
#pragma once

#include "core/flat_layout.h"
#include "kernels/backend_fwd.h"

namespace loom {

// L2 norm of every gradient tensor together (padding excluded).
double global_grad_norm(Backend& ops, const FlatLayout& layout, const float* grads);

// The factor torch.nn.utils.clip_grad_norm_ applies: min(1, max_norm / (norm + 1e-6)).
// max_norm <= 0 disables clipping (returns 1); a NaN norm gives a NaN factor.
float clip_scale(double norm, float max_norm);

}  // namespace loom
