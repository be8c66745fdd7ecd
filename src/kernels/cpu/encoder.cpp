#include "kernels/cpu/encoder.h"

#include <algorithm>
#include <cstddef>

namespace loom::cpu {

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    float* o = out + size_t(bt) * C;                 // [C]
    const float* e = wte + size_t(tokens[bt]) * C;   // [C]
    const float* p = wpe + size_t(bt % T) * C;       // [C]
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
  }
}

// Threads split the channels; each walks all (b, t) in order, so every
// element of dwte/dwpe receives its additions in the same order whatever the
// thread count (bitwise reproducible, no atomics).
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) {
  constexpr int kBlock = 32;  // channels per task: two cache lines per row
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const size_t bt = size_t(b) * T + t;
        const float* d = dout + bt * C;              // [C]
        float* gw = dwte + size_t(tokens[bt]) * C;   // [C]
        float* gp = dwpe + size_t(t) * C;            // [C]
#pragma omp simd
        for (int c = c0; c < c1; c++) {
          gw[c] += d[c];
          gp[c] += d[c];
        }
      }
    }
  }
}

}  // namespace loom::cpu

namespace loom::cpu {

void token_embedding_forward(float* out, const int32_t* tokens, const float* wte_rows, int64_t vocab_begin,
                             int64_t vocab_rows, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* o = out + size_t(n) * C;  // [C]
    const int64_t row = tokens[n] - vocab_begin;
    if (row < 0 || row >= vocab_rows) {
      std::fill(o, o + C, 0.f);
      continue;
    }
    const float* e = wte_rows + size_t(row) * C;  // [C]
    std::copy(e, e + C, o);
  }
}

void position_embedding_forward(float* out, const float* wpe, int64_t first_row, int N, int T, int C,
                                const int32_t* positions) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* o = out + size_t(n) * C;                            // [C]
    const int64_t r = first_row + n;
    const float* p = wpe + size_t(positions ? positions[r] : int(r % T)) * C;  // [C]
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] += p[c];
  }
}

// As encoder_backward: threads split the channels and walk the rows in order
// (bitwise reproducible, no atomics).
void token_embedding_backward(float* dwte_rows, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                              int64_t vocab_rows, int N, int C) {
  constexpr int kBlock = 32;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int n = 0; n < N; n++) {
      const int64_t row = tokens[n] - vocab_begin;
      if (row < 0 || row >= vocab_rows) continue;
      const float* d = dout + size_t(n) * C;
      float* g = dwte_rows + size_t(row) * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) g[c] += d[c];
    }
  }
}

void position_embedding_backward(float* dwpe, const float* dout, int64_t first_row, int N, int T, int C,
                                 const int32_t* positions) {
  constexpr int kBlock = 32;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int n = 0; n < N; n++) {
      const float* d = dout + size_t(n) * C;
      const int64_t r = first_row + n;
      float* g = dwpe + size_t(positions ? positions[r] : int(r % T)) * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) g[c] += d[c];
    }
  }
}

}  // namespace loom::cpu
