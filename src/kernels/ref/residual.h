// Reference residual add (the spec for kernels/cpu/residual).
#pragma once

#include <cstddef>

namespace loom::ref {

// out[N] = a[N] + b[N]   (out may alias a or b)
template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t N) {
  for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

}  // namespace loom::ref
