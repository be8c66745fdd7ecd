// Column- and row-parallel linear layers (Megatron-LM), forward and backward,
// written out by hand. Weights use the nn.Linear layout [out, in]; N is the
// number of rows inside the region (all B x T tokens), local_rows = N or
// N / tp with sequence parallelism (see TensorParallel).
//
// Column-parallel: weight[OCl, C] holds this rank's output features; the
// input is every row, the output this rank's features. No communication in
// forward; in backward the input gradient is a partial sum, reduced over the
// ranks while the weight gradient is computed.
// Row-parallel: weight[C, ICl] holds this rank's input features; the output
// is a partial sum, reduced over the ranks, then the bias (once) and the
// residual are added.
//
// A is the compute type of weights and layer inputs: float, bf16 or f16
// (mixed precision). Products accumulate in fp32; whatever A, gradients of
// weights and biases, partial sums, their reductions and the residual stream
// are fp32.
#pragma once

#include "kernels/backend.h"
#include "parallel/tp/tensor_parallel.h"

namespace loom::tp {

// A term added to a product's fp32 partial sums [N, C] before their
// reduction over tp (a LoRA adapter's low-rank term), by reference to a
// callable that outlives the call; nothing allocated.
class PartialTerm {
 public:
  template <class F>
  explicit PartialTerm(F& f) : obj_(&f), call_([](void* o, float* partial) { (*static_cast<F*>(o))(partial); }) {}
  void operator()(float* partial) const { call_(obj_, partial); }

 private:
  void* obj_;
  void (*call_)(void*, float*);
};

// out[N, OCl] = x[N, C] @ weight[OCl, C]^T + bias[OCl]; Out is A or float.
template <class A, class Out>
void column_parallel_forward(Backend& eng, Out* out, const A* x, const A* weight, const float* bias,
                             int N, int C, int OCl);

// dx[local_rows, C] = reduce(dout[N, OCl] @ weight), computed into
// work[N, C] (work == dx without sequence parallelism); the reduction starts
// before dweight[OCl, C] += dout^T @ x[N, C] and dbias += column sums, and is
// waited on after. `x_ready`, if given, is waited on before x is read (an
// all-gather of x that ran meanwhile). dweight == nullptr: the input
// gradient alone (a zero-bubble schedule's B; linear_weight_backward later).
// `extra`, if given, adds to work before the reduction.
template <class A>
void column_parallel_backward(Backend& eng, const TensorParallel& tp, float* dx, float* work,
                              float* dweight, float* dbias, const A* dout, const A* x, const A* weight, int N, int C,
                              int OCl, Work* x_ready = nullptr, const PartialTerm* extra = nullptr);

// out[local_rows, C] = reduce(x[N, ICl] @ weight[C, ICl]^T) + bias[C] + residual[local_rows, C]
// The partial product goes to work[N, C] (work may be out without sequence
// parallelism); out must not alias residual. `extra`, if given, adds to the
// partial product before the reduction.
template <class A>
void row_parallel_forward(Backend& eng, const TensorParallel& tp, float* out, float* work, const A* x,
                          const A* weight, const float* bias, const float* residual, int N, int ICl, int C,
                          const PartialTerm* extra = nullptr);

// dout[local_rows, C] gathered to every row (into work[N, C] with sequence
// parallelism), then dx[N, ICl] = dout @ weight, dweight += dout^T @ x,
// dbias += column sums of every row (complete on every rank). dweight ==
// nullptr: the input gradient alone.
template <class A>
void row_parallel_backward(Backend& eng, const TensorParallel& tp, float* dx, float* dweight,
                           float* dbias, const A* dout, A* work, const A* x, const A* weight, int N, int ICl, int C);

// The weight part of either layer's backward on its own (a zero-bubble
// schedule's W): dweight[OC, C] += dout[N, OC]^T @ x[N, C], dbias += column
// sums (dbias may be null); dout and x hold every row (gathered with
// sequence parallelism). Bitwise what the combined backward adds.
template <class A>
void linear_weight_backward(Backend& eng, float* dweight, float* dbias, const A* dout, const A* x,
                            int N, int C, int OC);

}  // namespace loom::tp
