// The tiled (flash-style) attention (issue 21, first part) against the
// materialized kernel: output, per-row log-sum-exp and every input
// gradient, for causal multi-head and grouped-query attention, at lengths
// that are and are not multiples of the tile.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_tiled.h"
#include "kernels/cpu/cast.h"

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


// Context parallelism's use of the span calls: the sequence cut into 2cp
// chunks, each "rank" holding chunks r and 2cp-1-r as its local rows, its
// queries visiting every rank's key/value block in ring order (packed
// k|v rows, as sent), merging spans. Output, lse and gradients equal the
// whole-sequence kernel's.
TEST(AttentionTiled, SpansOverPermutedChunksMatchTheWholeSequence) {
  for (int cp : {1, 2, 3}) {
    const int B = 2, NH = 4, NKV = 2, hs = 16, Tc = 37, T = 2 * cp * Tc;
    const int C = NH * hs, kvw = NKV * hs, row = C + 2 * kvw;
    SCOPED_TRACE("cp " + std::to_string(cp));
    std::mt19937 rng{uint32_t(cp)};
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> qkv(size_t(B) * T * row), dout(size_t(B) * T * C);
    for (float& x : qkv) x = normal(rng);
    for (float& x : dout) x = normal(rng);
    std::vector<float> work(attention_tiled_work_floats(omp_get_max_threads()));
    std::vector<float> out_ref(dout.size()), lse_ref(size_t(B) * NH * T), dqkv_ref(qkv.size());
    attention_tiled_forward(out_ref.data(), lse_ref.data(), qkv.data(), work.data(), B, T, C, NH, NKV);
    attention_tiled_backward(dqkv_ref.data(), work.data(), dout.data(), qkv.data(), out_ref.data(), lse_ref.data(), B,
                             T, C, NH, NKV);
    const int Tl = 2 * Tc;  // local rows per rank
    auto chunk_of = [&](int r, int half) { return half == 0 ? r : 2 * cp - 1 - r; };
    // Each rank's local q/k/v, out, dout (rows of its two chunks), and packed k|v.
    std::vector<std::vector<float>> lqkv(cp), lkv(cp), lout(cp), ldout(cp), llse(cp), ldqkv(cp), ldkv(cp);
    for (int r = 0; r < cp; r++) {
      lqkv[r].resize(size_t(B) * Tl * row), lkv[r].resize(size_t(B) * Tl * 2 * kvw);
      ldout[r].resize(size_t(B) * Tl * C), lout[r].resize(size_t(B) * Tl * C), llse[r].resize(size_t(B) * NH * Tl);
      ldqkv[r].assign(size_t(B) * Tl * row, 0.f), ldkv[r].assign(size_t(B) * Tl * 2 * kvw, 0.f);
      for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
          const int g = chunk_of(r, t / Tc) * Tc + t % Tc;  // global position
          std::copy_n(&qkv[(size_t(b) * T + g) * row], row, &lqkv[r][(size_t(b) * Tl + t) * row]);
          std::copy_n(&qkv[(size_t(b) * T + g) * row + C], 2 * kvw, &lkv[r][(size_t(b) * Tl + t) * 2 * kvw]);
          std::copy_n(&dout[(size_t(b) * T + g) * C], C, &ldout[r][(size_t(b) * Tl + t) * C]);
        }
    }
    auto spans = [&](int r, int src, auto&& visit) {
      for (int qh = 0; qh < 2; qh++)
        for (int kh = 0; kh < 2; kh++)
          visit(AttnSpan{qh * Tc, Tc, chunk_of(r, qh) * Tc, kh * Tc, Tc, chunk_of(src, kh) * Tc});
    };
    for (int r = 0; r < cp; r++) {
      attention_tiled_begin(llse[r].data(), B, Tl, NH);
      for (int step = 0; step < cp; step++) {
        const int src = (r - step + cp) % cp;
        const KvRows kv{lkv[src].data(), Tl, 2 * kvw, 0, kvw};
        spans(r, src, [&](const AttnSpan& s) {
          attention_tiled_forward_span(lout[r].data(), llse[r].data(), lqkv[r].data(), Tl, kv, s, work.data(), B, C,
                                       NH, NKV);
        });
      }
    }
    for (int r = 0; r < cp; r++)
      for (int step = 0; step < cp; step++) {
        const int src = (r - step + cp) % cp;
        const KvRows kv{lkv[src].data(), Tl, 2 * kvw, 0, kvw};
        const KvGradRows dkv{ldkv[src].data(), 2 * kvw, 0, kvw};
        spans(r, src, [&](const AttnSpan& s) {
          attention_tiled_backward_span(ldqkv[r].data(), dkv, ldout[r].data(), lqkv[r].data(), lout[r].data(),
                                        llse[r].data(), Tl, kv, s, work.data(), B, C, NH, NKV);
        });
      }
    double worst_out = 0, worst_lse = 0, worst_grad = 0;
    for (int r = 0; r < cp; r++)
      for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
          const int g = chunk_of(r, t / Tc) * Tc + t % Tc;
          for (int c = 0; c < C; c++) {
            worst_out = std::max(worst_out, double(std::abs(lout[r][(size_t(b) * Tl + t) * C + c] -
                                                            out_ref[(size_t(b) * T + g) * C + c])));
            worst_grad = std::max(worst_grad, double(std::abs(ldqkv[r][(size_t(b) * Tl + t) * row + c] -
                                                              dqkv_ref[(size_t(b) * T + g) * row + c])));
          }
          for (int c = 0; c < 2 * kvw; c++)
            worst_grad = std::max(worst_grad, double(std::abs(ldkv[r][(size_t(b) * Tl + t) * 2 * kvw + c] -
                                                              dqkv_ref[(size_t(b) * T + g) * row + C + c])));
          for (int h = 0; h < NH; h++)
            worst_lse = std::max(worst_lse, double(std::abs(llse[r][(size_t(b) * NH + h) * Tl + t] -
                                                            lse_ref[(size_t(b) * NH + h) * T + g])));
        }
    EXPECT_LT(worst_out, 2e-5);
    EXPECT_LT(worst_lse, 2e-5);
    EXPECT_LT(worst_grad, 5e-5);
  }
}

// 16-bit storage: the fp32 tiled kernel on the widened inputs, rounded once.
template <class H>
void check_lowp_tiled() {
  const int B = 2, T = 70, NH = 4, NKV = 2, hs = 16, C = NH * hs, row = C + 2 * NKV * hs;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> qkv(size_t(B) * T * row), dout(size_t(B) * T * C);
  for (float& x : qkv) x = normal(rng);
  for (float& x : dout) x = normal(rng);
  std::vector<H> qkv16(qkv.size());
  narrow(qkv16.data(), qkv.data(), qkv.size());
  widen(qkv.data(), qkv16.data(), qkv.size());  // the reference sees what the 16-bit kernel sees
  std::vector<float> work(attention_tiled_work_floats(omp_get_max_threads()));
  std::vector<float> wide(attention_tiled_wide_floats(B, T, C, NH, NKV));
  std::vector<float> out(dout.size()), lse(size_t(B) * NH * T), dqkv(qkv.size()), lse16(lse.size());
  attention_tiled_forward(out.data(), lse.data(), qkv.data(), work.data(), B, T, C, NH, NKV);
  std::vector<H> out16(out.size()), dqkv16(qkv.size());
  attention_tiled_forward(out16.data(), lse16.data(), qkv16.data(), wide.data(), work.data(), B, T, C, NH, NKV);
  EXPECT_EQ(lse16, lse);
  std::vector<float> out_round(out.size());
  std::vector<H> tmp(out.size());
  narrow(tmp.data(), out.data(), out.size());
  EXPECT_EQ(0, std::memcmp(tmp.data(), out16.data(), tmp.size() * sizeof(H)));
  widen(out_round.data(), out16.data(), out.size());
  attention_tiled_backward(dqkv.data(), work.data(), dout.data(), qkv.data(), out_round.data(), lse.data(), B, T, C,
                           NH, NKV);
  attention_tiled_backward(dqkv16.data(), wide.data(), work.data(), dout.data(), qkv16.data(), out16.data(),
                           lse16.data(), B, T, C, NH, NKV);
  std::vector<H> dref(qkv.size());
  narrow(dref.data(), dqkv.data(), dqkv.size());
  EXPECT_EQ(0, std::memcmp(dref.data(), dqkv16.data(), dref.size() * sizeof(H)));
}

TEST(AttentionTiled, SixteenBitStorageIsTheFp32KernelRoundedOnce) {
  check_lowp_tiled<bf16>();
  check_lowp_tiled<f16>();
}

}  // namespace
}  // namespace loom::cpu
