// The tiled (flash-style) attention (issue 21, first part) against the
// materialized kernel: output, per-row log-sum-exp and every input
// gradient, for causal multi-head and grouped-query attention, at lengths
// that are and are not multiples of the tile.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_tiled.h"

namespace loom::cpu {
namespace {

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

TEST(AttentionTiled, MatchesTheMaterializedKernel) {
  struct Shape {
    int B, T, NH, NKV, hs;
  };
  for (const Shape& s : {Shape{2, 1, 4, 4, 16}, Shape{2, 37, 4, 4, 16}, Shape{1, 64, 4, 2, 32},
                         Shape{2, 100, 6, 2, 16}, Shape{1, 130, 4, 1, 8}, Shape{1, 200, 2, 2, 64}}) {
    SCOPED_TRACE("B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " NH " + std::to_string(s.NH) +
                 " NKV " + std::to_string(s.NKV) + " hs " + std::to_string(s.hs));
    const int C = s.NH * s.hs, row = C + 2 * s.NKV * s.hs;
    std::mt19937 rng(uint32_t(s.T * 31 + s.NKV));
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> qkv(size_t(s.B) * s.T * row), dout(size_t(s.B) * s.T * C);
    for (float& x : qkv) x = normal(rng);
    for (float& x : dout) x = normal(rng);
    // Reference: the materialized kernel.
    std::vector<float> out_ref(dout.size()), att(size_t(s.B) * s.NH * s.T * s.T), scratch(att.size());
    std::vector<float> dqkv_ref(qkv.size());
    attention_forward(out_ref.data(), att.data(), qkv.data(), s.B, s.T, C, s.NH, s.NKV);
    attention_backward(dqkv_ref.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, C, s.NH, s.NKV);
    // Tiled.
    std::vector<float> work(attention_tiled_work_floats(omp_get_max_threads()));
    std::vector<float> out(dout.size()), lse(size_t(s.B) * s.NH * s.T), dqkv(qkv.size(), 123.f);
    attention_tiled_forward(out.data(), lse.data(), qkv.data(), work.data(), s.B, s.T, C, s.NH, s.NKV);
    attention_tiled_backward(dqkv.data(), work.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, C,
                             s.NH, s.NKV);
    EXPECT_LT(max_abs_diff(out, out_ref), 2e-5);
    EXPECT_LT(max_abs_diff(dqkv, dqkv_ref), 5e-5);
    // Each row's log-sum-exp of its scaled causal scores, in double.
    const int group = s.NH / s.NKV;
    double worst = 0;
    for (int b = 0; b < s.B; b++)
      for (int h = 0; h < s.NH; h++)
        for (int i = 0; i < s.T; i++) {
          const float* q = qkv.data() + (size_t(b) * s.T + i) * row + h * s.hs;
          double mx = -1e300, sum = 0;
          std::vector<double> sc;
          for (int j = 0; j <= i; j++) {
            const float* k = qkv.data() + (size_t(b) * s.T + j) * row + C + (h / group) * s.hs;
            double d = 0;
            for (int c = 0; c < s.hs; c++) d += double(q[c]) * k[c];
            sc.push_back(d / std::sqrt(double(s.hs)));
            mx = std::max(mx, sc.back());
          }
          for (double x : sc) sum += std::exp(x - mx);
          worst = std::max(worst, std::abs(mx + std::log(sum) - lse[(size_t(b) * s.NH + h) * s.T + i]));
        }
    EXPECT_LT(worst, 1e-4);
  }
}

}  // namespace
}  // namespace loom::cpu
