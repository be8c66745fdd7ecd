// Reference LayerNorm over the last dimension: plain loops (the spec for
// kernels/cpu/layernorm). eps = 1e-5, biased variance, as PyTorch.
#pragma once

#include <cmath>
#include <cstddef>

namespace loom::ref {

// out[B,T,C] = (inp - mean) * rstd * weight[C] + bias[C]; saves mean[B,T], rstd[B,T] = 1/sqrt(var + eps).
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int B, int T_, int C) {
  const T eps = T(1e-5);
  for (int bt = 0; bt < B * T_; bt++) {
    const T* x = inp + size_t(bt) * C;
    T m = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    T var = 0;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const T r = T(1) / std::sqrt(var + eps);
    for (int c = 0; c < C; c++) out[size_t(bt) * C + c] = (x[c] - m) * r * weight[c] + bias[c];
    mean[bt] = m;
    rstd[bt] = r;
  }
}

// With norm = (inp - mean) * rstd and dnorm = dout * weight, accumulates
//   dinp[B,T,C] += rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm))
//   dweight[C]  += sum_bt dout * norm
//   dbias[C]    += sum_bt dout
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int B, int T_, int C) {
  for (int bt = 0; bt < B * T_; bt++) {
    const T* x = inp + size_t(bt) * C;
    const T* d = dout + size_t(bt) * C;
    T* di = dinp + size_t(bt) * C;
    const T m = mean[bt], r = rstd[bt];
    T mean_dn = 0, mean_dn_n = 0;
    for (int c = 0; c < C; c++) {
      const T n = (x[c] - m) * r;
      mean_dn += weight[c] * d[c];
      mean_dn_n += weight[c] * d[c] * n;
    }
    mean_dn /= C;
    mean_dn_n /= C;
    for (int c = 0; c < C; c++) {
      const T n = (x[c] - m) * r;
      di[c] += (weight[c] * d[c] - mean_dn - n * mean_dn_n) * r;
      dweight[c] += d[c] * n;
      dbias[c] += d[c];
    }
  }
}

}  // namespace loom::ref
