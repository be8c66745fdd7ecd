// Reference AdamW, torch.optim.AdamW's formula in plain scalar code (the spec
// for kernels/cpu/adamw), in the precision T throughout.
#pragma once

#include <cmath>
#include <cstddef>

#include "kernels/cpu/adamw.h"

namespace loom::ref {

// param[n], m[n], v[n] updated in place from grad[n]; g = grad_scale * grad.
//   param *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
template <class T>
void adamw_update(T* param, T* m, T* v, const T* grad, size_t n, T grad_scale, T weight_decay,
                  const cpu::AdamWStep& step) {
  const T lr = step.lr, b1 = step.beta1, b2 = step.beta2, eps = step.eps;
  const T bc1 = T(1) - std::pow(b1, T(step.t)), bc2 = T(1) - std::pow(b2, T(step.t));
  for (size_t i = 0; i < n; i++) {
    const T g = grad_scale * grad[i];
    param[i] -= lr * weight_decay * param[i];
    m[i] = b1 * m[i] + (T(1) - b1) * g;
    v[i] = b2 * v[i] + (T(1) - b2) * g * g;
    param[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
  }
}

}  // namespace loom::ref
