#include "optim/grad_clip.h"

#include <cmath>

#include "kernels/backend.h"

namespace loom {

double global_grad_norm(Backend& ops, const FlatLayout& layout, const float* grads) {
  double sum = 0;
  for (const auto& t : layout.tensors) sum += ops.sum_of_squares(grads + t.offset, size_t(t.numel));
  return std::sqrt(sum);
}

// Written so that a NaN norm gives a NaN factor (as torch's clamp does) and
// the caller sees the bad step, instead of silently using 1.
float clip_scale(double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  const double c = double(max_norm) / (norm + 1e-6);
  return c >= 1.0 ? 1.0f : float(c);
}

}  // namespace loom
