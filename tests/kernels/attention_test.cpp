// Causal attention: fast CPU kernel vs the scalar reference, the reference's
// backward vs finite differences, and the properties of the saved probabilities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/ref/attention.h"

namespace loom {
namespace {

struct Shape {
  int B, T, C, NH;
};

template <class F>
std::vector<F> random_vec(size_t n, uint32_t seed, F lo = F(-1), F hi = F(1)) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist{double(lo), double(hi)};
  std::vector<F> v(n);
  for (auto& x : v) x = F(dist(gen));
  return v;
}

// max |a - b| / (1 + |b|) over all elements.
double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0;
  for (size_t i = 0; i < a.size(); i++) err = std::max(err, std::abs(double(a[i]) - b[i]) / (1.0 + std::abs(b[i])));
  return err;
}

// hs = 12, 64, 4, 16, 32, 12 (with T below, around and above the 64-row tile).
const Shape kShapes[] = {{2, 37, 48, 4}, {1, 64, 64, 1}, {1, 1, 8, 2}, {3, 19, 16, 1}, {2, 100, 96, 3}, {1, 150, 72, 6}};

TEST(AttentionTest, FastMatchesReference) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH);
    const size_t nqkv = size_t(s.B) * s.T * 3 * s.C, nout = size_t(s.B) * s.T * s.C;
    const size_t natt = size_t(s.B) * s.NH * s.T * s.T;
    // Scale 2 makes the softmax peaky enough to matter.
    auto qkv = random_vec<float>(nqkv, 1, -2.0f, 2.0f);
    auto dout = random_vec<float>(nout, 2);

    std::vector<float> out_ref(nout), att_ref(natt), dqkv_ref(nqkv), scr_ref(natt);
    ref::attention_forward(out_ref.data(), att_ref.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    ref::attention_backward(dqkv_ref.data(), scr_ref.data(), dout.data(), qkv.data(), att_ref.data(), s.B, s.T,
                            s.C, s.NH);

    // Outputs and work space start as NaN: the kernel must overwrite, not read them.
    std::vector<float> out(nout, nan), att(natt, nan), dqkv(nqkv, nan), scr(natt, nan);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    cpu::attention_backward(dqkv.data(), scr.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);

    EXPECT_LT(max_rel_err(out, out_ref), 2e-6);
    EXPECT_LT(max_rel_err(att, att_ref), 2e-6);
    EXPECT_LT(max_rel_err(dqkv, dqkv_ref), 5e-6);

    // Same thread count, same bits.
    std::vector<float> out2(nout), att2(natt), dqkv2(nqkv);
    cpu::attention_forward(out2.data(), att2.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    cpu::attention_backward(dqkv2.data(), scr.data(), dout.data(), qkv.data(), att2.data(), s.B, s.T, s.C, s.NH);
    EXPECT_EQ(0, std::memcmp(out.data(), out2.data(), nout * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dqkv.data(), dqkv2.data(), nqkv * sizeof(float)));
  }
}

TEST(AttentionTest, RefBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 12, NH = 3;  // hs = 4
  const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C, natt = size_t(B) * NH * T * T;
  auto qkv = random_vec<double>(nqkv, 3, -1.5, 1.5);
  auto w = random_vec<double>(nout, 4);  // loss = sum(out * w), so dout = w
  std::vector<double> out(nout), att(natt), scratch(natt), dqkv(nqkv);
  auto loss = [&](const std::vector<double>& x) {
    ref::attention_forward(out.data(), att.data(), x.data(), B, T, C, NH);
    double l = 0;
    for (size_t i = 0; i < nout; i++) l += out[i] * w[i];
    return l;
  };
  loss(qkv);
  ref::attention_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C, NH);

  const double eps = 1e-5;
  double max_err = 0, max_grad = 0;
  for (size_t i = 0; i < nqkv; i++) {
    auto x = qkv;
    x[i] = qkv[i] + eps;
    const double lp = loss(x);
    x[i] = qkv[i] - eps;
    const double lm = loss(x);
    max_err = std::max(max_err, std::abs((lp - lm) / (2 * eps) - dqkv[i]));
    max_grad = std::max(max_grad, std::abs(dqkv[i]));
  }
  ASSERT_GT(max_grad, 0.1);  // the gradient is not trivially zero
  EXPECT_LT(max_err / max_grad, 1e-6);
  // q, k and v all receive gradient (position 0's k gets some via later queries).
  for (int part = 0; part < 3; part++) {
    double m = 0;
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) m = std::max(m, std::abs(dqkv[(size_t(t) * 3 + part) * C + c]));
    EXPECT_GT(m, 1e-3) << "part " << part;
  }
}

TEST(AttentionTest, ProbabilitiesAreCausalAndNormalized) {
  const int B = 2, T = 70, C = 32, NH = 2;
  const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C, natt = size_t(B) * NH * T * T;
  auto qkv = random_vec<float>(nqkv, 5, -3.0f, 3.0f);
  std::vector<float> out(nout), att(natt, std::numeric_limits<float>::quiet_NaN());
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int bh = 0; bh < B * NH; bh++) {
    for (int i = 0; i < T; i++) {
      const float* row = &att[(size_t(bh) * T + i) * T];
      double sum = 0;
      for (int j = 0; j <= i; j++) {
        ASSERT_GE(row[j], 0.0f);
        sum += row[j];
      }
      ASSERT_NEAR(sum, 1.0, 1e-5) << "bh=" << bh << " row " << i;
      for (int j = i + 1; j < T; j++) ASSERT_EQ(row[j], 0.0f) << "bh=" << bh << " [" << i << "," << j << "]";
    }
  }
  // Causality: changing the last position's q/k/v leaves earlier outputs unchanged.
  auto qkv2 = qkv;
  for (int b = 0; b < B; b++)
    for (int c = 0; c < 3 * C; c++) qkv2[(size_t(b) * T + T - 1) * 3 * C + c] += 1.0f;
  std::vector<float> out2(nout), att2(natt);
  cpu::attention_forward(out2.data(), att2.data(), qkv2.data(), B, T, C, NH);
  for (int b = 0; b < B; b++) {
    const size_t first = size_t(b) * T * C, last = first + size_t(T - 1) * C;
    EXPECT_TRUE(std::equal(out.begin() + first, out.begin() + last, out2.begin() + first)) << "b=" << b;
    EXPECT_FALSE(std::equal(out.begin() + last, out.begin() + last + C, out2.begin() + last)) << "b=" << b;
  }
}

}  // namespace
}  // namespace loom
