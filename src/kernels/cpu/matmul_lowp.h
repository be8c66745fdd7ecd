// Matrix products of the linear layers with 16-bit inputs and fp32
// accumulation: the bf16 and fp16 counterparts of kernels/cpu/matmul.h.
//
// bf16 runs natively in oneDNN (avx512_bf16's vdpbf16ps: products of bf16
// pairs added into fp32), about twice the fp32 rate per core here.
// fp16 has no arithmetic on this CPU (no avx512_fp16): its operands are
// widened to fp32 with F16C (exact) and multiplied by the fp32 engine, so
// fp16 here gives fp16's numerics and memory footprint, not speed; use bf16
// for speed. Either way the result equals the fp32 product of the 16-bit
// values up to fp32 summation error.
//
// Weights use the nn.Linear layout weight[OC, C]. As in MatmulEngine, each
// distinct shape gets its oneDNN primitive once; the fp16 widening buffers
// only grow, so a training step allocates nothing after its first.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"

namespace loom::cpu {

class LowpMatmulEngine {
 public:
  LowpMatmulEngine();
  ~LowpMatmulEngine();
  LowpMatmulEngine(const LowpMatmulEngine&) = delete;
  LowpMatmulEngine& operator=(const LowpMatmulEngine&) = delete;

  // C[M,N] (+)= op(A)[M,K] @ op(B)[K,N] (+ bias[N]); row-major, packed.
  // trans_a: A is stored [K,M]; trans_b: B is stored [N,K]. Sums in fp32.
  void gemm(float* c, const bf16* a, const bf16* b, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, bool accumulate);
  // The same with C rounded once to bf16 (activations stored in bf16); no
  // accumulate: adding into a bf16 C would round at every addition.
  void gemm(bf16* c, const bf16* a, const bf16* b, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b);
  // fp16 operands, widened to fp32 then multiplied in fp32.
  void gemm(float* c, const f16* a, const f16* b, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, bool accumulate);

  // oneDNN's implementation name for a bf16 product (e.g.
  // "brg:avx512_core_bf16"), creating the primitive if needed.
  const char* implementation(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, bool bias,
                             bool accumulate, bool bf16_out = false);

  // The fp32 engine the fp16 products run on (and its widening buffers,
  // for the fp16 layer functions below).
  MatmulEngine& fp32() { return fp32_; }
  float* widen(int slot, const f16* x, size_t n);  // slot 0..2; valid until the next widen of that slot
  float* buffer(int slot, size_t n);                // the same slot's buffer, at least n floats, as it is

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  MatmulEngine fp32_;
  std::vector<float> wide_[3];
};

// bf16 linear layer. out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]
// (bias fp32, may be null); out in fp32 or, rounded once, in bf16.
void matmul_forward(LowpMatmulEngine& eng, float* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                    int C, int OC);
void matmul_forward(LowpMatmulEngine& eng, bf16* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                    int C, int OC);

// bf16 backward; gradients of weights and bias accumulate in fp32.
// dinp[N,C]     = dout[N,OC] @ weight[OC,C]   (overwrites; skipped if null)
// dweight[OC,C] += dout^T @ inp[N,C]         (skipped if null)
// dbias[OC]     += sum over rows of dout        (skipped if null)
void matmul_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC);

// fp16 linear layer: the same products, operands widened to fp32 once each.
void matmul_forward(LowpMatmulEngine& eng, float* out, const f16* inp, const f16* weight, const float* bias, int N,
                    int C, int OC);
void matmul_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const f16* dout,
                     const f16* inp, const f16* weight, int N, int C, int OC);
// out in fp16: the fp32 product rounded once.
void matmul_forward(LowpMatmulEngine& eng, f16* out, const f16* inp, const f16* weight, const float* bias, int N,
                    int C, int OC);

// fp32 operands on the engine's fp32 engine (the fp32 layer exactly), so code
// templated over the compute type calls one overload set.
inline void matmul_forward(LowpMatmulEngine& eng, float* out, const float* inp, const float* weight,
                           const float* bias, int N, int C, int OC) {
  matmul_forward(eng.fp32(), out, inp, weight, bias, N, C, OC);
}
inline void matmul_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC) {
  matmul_backward(eng.fp32(), dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

}  // namespace loom::cpu
