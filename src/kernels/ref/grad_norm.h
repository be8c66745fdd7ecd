// Reference pieces of global-norm gradient clipping (the spec for kernels/cpu/grad_norm).
#pragma once

#include <cmath>
#include <cstddef>

namespace loom::ref {

// sum_i x[i]^2 over x[n], accumulated in double, in index order.
template <class T>
double sum_of_squares(const T* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += double(x[i]) * double(x[i]);
  return s;
}

// torch.nn.utils.clip_grad_norm_'s factor min(1, max_norm / (norm + 1e-6));
// 1 when max_norm <= 0 (clipping off); NaN when norm is NaN (torch's clamp keeps it).
inline float clip_scale(double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  const double c = double(max_norm) / (norm + 1e-6);
  return std::isnan(c) ? float(c) : float(c < 1.0 ? c : 1.0);
}

}  // namespace loom::ref
