#include "kernels/cpu/residual.h"

namespace loom::cpu {

void residual_forward(float* out, const float* a, const float* b, size_t N) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

void residual_bias_forward(float* out, const float* a, const float* bias, const float* res, int64_t N, int C) {
  if (!bias) return residual_forward(out, a, res, size_t(N) * size_t(C));  // no bias (LLaMA)
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const size_t row = size_t(n) * C;
#pragma omp simd
    for (int c = 0; c < C; c++) out[row + c] = (a[row + c] + bias[c]) + res[row + c];
  }
}

}  // namespace loom::cpu
