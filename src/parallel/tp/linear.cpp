#include "parallel/tp/linear.h"

#include "kernels/cpu/residual.h"

namespace loom::tp {

void column_parallel_forward(cpu::MatmulEngine& eng, float* out, const float* x, const float* weight,
                             const float* bias, int N, int C, int OCl) {
  cpu::matmul_forward(eng, out, x, weight, bias, N, C, OCl);
}

void column_parallel_backward(cpu::MatmulEngine& eng, const TensorParallel& tp, float* dx, float* work,
                              float* dweight, float* dbias, const float* dout, const float* x, const float* weight,
                              int N, int C, int OCl, Work* x_ready) {
  // Input gradient first, so that its reduction overlaps the weight gradient.
  cpu::matmul_backward(eng, work, nullptr, nullptr, dout, x, weight, N, C, OCl);
  auto reduction = tp.reduce_rows_async(work, dx, N, C);
  tp.wait(x_ready);
  cpu::matmul_backward(eng, nullptr, dweight, dbias, dout, x, weight, N, C, OCl);
  tp.wait(reduction.get());
}

void row_parallel_forward(cpu::MatmulEngine& eng, const TensorParallel& tp, float* out, float* work,
                          const float* x, const float* weight, const float* bias, const float* residual, int N,
                          int ICl, int C) {
  cpu::matmul_forward(eng, work, x, weight, nullptr, N, ICl, C);
  float* reduced = tp.sequence_parallel() ? out : work;
  tp.reduce_rows(work, reduced, N, C);
  cpu::residual_bias_forward(out, reduced, bias, residual, tp.local_rows(N), C);
}

void row_parallel_backward(cpu::MatmulEngine& eng, const TensorParallel& tp, float* dx, float* dweight,
                           float* dbias, const float* dout, float* work, const float* x, const float* weight, int N,
                           int ICl, int C) {
  const float* dout_rows = tp.gather_rows(dout, work, N, C);
  cpu::matmul_backward(eng, dx, dweight, dbias, dout_rows, x, weight, N, ICl, C);
}

}  // namespace loom::tp
