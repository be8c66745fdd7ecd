// The kernels a model reaches, behind one object per device: CpuBackend
// today (kernels/cpu/), a CUDA backend later with the same member names.
//
// Each op has one signature for fp32 and 16-bit storage (A = float, bf16 or
// f16: the compute type of weights and stored activations); norm statistics,
// softmax, losses and gradients of fp32 tensors stay fp32 whatever A is. The
// backend owns what its kernels need besides their arguments (the matrix
// engine and its cached primitives; attention is model/attention.h), so model code
// never branches on the compute type.
#pragma once

#include <cstddef>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul_lowp.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

namespace loom {

// What the kernels run on and which implementation each op kind chose.
using DeviceInfo = cpu::Dispatch;

class CpuBackend {
 public:
  DeviceInfo describe() const { return cpu::describe_dispatch(); }

  // The matrix products (linear layers; parallel/tp/ drives them).
  cpu::LowpMatmulEngine& matmul() { return matmul_; }

  // Norms: out in A (fp32 statistics); backward accumulates into fp32 dinp.
  template <class A>
  void layernorm_forward(A* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int N,
                         int C) {
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, 1, N, C);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C) {
    cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, 1, N, C);
  }
  template <class A>
  void rmsnorm_forward(A* out, float* rstd, const float* inp, const float* w, int N, int C, float eps) {
    cpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                        const float* rstd, int N, int C) {
    cpu::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
  }

  // Activations. gelu's backward overwrites din (in A; fp32 may alias dout).
  template <class A>
  void gelu_forward(A* out, const A* in, size_t n) { cpu::gelu_forward(out, in, n); }
  template <class A>
  void gelu_backward(A* din, const A* in, const float* dout, size_t n) { cpu::gelu_backward(din, in, dout, n); }
  template <class A>
  void swiglu_forward(A* out, const A* gate_up, int N, int F) { cpu::swiglu_forward(out, gate_up, N, F); }
  template <class A>
  void swiglu_backward(A* dgate_up, const A* gate_up, const float* dout, int N, int F) {
    cpu::swiglu_backward(dgate_up, gate_up, dout, N, F);
  }

  // Rotary positions, in place on the q and k heads of qkv (cos/sin from
  // cpu::rope_table; pos[N]: each row's table row, or null: n % T).
  template <class A>
  void rope_forward(A* qkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                    const int32_t* pos = nullptr) {
    cpu::rope_forward(qkv, cos, sin, N, T, NH, NKV, hd, pos);
  }
  template <class A>
  void rope_backward(A* dqkv, const float* cos, const float* sin, int N, int T, int NH, int NKV, int hd,
                     const int32_t* pos = nullptr) {
    cpu::rope_backward(dqkv, cos, sin, N, T, NH, NKV, hd, pos);
  }

  // fp32 -> A (a copy in fp32; rounded in 16 bits). Not in place.
  template <class A>
  void round_to(A* out, const float* in, size_t n) {
    if constexpr (std::is_same_v<A, float>) {
      if (out != in) std::copy(in, in + n, out);
    } else {
      cpu::narrow(out, in, n);
    }
  }

 private:
  cpu::LowpMatmulEngine matmul_;
};

}  // namespace loom
