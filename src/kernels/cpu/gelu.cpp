#include "kernels/cpu/gelu.h"

#include <algorithm>

#include "kernels/cpu/cast.h"
#include "kernels/cpu/simd_math.h"

namespace loom::cpu {

namespace {

constexpr float kS = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kA = 0.044715f;
// Threads take whole blocks, so which elements go through the vector tanhf
// (libmvec) and which through the scalar one (the loop remainder) does not
// depend on the thread count: results are bitwise the same for any count.
constexpr size_t kBlock = 4096;

// One block of n <= kBlock elements. Not inlined: the fp32 and the 16-bit
// kernels run this very code on each block, so an element's vector/scalar
// path (and so its bits) depends only on its place in the block.
[[gnu::noinline]] void gelu_forward_block(float* out, const float* inp, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kS * (x + kA * x * x * x)));
  }
}

// d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
// du/dx = sqrt(2/pi) (1 + 3 a x^2). Elementwise, so dinp == dout is fine.
[[gnu::noinline]] void gelu_backward_block(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const float x = inp[i];
    const float th = tanhf(kS * (x + kA * x * x * x));
    const float du = kS * (1.0f + 3.0f * kA * x * x);
    dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du) * dout[i];
  }
}


// 16-bit blocks go through fp32 stack buffers of kSub elements (4 KiB
// each, so a sub-block's widened input, result and gradient stay in L1).
// kSub divides kBlock: only a block's last sub-block can be short, and its
// tail is the block's own, so every element takes the path (vector or
// scalar tanhf) it takes in the fp32 kernel.
constexpr size_t kSub = 1024;
static_assert(kBlock % kSub == 0 && kSub % 64 == 0);

template <class A>
void gelu_forward_lowp(A* out, const A* inp, size_t N) {
  const size_t nsub = (N + kSub - 1) / kSub;
#pragma omp parallel for schedule(static)
  for (size_t sub = 0; sub < nsub; sub++) {
    alignas(64) float x[kSub], y[kSub];
    const size_t i0 = sub * kSub, n = std::min(N, i0 + kSub) - i0;
    widen(x, inp + i0, n);
    gelu_forward_block(y, x, n);
    narrow(out + i0, y, n);
  }
}

template <class A>
void gelu_backward_lowp(A* dinp, const A* inp, const float* dout, size_t N) {
  const size_t nsub = (N + kSub - 1) / kSub;
#pragma omp parallel for schedule(static)
  for (size_t sub = 0; sub < nsub; sub++) {
    alignas(64) float x[kSub], d[kSub];
    const size_t i0 = sub * kSub, n = std::min(N, i0 + kSub) - i0;
    widen(x, inp + i0, n);
    gelu_backward_block(d, x, dout + i0, n);
    narrow(dinp + i0, d, n);
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t N) {
  const size_t nblocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (size_t blk = 0; blk < nblocks; blk++) {
    const size_t i0 = blk * kBlock;
    gelu_forward_block(out + i0, inp + i0, std::min(N, i0 + kBlock) - i0);
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) {
  const size_t nblocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (size_t blk = 0; blk < nblocks; blk++) {
    const size_t i0 = blk * kBlock;
    gelu_backward_block(dinp + i0, inp + i0, dout + i0, std::min(N, i0 + kBlock) - i0);
  }
}

void gelu_forward(bf16* out, const bf16* inp, size_t N) { gelu_forward_lowp(out, inp, N); }
void gelu_forward(f16* out, const f16* inp, size_t N) { gelu_forward_lowp(out, inp, N); }
void gelu_backward(bf16* dinp, const bf16* inp, const float* dout, size_t N) {
  gelu_backward_lowp(dinp, inp, dout, N);
}
void gelu_backward(f16* dinp, const f16* inp, const float* dout, size_t N) { gelu_backward_lowp(dinp, inp, dout, N); }

}  // namespace loom::cpu
