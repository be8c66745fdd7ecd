// Reference GELU, tanh form: plain loops (the spec for kernels/cpu/gelu).
#pragma once

#include <cmath>
#include <cstddef>
#include <numbers>

namespace loom::ref {

// out[N] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp[N]
template <class T>
void gelu_forward(T* out, const T* inp, size_t N) {
  const T s = std::sqrt(T(2) / std::numbers::pi_v<T>), a = T(0.044715);
  for (size_t i = 0; i < N; i++) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + std::tanh(s * (x + a * x * x * x)));
  }
}

// dinp[N] = gelu'(inp[N]) * dout[N]   (overwrites)
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t N) {
  const T s = std::sqrt(T(2) / std::numbers::pi_v<T>), a = T(0.044715);
  for (size_t i = 0; i < N; i++) {
    const T x = inp[i];
    const T th = std::tanh(s * (x + a * x * x * x));
    const T sech2 = T(1) - th * th;
    const T grad = T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * s * (T(1) + T(3) * a * x * x);
    dinp[i] = grad * dout[i];
  }
}

}  // namespace loom::ref
