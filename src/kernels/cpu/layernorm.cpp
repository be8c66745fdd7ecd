#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/cast.h"

namespace loom::cpu {

namespace {

// One row: x[C] -> o[C], *mean, *rstd. Row statistics are summed in double
// (vectorized), so they are accurate for any C and independent of the
// thread count. Not inlined: the fp32 and 16-bit kernels run this very code,
// so the 16-bit output is the fp32 one rounded, bit for bit.
[[gnu::noinline]] void layernorm_row(float* o, float* mean, float* rstd, const float* x, const float* weight,
                                     const float* bias, int C) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += x[c];
  const double m = sum / C;
  double sq = 0;  // two-pass variance: no cancellation
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; c++) {
    const double dx = x[c] - m;
    sq += dx * dx;
  }
  const float mf = float(m), r = float(1.0 / std::sqrt(sq / C + double(kLayerNormEps)));
#pragma omp simd
  for (int c = 0; c < C; c++) o[c] = (x[c] - mf) * r * weight[c] + bias[c];
  *mean = mf;
  *rstd = r;
}

// Each thread computes rows into its own fp32 row, then rounds it.
template <class A>
void layernorm_forward_lowp(A* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int B, int T, int C) {
#pragma omp parallel
  {
    std::vector<float> row(C);  // [C]
#pragma omp for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
      layernorm_row(row.data(), mean + bt, rstd + bt, inp + size_t(bt) * C, weight, bias, C);
      narrow(out + size_t(bt) * C, row.data(), size_t(C));
    }
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++)
    layernorm_row(out + size_t(bt) * C, mean + bt, rstd + bt, inp + size_t(bt) * C, weight, bias, C);
}

void layernorm_forward(bf16* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C) {
  layernorm_forward_lowp(out, mean, rstd, inp, weight, bias, B, T, C);
}

void layernorm_forward(f16* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C) {
  layernorm_forward_lowp(out, mean, rstd, inp, weight, bias, B, T, C);
}

// Two passes: rows in parallel for dinp, then channels in parallel for
// dweight/dbias (each channel sums its rows in order: reproducible for any
// thread count, no scratch buffers, at the price of re-reading inp and dout).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int B, int T, int C) {
  const int N = B * T;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < N; bt++) {
    const float* x = inp + size_t(bt) * C;   // [C]
    const float* d = dout + size_t(bt) * C;  // [C]
    float* di = dinp + size_t(bt) * C;       // [C]
    const float m = mean[bt], r = rstd[bt];
    // dnorm = weight * dout; dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
    double sum_dn = 0, sum_dn_n = 0;
#pragma omp simd reduction(+ : sum_dn, sum_dn_n)
    for (int c = 0; c < C; c++) {
      const float n = (x[c] - m) * r;
      const float dn = weight[c] * d[c];
      sum_dn += dn;
      sum_dn_n += dn * n;
    }
    const float mean_dn = float(sum_dn / C), mean_dn_n = float(sum_dn_n / C);
#pragma omp simd
    for (int c = 0; c < C; c++) {
      const float n = (x[c] - m) * r;
      const float dn = weight[c] * d[c];
      di[c] += (dn - mean_dn - n * mean_dn_n) * r;
    }
  }

  if (!dweight && !dbias) return;  // a frozen norm: its input gradient only
  constexpr int kBlock = 32;  // channels per task
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, w = std::min(C, c0 + kBlock) - c0;
    double gw[kBlock] = {}, gb[kBlock] = {};
    for (int bt = 0; bt < N; bt++) {
      const float* x = inp + size_t(bt) * C + c0;   // [w]
      const float* d = dout + size_t(bt) * C + c0;  // [w]
      const float m = mean[bt], r = rstd[bt];
#pragma omp simd
      for (int j = 0; j < w; j++) {
        gw[j] += ((x[j] - m) * r) * d[j];
        gb[j] += d[j];
      }
    }
    for (int j = 0; j < w; j++) {
      if (dweight) dweight[c0 + j] += float(gw[j]);
      if (dbias) dbias[c0 + j] += float(gb[j]);
    }
  }
}

}  // namespace loom::cpu
