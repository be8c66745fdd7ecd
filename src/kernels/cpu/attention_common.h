// Pieces shared by the fp32 (attention.cpp) and 16-bit (attention_lowp.cpp)
// causal attention kernels, so both compute the softmax the same way.
#pragma once

#include <algorithm>
#include <cmath>

#include "kernels/cpu/simd_math.h"  // vector expf in the softmax loops

namespace loom::cpu::detail {

// Query rows per tile: row tile [i0,i1) only needs key columns [0,i1).
constexpr int kAttnTile = 64;

// Loops below run to a multiple of 16 where the row allows, so they finish
// in whole AVX-512 vectors instead of a scalar remainder loop.
inline int round16(int len, int limit) { return std::min(limit, (len + 15) & ~15); }

// In place: row[0..n) holds scores for row i; becomes softmax over the first
// len = i + 1 entries, exact zeros after.
inline void causal_softmax_row(float* row, int len, int n) {
  const int lenp = round16(len, n);
  std::fill(row + len, row + lenp, -INFINITY);  // exp(-inf) = 0
  float maxval = -INFINITY;
#pragma omp simd reduction(max : maxval)
  for (int j = 0; j < lenp; j++) maxval = row[j] > maxval ? row[j] : maxval;  // std::max would not vectorize
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < lenp; j++) {
    float e = std::exp(row[j] - maxval);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j < lenp; j++) row[j] *= inv;
  std::fill(row + lenp, row + n, 0.0f);
}

}  // namespace loom::cpu::detail
