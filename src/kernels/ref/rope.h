// Reference rotary position embedding, Hugging Face Llama's rotate-half
// convention: plain loops (the spec for kernels/cpu/rope).
#pragma once

#include <cmath>
#include <cstddef>

namespace loom::ref {

// cos[T, hd/2], sin[T, hd/2]: angle(pos, i) = pos * theta^(-2i/hd), in double.
template <class F>
void rope_table(F* cos, F* sin, int T_, int hd, double theta) {
  const int half = hd / 2;
  for (int t = 0; t < T_; t++)
    for (int i = 0; i < half; i++) {
      const double angle = t * std::pow(theta, -2.0 * i / hd);
      cos[size_t(t) * half + i] = F(std::cos(angle));
      sin[size_t(t) * half + i] = F(std::sin(angle));
    }
}

// In place on the NH query and NKV key heads of qkv[N, (NH + 2 NKV) x hd]
// (the value heads are left alone); row n is position n % T. Per head, x[i]
// and x[i + hd/2] rotate by the angle (sign = +1) or back (sign = -1: the
// transpose, which is the backward pass):
//   y[i] = x[i] cos - x[i + hd/2] sin,  y[i + hd/2] = x[i + hd/2] cos + x[i] sin.
template <class F>
void rope_rotate(F* qkv, const F* cos, const F* sin, int N, int T_, int NH, int NKV, int hd, int sign) {
  const int half = hd / 2;
  for (int n = 0; n < N; n++) {
    const F* c = cos + size_t(n % T_) * half;
    const F* s = sin + size_t(n % T_) * half;
    for (int h = 0; h < NH + NKV; h++) {
      F* x = qkv + size_t(n) * (NH + 2 * NKV) * hd + size_t(h) * hd;  // [hd]
      for (int i = 0; i < half; i++) {
        const F a = x[i], b = x[i + half], si = sign * s[i];
        x[i] = a * c[i] - b * si;
        x[i + half] = b * c[i] + a * si;
      }
    }
  }
}

template <class F>
void rope_forward(F* qkv, const F* cos, const F* sin, int N, int T_, int NH, int NKV, int hd) {
  rope_rotate(qkv, cos, sin, N, T_, NH, NKV, hd, +1);
}
// dqkv in place: the gradient rotated back (R^T = R(-angle)).
template <class F>
void rope_backward(F* dqkv, const F* cos, const F* sin, int N, int T_, int NH, int NKV, int hd) {
  rope_rotate(dqkv, cos, sin, N, T_, NH, NKV, hd, -1);
}

}  // namespace loom::ref
