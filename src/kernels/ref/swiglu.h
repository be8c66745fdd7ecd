// Reference SwiGLU (LLaMA's MLP activation): plain loops (the spec for
// kernels/cpu/swiglu).
#pragma once

#include <cmath>
#include <cstddef>

namespace loom::ref {

// gate_up[N,2F] holds per row the gate's F features, then the up's F:
// out[N,F] = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
template <class T>
void swiglu_forward(T* out, const T* gate_up, int N, int F) {
  for (int n = 0; n < N; n++) {
    const T* g = gate_up + size_t(n) * 2 * F;  // [F]
    const T* u = g + F;                        // [F]
    for (int f = 0; f < F; f++) out[size_t(n) * F + f] = g[f] / (T(1) + std::exp(-g[f])) * u[f];
  }
}

// dgate_up[N,2F] (overwrites) from dout[N,F]: with s = sigmoid(gate),
//   dgate = dout * up * s * (1 + gate * (1 - s)),  dup = dout * silu(gate).
template <class T>
void swiglu_backward(T* dgate_up, const T* gate_up, const T* dout, int N, int F) {
  for (int n = 0; n < N; n++) {
    const T* g = gate_up + size_t(n) * 2 * F;
    const T* u = g + F;
    const T* d = dout + size_t(n) * F;
    T* dg = dgate_up + size_t(n) * 2 * F;
    T* du = dg + F;
    for (int f = 0; f < F; f++) {
      const T s = T(1) / (T(1) + std::exp(-g[f]));
      dg[f] = d[f] * u[f] * s * (T(1) + g[f] * (T(1) - s));
      du[f] = d[f] * g[f] * s;
    }
  }
}

}  // namespace loom::ref
