// Matrix products of the linear layers, through oneDNN.
//
// Weights use the nn.Linear layout: weight[OC, C] (output features first).
// oneDNN primitives cost milliseconds to create, so MatmulEngine creates one
// per distinct (shape, layout) and reuses it for every later call.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace loom::cpu {

class MatmulEngine {
 public:
  MatmulEngine();
  ~MatmulEngine();
  MatmulEngine(const MatmulEngine&) = delete;
  MatmulEngine& operator=(const MatmulEngine&) = delete;

  // C[M,N] (+)= op(A)[M,K] @ op(B)[K,N] (+ bias[N]); row-major, packed.
  // trans_a: A is stored [K,M]; trans_b: B is stored [N,K].
  // accumulate: add into C instead of overwriting it. ldc: C's row stride
  // (0 = N), for writing a block of columns of a wider matrix; ldb: B's
  // (0 = packed), for reading one.
  void gemm(float* c, const float* a, const float* b, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, bool accumulate, int64_t ldc = 0, int64_t ldb = 0);

  // Name of the oneDNN implementation last used for this shape (for logs).
  const char* implementation(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, bool bias,
                             bool accumulate);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]   (bias may be null)
void matmul_forward(MatmulEngine& eng, float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC);

// dinp[N,C]     = dout[N,OC] @ weight[OC,C]      (overwrites; skipped if null)
// dweight[OC,C] += dout^T @ inp[N,C]           (skipped if null)
// dbias[OC]     += sum over rows of dout          (skipped if null)
void matmul_backward(MatmulEngine& eng, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC);

}  // namespace loom::cpu
