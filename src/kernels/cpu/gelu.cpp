#include "kernels/cpu/gelu.h"

#include <algorithm>

#include "kernels/cpu/simd_math.h"

namespace loom::cpu {

namespace {

constexpr float kS = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kA = 0.044715f;
// Threads take whole blocks, so which elements go through the vector tanhf
// (libmvec) and which through the scalar one (the loop remainder) does not
// depend on the thread count: results are bitwise the same for any count.
constexpr size_t kBlock = 4096;

}  // namespace

void gelu_forward(float* out, const float* inp, size_t N) {
  const size_t nblocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (size_t blk = 0; blk < nblocks; blk++) {
    const size_t i1 = std::min(N, (blk + 1) * kBlock);
#pragma omp simd
    for (size_t i = blk * kBlock; i < i1; i++) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + tanhf(kS * (x + kA * x * x * x)));
    }
  }
}

// d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
// du/dx = sqrt(2/pi) (1 + 3 a x^2). Elementwise, so dinp == dout is fine.
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) {
  const size_t nblocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (size_t blk = 0; blk < nblocks; blk++) {
    const size_t i1 = std::min(N, (blk + 1) * kBlock);
#pragma omp simd
    for (size_t i = blk * kBlock; i < i1; i++) {
      const float x = inp[i];
      const float th = tanhf(kS * (x + kA * x * x * x));
      const float du = kS * (1.0f + 3.0f * kA * x * x);
      dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du) * dout[i];
    }
  }
}

}  // namespace loom::cpu
