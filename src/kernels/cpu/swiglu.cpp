#include "kernels/cpu/swiglu.h"

#include <cstddef>
#include <vector>

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

// 16-bit rows go through fp32 row buffers (per thread).
template <class A>
void swiglu_forward_lowp(A* out, const A* gate_up, int N, int F) {
#pragma omp parallel
  {
    std::vector<float> gu(2 * size_t(F)), o(F);  // [2F], [F]
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      widen(gu.data(), gate_up + size_t(n) * 2 * F, 2 * size_t(F));
      swiglu_forward_row(o.data(), gu.data(), gu.data() + F, F);
      narrow(out + size_t(n) * F, o.data(), size_t(F));
    }
  }
}

template <class A>
void swiglu_backward_lowp(A* dgate_up, const A* gate_up, const float* dout, int N, int F) {
#pragma omp parallel
  {
    std::vector<float> gu(2 * size_t(F)), dgu(2 * size_t(F));  // [2F] each
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      widen(gu.data(), gate_up + size_t(n) * 2 * F, 2 * size_t(F));
      swiglu_backward_row(dgu.data(), dgu.data() + F, gu.data(), gu.data() + F, dout + size_t(n) * F, F);
      narrow(dgate_up + size_t(n) * 2 * F, dgu.data(), 2 * size_t(F));
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
