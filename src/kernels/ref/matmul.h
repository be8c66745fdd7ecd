// Reference linear layer: plain loops (the spec for kernels/cpu/matmul).
#pragma once

namespace loom::ref {

// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]   (bias may be null)
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  for (int n = 0; n < N; n++) {
    for (int o = 0; o < OC; o++) {
      T acc = bias ? bias[o] : T(0);
      for (int c = 0; c < C; c++) acc += inp[n * C + c] * weight[o * C + c];
      out[n * OC + o] = acc;
    }
  }
}

// dinp[N,C] = dout @ weight (overwrites); dweight[OC,C] += dout^T @ inp; dbias[OC] += colsum(dout)
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                     int OC) {
  if (dinp) {
    for (int n = 0; n < N; n++) {
      for (int c = 0; c < C; c++) {
        T acc = 0;
        for (int o = 0; o < OC; o++) acc += dout[n * OC + o] * weight[o * C + c];
        dinp[n * C + c] = acc;
      }
    }
  }
  for (int o = 0; o < OC; o++) {
    for (int c = 0; c < C; c++) {
      T acc = 0;
      for (int n = 0; n < N; n++) acc += dout[n * OC + o] * inp[n * C + c];
      dweight[o * C + c] += acc;
    }
    if (dbias) {
      T acc = 0;
      for (int n = 0; n < N; n++) acc += dout[n * OC + o];
      dbias[o] += acc;
    }
  }
}

}  // namespace loom::ref
