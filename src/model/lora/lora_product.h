// The low-rank term of a LoRA adapter on one linear product (Hu et al.
// 2021; what PEFT's lora.Linear adds): y += s (x A^T) B^T with A [r, in],
// B [out, r] in the nn.Linear layout and s = alpha / r, and its backward.
//
// x and the weights are in the compute type A (float, bf16 or f16, the
// 16-bit copies the base product reads); products accumulate in fp32 on the
// engine the layers use; the rank-r intermediates u = x A^T and du = s dy B
// are fp32 (rounded once to A where a 16-bit product reads them, as PEFT's
// bf16 modules round their lora_A output); gradients of A and B are fp32
// and accumulate. The adapter may cover a block of columns of a fused
// product (LLaMA's q/k/v or gate/up): y and dy are read and written with a
// row stride.
//
// This is the math alone: model/<family>/ blocks call it on their products.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/backend.h"

namespace loom::lora {

struct Shape {
  int N = 0;       // rows (tokens)
  int in = 0;      // the product's input features
  int out = 0;     // the adapter's output features (a block of the product's columns)
  int rank = 0;    // r
  float scale = 1; // alpha / r
};

// Work space one call needs, in floats (fp32 u / du and, for 16-bit A, the
// rounded copies and the output block), for `s`.
size_t work_floats(const Shape& s);

// y[n, j] += scale * sum_k u[n, k] b[j, k] for j < s.out, u = x a^T; y's rows
// are ldy apart (y points at the block's first column). Y is float or A.
template <class A, class Y>
void forward(Backend& eng, Y* y, int64_t ldy, const A* x, const A* a, const A* b, const Shape& s,
             float* work);

// From dy (rows ldy apart, the block's columns): dx[N, in] += du a,
// da[r, in] += du^T x, db[out, r] += scale dy^T u, with u = x a^T
// recomputed and du = scale dy b. dx, da or db may be null (skipped): a
// frozen base still needs dx; a split backward computes da, db later.
template <class A>
void backward(Backend& eng, float* dx, float* da, float* db, const A* dy, int64_t ldy, const A* x,
              const A* a, const A* b, const Shape& s, float* work);

}  // namespace loom::lora
