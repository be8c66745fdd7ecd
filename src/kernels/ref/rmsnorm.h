// Reference RMSNorm over the last dimension: plain loops (the spec for
// kernels/cpu/rmsnorm). Hugging Face's LlamaRMSNorm: no mean subtraction,
// no bias.
#pragma once

#include <cmath>
#include <cstddef>

namespace loom::ref {

// out[N,C] = inp * rstd * weight[C]; saves rstd[N] = 1/sqrt(mean_c(inp^2) + eps).
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, T eps) {
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    T ms = 0;
    for (int c = 0; c < C; c++) ms += x[c] * x[c];
    ms /= C;
    const T r = T(1) / std::sqrt(ms + eps);
    for (int c = 0; c < C; c++) out[size_t(n) * C + c] = x[c] * r * weight[c];
    rstd[n] = r;
  }
}

// With norm = inp * rstd and dnorm = dout * weight (d rstd / d inp = -rstd^3 inp / C),
// accumulates
//   dinp[N,C] += rstd * (dnorm - norm * mean_c(dnorm * norm))
//   dweight[C] += sum_n dout * norm
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const T* x = inp + size_t(n) * C;
    const T* d = dout + size_t(n) * C;
    T* di = dinp + size_t(n) * C;
    const T r = rstd[n];
    T mean_dn_n = 0;
    for (int c = 0; c < C; c++) mean_dn_n += weight[c] * d[c] * x[c] * r;
    mean_dn_n /= C;
    for (int c = 0; c < C; c++) {
      const T nrm = x[c] * r;
      di[c] += (weight[c] * d[c] - nrm * mean_dn_n) * r;
      dweight[c] += d[c] * nrm;
    }
  }
}

}  // namespace loom::ref
