#include "kernels/cpu/swiglu.h"

#include <algorithm>
#include <cstddef>

#include "kernels/cpu/cast.h"
#include "kernels/cpu/simd_math.h"

namespace loom::cpu {

namespace {

// Threads take whole rows, and every row runs the same loop, so which
// features go through the vector expf (libmvec) and which through the scalar
// one (the loop remainder) depends only on f: results are bitwise the same
// for any thread count. Not inlined: the fp32 and the 16-bit kernels run this
// very code on each row.
//
// silu(g) = g / (1 + exp(-g)), PyTorch's formula; for g < -88 exp(-g) is
// inf and silu(g) is -0 (the true value is below 1e-36).
[[gnu::noinline]] void swiglu_forward_row(float* o, const float* g, const float* u, int F) {
#pragma omp simd
  for (int f = 0; f < F; f++) o[f] = g[f] / (1.0f + expf(-g[f])) * u[f];
}

// dsilu/dg = s (1 + g (1 - s)), s = sigmoid(g); as PyTorch's autograd,
// dgate = silu_backward(dout * up, g) and dup = dout * silu(g).
[[gnu::noinline]] void swiglu_backward_row(float* dg, float* du, const float* g, const float* u, const float* d,
                                           int F) {
#pragma omp simd
  for (int f = 0; f < F; f++) {
    const float e = expf(-g[f]);
    const float s = 1.0f / (1.0f + e);
    dg[f] = (d[f] * u[f]) * s * (1.0f + g[f] * (1.0f - s));
    du[f] = d[f] * (g[f] / (1.0f + e));
  }
}

// 16-bit rows go through fp32 stack buffers a column block of kSub at a
// time (4 KiB each: they stay in L1, and nothing is allocated). kSub is a
// multiple of every vector loop's step, so only a row's last block has a
// scalar tail, the row's own: each feature takes the path (vector or
// scalar expf) it takes in the fp32 kernel.
constexpr int kSub = 1024;

template <class A>
void swiglu_forward_lowp(A* out, const A* gate_up, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    alignas(64) float g[kSub], u[kSub], o[kSub];
    const A* row = gate_up + size_t(n) * 2 * F;  // gate [F], then up [F]
    for (int f0 = 0; f0 < F; f0 += kSub) {
      const size_t w = size_t(std::min(kSub, F - f0));
      widen(g, row + f0, w);
      widen(u, row + F + f0, w);
      swiglu_forward_row(o, g, u, int(w));
      narrow(out + size_t(n) * F + f0, o, w);
    }
  }
}

template <class A>
void swiglu_backward_lowp(A* dgate_up, const A* gate_up, const float* dout, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    alignas(64) float g[kSub], u[kSub], dg[kSub], du[kSub];
    const A* row = gate_up + size_t(n) * 2 * F;
    A* drow = dgate_up + size_t(n) * 2 * F;
    for (int f0 = 0; f0 < F; f0 += kSub) {
      const size_t w = size_t(std::min(kSub, F - f0));
      widen(g, row + f0, w);
      widen(u, row + F + f0, w);
      swiglu_backward_row(dg, du, g, u, dout + size_t(n) * F + f0, int(w));
      narrow(drow + f0, dg, w);
      narrow(drow + F + f0, du, w);
    }
  }
}

}  // namespace

void swiglu_forward(float* out, const float* gate_up, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gate_up + size_t(n) * 2 * F;  // [F], then up [F]
    swiglu_forward_row(out + size_t(n) * F, g, g + F, F);
  }
}

void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gate_up + size_t(n) * 2 * F;
    float* dg = dgate_up + size_t(n) * 2 * F;
    swiglu_backward_row(dg, dg + F, g, g + F, dout + size_t(n) * F, F);
  }
}

void swiglu_forward(bf16* out, const bf16* gate_up, int N, int F) { swiglu_forward_lowp(out, gate_up, N, F); }
void swiglu_forward(f16* out, const f16* gate_up, int N, int F) { swiglu_forward_lowp(out, gate_up, N, F); }
void swiglu_backward(bf16* dgate_up, const bf16* gate_up, const float* dout, int N, int F) {
  swiglu_backward_lowp(dgate_up, gate_up, dout, N, F);
}
void swiglu_backward(f16* dgate_up, const f16* gate_up, const float* dout, int N, int F) {
  swiglu_backward_lowp(dgate_up, gate_up, dout, N, F);
}

}  // namespace loom::cpu
