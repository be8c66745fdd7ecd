#include "kernels/cpu/adamw.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cast.h"

namespace loom::cpu {

namespace {

// The per-step scalars are formed in double and rounded once, as PyTorch
// does (its Python floats are doubles); the update itself runs in fp32.
struct Scalars {
  float decay, step_size, bc2_sqrt, b1, b2, eps;
  Scalars(float weight_decay, const AdamWStep& step) {
    const double bc1 = 1.0 - std::pow(double(step.beta1), step.t);
    const double bc2 = 1.0 - std::pow(double(step.beta2), step.t);
    decay = float(1.0 - double(step.lr) * weight_decay);  // p -= lr * wd * p
    step_size = float(double(step.lr) / bc1);
    bc2_sqrt = float(std::sqrt(bc2));
    b1 = step.beta1, b2 = step.beta2, eps = step.eps;
  }
};

// One element's update: the same expression on every path, so the paths
// agree bit for bit.
inline void update_one(float& param, float& m, float& v, float grad, float grad_scale, const Scalars& s) {
  const float g = grad_scale * grad;
  const float mi = s.b1 * m + (1.0f - s.b1) * g;
  const float vi = s.b2 * v + (1.0f - s.b2) * g * g;
  m = mi;
  v = vi;
  param = param * s.decay - s.step_size * (mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps));  // addcdiv order
}

// Blocks small enough that the rounding pass reads them from L1.
template <class C>
void update_with_copy(float* param, C* copy, float* m, float* v, const float* grad, size_t n, float grad_scale,
                      float weight_decay, const AdamWStep& step) {
  const Scalars s(weight_decay, step);
  constexpr size_t kBlock = 2048;
  const size_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < blocks; b++) {
    const size_t i0 = b * kBlock, len = std::min(kBlock, n - i0);
#pragma omp simd
    for (size_t i = i0; i < i0 + len; i++) update_one(param[i], m[i], v[i], grad[i], grad_scale, s);
    narrow(copy + i0, param + i0, len);
  }
}

}  // namespace

void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, float grad_scale,
                  float weight_decay, const AdamWStep& step) {
  const Scalars s(weight_decay, step);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) update_one(param[i], m[i], v[i], grad[i], grad_scale, s);
}

void adamw_update(float* param, bf16* copy, float* m, float* v, const float* grad, size_t n, float grad_scale,
                  float weight_decay, const AdamWStep& step) {
  update_with_copy(param, copy, m, v, grad, n, grad_scale, weight_decay, step);
}

void adamw_update(float* param, f16* copy, float* m, float* v, const float* grad, size_t n, float grad_scale,
                  float weight_decay, const AdamWStep& step) {
  update_with_copy(param, copy, m, v, grad, n, grad_scale, weight_decay, step);
}

}  // namespace loom::cpu
