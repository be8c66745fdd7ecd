#include "parallel/tp/linear.h"

namespace loom::tp {

template <class A, class Out>
void column_parallel_forward(Backend& eng, Out* out, const A* x, const A* weight, const float* bias,
                             int N, int C, int OCl) {
  eng.matmul_forward(out, x, weight, bias, N, C, OCl);
}

template <class A>
void column_parallel_backward(Backend& eng, const TensorParallel& tp, float* dx, float* work,
                              float* dweight, float* dbias, const A* dout, const A* x, const A* weight, int N, int C,
                              int OCl, Work* x_ready, const PartialTerm* extra) {
  // Input gradient first, so that its reduction overlaps the weight gradient.
  eng.matmul_backward(work, nullptr, nullptr, dout, x, weight, N, C, OCl);
  if (extra) (*extra)(work);
  auto reduction = tp.reduce_rows_async(work, dx, N, C);
  tp.wait(x_ready);
  if (dweight || dbias) eng.matmul_backward(nullptr, dweight, dbias, dout, x, weight, N, C, OCl);
  tp.wait(reduction.get());
}

template <class A>
void row_parallel_forward(Backend& eng, const TensorParallel& tp, float* out, float* work, const A* x,
                          const A* weight, const float* bias, const float* residual, int N, int ICl, int C,
                          const PartialTerm* extra) {
  eng.matmul_forward(work, x, weight, nullptr, N, ICl, C);
  if (extra) (*extra)(work);
  float* reduced = tp.sequence_parallel() ? out : work;
  tp.reduce_rows(work, reduced, N, C);
  eng.residual_bias_forward(out, reduced, bias, residual, tp.local_rows(N), C);
}

template <class A>
void row_parallel_backward(Backend& eng, const TensorParallel& tp, float* dx, float* dweight,
                           float* dbias, const A* dout, A* work, const A* x, const A* weight, int N, int ICl, int C) {
  const A* dout_rows = tp.gather_rows(dout, work, N, C);
  eng.matmul_backward(dx, dweight, dbias, dout_rows, x, weight, N, ICl, C);
}

template <class A>
void linear_weight_backward(Backend& eng, float* dweight, float* dbias, const A* dout, const A* x,
                            int N, int C, int OC) {
  eng.matmul_backward(nullptr, dweight, dbias, dout, x, static_cast<const A*>(nullptr), N, C, OC);
}

#define LOOM_LINEAR_INSTANCES(A)                                                                                  \
  template void column_parallel_forward<A, A>(Backend&, A*, const A*, const A*, const float*, int, \
                                              int, int);                                                          \
  template void column_parallel_backward<A>(Backend&, const TensorParallel&, float*, float*,       \
                                            float*, float*, const A*, const A*, const A*, int, int, int, Work*,  \
                                            const PartialTerm*);   \
  template void row_parallel_forward<A>(Backend&, const TensorParallel&, float*, float*, const A*,  \
                                        const A*, const float*, const float*, int, int, int, const PartialTerm*);                     \
  template void row_parallel_backward<A>(Backend&, const TensorParallel&, float*, float*, float*,   \
                                         const A*, A*, const A*, const A*, int, int, int);            \
  template void linear_weight_backward<A>(Backend&, float*, float*, const A*, const A*, int, int, int);
LOOM_LINEAR_INSTANCES(float)
LOOM_LINEAR_INSTANCES(bf16)
LOOM_LINEAR_INSTANCES(f16)
#undef LOOM_LINEAR_INSTANCES

}  // namespace loom::tp
