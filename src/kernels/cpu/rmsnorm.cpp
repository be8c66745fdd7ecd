#include "kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/cast.h"

namespace loom::cpu {

namespace {

// One row: x[C] -> o[C], *rstd. The mean square is summed in double
// (vectorized), so it is accurate for any C and independent of the thread
// count. Not inlined: the fp32 and 16-bit kernels run this very code, so the
// 16-bit output is the fp32 one rounded, bit for bit.
[[gnu::noinline]] void rmsnorm_row(float* o, float* rstd, const float* x, const float* weight, int C, float eps) {
  double sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; c++) sq += double(x[c]) * x[c];
  const float r = float(1.0 / std::sqrt(sq / C + double(eps)));
  // (x * r) * weight: Hugging Face's order, weight * (x * rsqrt(...)).
#pragma omp simd
  for (int c = 0; c < C; c++) o[c] = x[c] * r * weight[c];
  *rstd = r;
}

template <class A>
void rmsnorm_forward_lowp(A* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
#pragma omp parallel
  {
    std::vector<float> row(C);  // [C]: this thread's fp32 row, then rounded
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      rmsnorm_row(row.data(), rstd + n, inp + size_t(n) * C, weight, C, eps);
      narrow(out + size_t(n) * C, row.data(), size_t(C));
    }
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) rmsnorm_row(out + size_t(n) * C, rstd + n, inp + size_t(n) * C, weight, C, eps);
}

void rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  rmsnorm_forward_lowp(out, rstd, inp, weight, N, C, eps);
}

void rmsnorm_forward(f16* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  rmsnorm_forward_lowp(out, rstd, inp, weight, N, C, eps);
}

// Two passes, as layernorm_backward: rows in parallel for dinp, then channel
// blocks in parallel for dweight (each channel sums its rows in order, in
// double: reproducible for any thread count, no scratch buffers).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + size_t(n) * C;   // [C]
    const float* d = dout + size_t(n) * C;  // [C]
    float* di = dinp + size_t(n) * C;       // [C]
    const float r = rstd[n];
    // dnorm = weight * dout; dinp += rstd * (dnorm - norm * mean(dnorm * norm))
    double sum_dn_n = 0;
#pragma omp simd reduction(+ : sum_dn_n)
    for (int c = 0; c < C; c++) sum_dn_n += (weight[c] * d[c]) * (x[c] * r);
    const float mean_dn_n = float(sum_dn_n / C);
#pragma omp simd
    for (int c = 0; c < C; c++) di[c] += (weight[c] * d[c] - x[c] * r * mean_dn_n) * r;
  }

  if (!dweight) return;  // a frozen norm: its input gradient only
  constexpr int kBlock = 32;  // channels per task
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, w = std::min(C, c0 + kBlock) - c0;
    double gw[kBlock] = {};
    for (int n = 0; n < N; n++) {
      const float* x = inp + size_t(n) * C + c0;   // [w]
      const float* d = dout + size_t(n) * C + c0;  // [w]
      const float r = rstd[n];
#pragma omp simd
      for (int j = 0; j < w; j++) gw[j] += (x[j] * r) * d[j];
    }
    for (int j = 0; j < w; j++) dweight[c0 + j] += float(gw[j]);
  }
}

}  // namespace loom::cpu
