// Reference token + position embedding: plain loops (the spec for kernels/cpu/encoder).
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::ref {

// out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]; tokens[B,T] in [0, V), wte[V,C], wpe[>=T,C]
template <class T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T_; t++) {
      const size_t bt = size_t(b) * T_ + t;
      for (int c = 0; c < C; c++) out[bt * C + c] = wte[size_t(tokens[bt]) * C + c] + wpe[size_t(t) * C + c];
    }
  }
}

// dwte[V,C] += dout scattered by token; dwpe[>=T,C] += dout summed over the batch. dout[B,T,C].
template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T_; t++) {
      const size_t bt = size_t(b) * T_ + t;
      for (int c = 0; c < C; c++) {
        dwte[size_t(tokens[bt]) * C + c] += dout[bt * C + c];
        dwpe[size_t(t) * C + c] += dout[bt * C + c];
      }
    }
  }
}

}  // namespace loom::ref
