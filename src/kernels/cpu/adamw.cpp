#include "kernels/cpu/adamw.h"

#include <cmath>

namespace loom::cpu {

// The per-step scalars are formed in double and rounded once, as PyTorch
// does (its Python floats are doubles); the update itself runs in fp32.
void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, float grad_scale,
                  float weight_decay, const AdamWStep& step) {
  const double bc1 = 1.0 - std::pow(double(step.beta1), step.t);
  const double bc2 = 1.0 - std::pow(double(step.beta2), step.t);
  const float decay = float(1.0 - double(step.lr) * weight_decay);  // p -= lr * wd * p
  const float step_size = float(double(step.lr) / bc1);
  const float bc2_sqrt = float(std::sqrt(bc2));
  const float b1 = step.beta1, b2 = step.beta2, eps = step.eps;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float g = grad_scale * grad[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * (mi / (std::sqrt(vi) / bc2_sqrt + eps));  // addcdiv order
  }
}

}  // namespace loom::cpu
