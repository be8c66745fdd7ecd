#include "kernels/cpu/grad_norm.h"

#include <algorithm>

namespace loom::cpu {

// A fixed number of chunks, each summed (vectorized) in double, then the chunk
// sums added in order: the result does not depend on the thread count.
double sum_of_squares(const float* x, size_t n) {
  constexpr int kChunks = 64;
  const size_t chunk = (n + kChunks - 1) / kChunks;
  double partial[kChunks];
#pragma omp parallel for schedule(static)
  for (int k = 0; k < kChunks; k++) {
    const size_t i0 = std::min(n, k * chunk), i1 = std::min(n, i0 + chunk);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = i0; i < i1; i++) s += double(x[i]) * x[i];
    partial[k] = s;
  }
  double total = 0;
  for (int k = 0; k < kChunks; k++) total += partial[k];
  return total;
}

}  // namespace loom::cpu
