// Pieces shared by the fp32 (attention.cpp, attention_tiled.cpp) and 16-bit
// (attention_lowp.cpp) causal attention kernels, so they compute the softmax
// the same way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <dnnl.h>

#include "core/check.h"
#include "kernels/cpu/simd_math.h"  // vector expf in the softmax loops

namespace loom::cpu::detail {

// Row-major C[M,N] = alpha * op(A) op(B) + beta * C through oneDNN. It only
// fails on bad arguments (a bug); inside a parallel region the throw ends
// the program.
inline void sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* Bm, int64_t ldb, float beta, float* Cm, int64_t ldc) {
  dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
  LOOM_CHECK(st == dnnl_success, "dnnl_sgemm failed (status %d)", int(st));
}

// Where the heads sit in a row of qkv[B,T,(NH + 2 NKV) x hs]: NH query
// heads (C features), then NKV key heads, then NKV value heads. Query head
// h reads kv head h / group. With NKV == NH this is GPT-2's [q | k | v].
struct QkvLayout {
  int hs, NKV, group;  // head size; kv heads; query heads per kv head
  int64_t row;         // row stride: C + 2 NKV hs
  int64_t kofs, vofs;  // offsets of key head 0 and value head 0 in a row

  int64_t q(int h) const { return int64_t(h) * hs; }
  int64_t k(int g) const { return kofs + int64_t(g) * hs; }
  int64_t v(int g) const { return vofs + int64_t(g) * hs; }
};

// NKV = 0 means NKV = NH (multi-head attention).
inline QkvLayout qkv_layout(int C, int NH, int NKV) {
  LOOM_CHECK(NH > 0 && C % NH == 0, "C=%d not divisible by NH=%d", C, NH);
  if (NKV == 0) NKV = NH;
  LOOM_CHECK(NKV > 0 && NH % NKV == 0, "NH=%d not a multiple of NKV=%d", NH, NKV);
  const int hs = C / NH;
  const int64_t kv = int64_t(NKV) * hs;
  return QkvLayout{hs, NKV, NH / NKV, C + 2 * kv, C, C + kv};
}

// Packed rows (several documents per row): doc[B,T] holds, for each query
// row, the position its document starts at; it attends to positions
// doc[t]..t only. Null: one document per row (doc = 0). Documents are
// contiguous, so doc never decreases along a row.
inline int doc_start(const int32_t* doc, int64_t row) { return doc ? doc[row] : 0; }

// Query rows per tile: row tile [i0,i1) only needs key columns [0,i1).
constexpr int kAttnTile = 64;

// Loops below run to a multiple of 16 where the row allows, so they finish
// in whole AVX-512 vectors instead of a scalar remainder loop.
inline int round16(int len, int limit) { return std::min(limit, (len + 15) & ~15); }

// In place: row[0..n) holds scores for row i; becomes softmax over entries
// [lo, len), len = i + 1, exact zeros elsewhere. lo > 0: packed rows, the
// row's document starts at lo (its keys before belong to other documents).
// Entries before lo need not hold scores (they are not read).
inline void causal_softmax_row(float* row, int len, int n, int lo = 0) {
  const int lenp = round16(len, n);
  std::fill(row + len, row + lenp, -INFINITY);  // exp(-inf) = 0
  float maxval = -INFINITY;
#pragma omp simd reduction(max : maxval)
  for (int j = lo; j < lenp; j++) maxval = row[j] > maxval ? row[j] : maxval;  // std::max would not vectorize
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = lo; j < lenp; j++) {
    float e = std::exp(row[j] - maxval);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int j = lo; j < lenp; j++) row[j] *= inv;
  std::fill(row, row + lo, 0.0f);
  std::fill(row + lenp, row + n, 0.0f);
}

}  // namespace loom::cpu::detail
