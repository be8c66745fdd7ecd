// Matrix products of the linear layers with 16-bit inputs and fp32
// accumulation: the bf16 and fp16 counterparts of kernels/cpu/matmul.h.
//
// Two paths, chosen at run time (kernels/cpu/isa.h):
// - native bf16: oneDNN multiplies bf16 directly (avx512_bf16's vdpbf16ps or
//   AMX: products of bf16 pairs added into fp32), about twice the fp32 rate.
// - widened: the operands are converted to fp32 (exactly) one panel at a
//   time, at most kPanelM x kPanelK of A and kPanelK x kPanelN of B, and
//   multiplied by the fp32 engine, accumulating in fp32. This is how bf16
//   runs on CPUs without avx512_bf16 (or when the ISA is capped below it),
//   and how fp16 always runs (oneDNN 2.6 has no fp16 products): 16-bit
//   numerics and memory, fp32 speed less the conversions.
// Either way the result equals the fp32 product of the 16-bit values up to
// fp32 summation error.
//
// Weights use the nn.Linear layout weight[OC, C]. As in MatmulEngine, each
// distinct shape gets its oneDNN primitive once; the panel buffers only grow,
// so a training step allocates nothing after its first.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"

namespace loom::cpu {

// Which path bf16 products take: automatic follows the CPU (and the ISA cap);
// native or widened force one (tests and benchmarks run both).
enum class Bf16Path { automatic, native, widened };

class LowpMatmulEngine {
 public:
  // Panel sizes of the widened path (elements): A panels are at most
  // kPanelM x kPanelK, B panels kPanelK x kPanelN: up to 32 and 64 MiB of
  // fp32, but GPT-2 124M's largest are 12 MiB. Each panel is one fp32 GEMM:
  // at 512 x 1024 x 1024 the products ran at 0.76-0.97x (median 0.92x) the
  // fp32 rate on a first-generation Zen (AVX2), at these sizes 0.93-1.08x
  // (median 0.98x; bench/matmul_bench).
  static constexpr int64_t kPanelM = 2048, kPanelN = 4096, kPanelK = 4096;

  // Bf16Path::native on a CPU (or cap) without native bf16 products throws
  // UserError.
  explicit LowpMatmulEngine(Bf16Path bf16 = Bf16Path::automatic);
  ~LowpMatmulEngine();
  LowpMatmulEngine(const LowpMatmulEngine&) = delete;
  LowpMatmulEngine& operator=(const LowpMatmulEngine&) = delete;

  bool bf16_native() const { return bf16_native_; }

  // C[M,N] (+)= op(A)[M,K] @ op(B)[K,N] (+ bias[N]); row-major, packed.
  // trans_a: A is stored [K,M]; trans_b: B is stored [N,K]. Sums in fp32.
  void gemm(float* c, const bf16* a, const bf16* b, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, bool accumulate);
  void gemm(float* c, const f16* a, const f16* b, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, bool accumulate);
  // The same with C rounded once to 16 bits (activations stored in 16 bits);
  // no accumulate: adding into a 16-bit C would round at every addition.
  void gemm(bf16* c, const bf16* a, const bf16* b, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b);
  void gemm(f16* c, const f16* a, const f16* b, const float* bias, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b);

  // The implementation a bf16 product uses: oneDNN's name (e.g.
  // "brg:avx512_core_bf16"), or "widened to fp32, " and the fp32 engine's
  // name for the first panel. Creates the primitive if needed.
  std::string implementation(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, bool bias,
                             bool accumulate, bool bf16_out = false);

  // The fp32 engine the widened products run on.
  MatmulEngine& fp32() { return fp32_; }

 private:
  template <class H, class Out>
  void widened_gemm(Out* c, const H* a, const H* b, const float* bias, int64_t M, int64_t N, int64_t K,
                    bool trans_a, bool trans_b, bool accumulate);

  struct Impl;
  std::unique_ptr<Impl> impl_;  // oneDNN's bf16 primitives
  MatmulEngine fp32_;
  bool bf16_native_;
  std::vector<float> panel_a_, panel_b_, panel_c_;
};

// Linear layer, 16-bit operands (bf16 or fp16), fp32 bias (may be null).
// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]; out in fp32 or, rounded
// once, in the 16-bit type.
void matmul_forward(LowpMatmulEngine& eng, float* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                    int C, int OC);
void matmul_forward(LowpMatmulEngine& eng, bf16* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                    int C, int OC);
void matmul_forward(LowpMatmulEngine& eng, float* out, const f16* inp, const f16* weight, const float* bias, int N,
                    int C, int OC);
void matmul_forward(LowpMatmulEngine& eng, f16* out, const f16* inp, const f16* weight, const float* bias, int N,
                    int C, int OC);

// Backward; gradients of weights and bias accumulate in fp32.
// dinp[N,C]     = dout[N,OC] @ weight[OC,C]   (overwrites; skipped if null)
// dweight[OC,C] += dout^T @ inp[N,C]         (skipped if null)
// dbias[OC]     += sum over rows of dout        (skipped if null)
void matmul_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC);
void matmul_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const f16* dout,
                     const f16* inp, const f16* weight, int N, int C, int OC);

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
