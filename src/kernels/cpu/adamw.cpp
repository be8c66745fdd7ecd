#include "kernels/cpu/adamw.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

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

// Elements [0, n) of one block: the update, the same expression everywhere.
inline void update_block(float* param, float* m, float* v, const float* grad, size_t n, float grad_scale,
                         const Scalars& s) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const float g = grad_scale * grad[i];
    const float mi = s.b1 * m[i] + (1.0f - s.b1) * g;
    const float vi = s.b2 * v[i] + (1.0f - s.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * s.decay - s.step_size * (mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps));  // addcdiv order
  }
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
    update_block(param + i0, m + i0, v + i0, grad + i0, len, grad_scale, s);
    if constexpr (std::is_same_v<C, bf16>)
      cast_f32_to_bf16(copy + i0, param + i0, len);
    else
      cast_f32_to_f16(copy + i0, param + i0, len);
  }
}

}  // namespace

void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, float grad_scale,
                  float weight_decay, const AdamWStep& step) {
  const Scalars s(weight_decay, step);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float g = grad_scale * grad[i];
    const float mi = s.b1 * m[i] + (1.0f - s.b1) * g;
    const float vi = s.b2 * v[i] + (1.0f - s.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * s.decay - s.step_size * (mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps));  // addcdiv order
  }
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
