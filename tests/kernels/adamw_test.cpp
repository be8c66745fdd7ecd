// AdamW: fast kernel vs reference, and the reference vs PyTorch's update
// written out step by step (torch.optim.AdamW, single-tensor path).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/ref/adamw.h"
#include "test_util.h"

namespace loom {
namespace {

using test::all_close;
using test::cast_vec;
using test::random_vec;

TEST(AdamWTest, FastMatchesReference) {
  for (size_t n : {size_t(1), size_t(17), size_t(1000), size_t(4097)}) {
    for (int t : {1, 10}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " t=" << t);
      cpu::AdamWStep step;
      step.lr = 1e-2f, step.beta1 = 0.9f, step.beta2 = 0.95f, step.eps = 1e-8f, step.t = t;
      auto p = random_vec<float>(n, 1), m = random_vec<float>(n, 2, -0.1, 0.1), v = random_vec<float>(n, 3, 0, 0.01);
      auto g = random_vec<float>(n, 4);
      auto p_r = p, m_r = m, v_r = v;
      cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), n, 0.5f, 0.1f, step);
      ref::adamw_update(p_r.data(), m_r.data(), v_r.data(), g.data(), n, 0.5f, 0.1f, step);
      EXPECT_TRUE(all_close(m, m_r, 1e-6, 1e-9));
      EXPECT_TRUE(all_close(v, v_r, 1e-6, 1e-12));
      // Updates are ~lr, params ~1: a few ulp of the param.
      EXPECT_TRUE(all_close(p, p_r, 1e-6, 3e-7));
    }
  }
}

TEST(AdamWTest, FirstStepMovesEachParamByLr) {
  // With m = v = 0 at t = 1 the bias-corrected step is lr * g / (|g| + eps).
  cpu::AdamWStep step;
  step.lr = 0.01f;
  std::vector<float> p = {1.f, -2.f, 0.5f}, m(3, 0.f), v(3, 0.f), g = {0.3f, -4.f, 1e-3f};
  cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), 3, 1.f, 0.f, step);
  EXPECT_NEAR(p[0], 1.f - 0.01f, 1e-6);
  EXPECT_NEAR(p[1], -2.f + 0.01f, 1e-6);
  EXPECT_NEAR(p[2], 0.5f - 0.01f, 1e-6);
}

// torch/optim/adamw.py (_single_tensor_adamw), in the order it does things.
void torch_adamw_step(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                      const std::vector<double>& grad, double grad_scale, double lr, double b1, double b2, double eps,
                      double wd, int t) {
  for (size_t i = 0; i < p.size(); i++) {
    const double g = grad[i] * grad_scale;
    p[i] *= 1 - lr * wd;                // param.mul_(1 - lr * weight_decay)
    m[i] += (1 - b1) * (g - m[i]);      // exp_avg.lerp_(grad, 1 - beta1)
    v[i] = v[i] * b2 + (1 - b2) * g * g;  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
    const double step_size = lr / (1 - std::pow(b1, t));
    const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
    p[i] -= step_size * m[i] / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

TEST(AdamWTest, ReferenceMatchesTorchFormula) {
  const size_t n = 50;
  cpu::AdamWStep step;
  step.lr = 3e-3f, step.beta1 = 0.85f, step.beta2 = 0.99f, step.eps = 1e-6f;
  const double wd = 0.05, scale = 0.8;
  auto p = random_vec<double>(n, 5), m = random_vec<double>(n, 6, -0.1, 0.1), v = random_vec<double>(n, 7, 0, 0.01);
  auto p_t = p, m_t = m, v_t = v;
  for (int t = 1; t <= 5; t++) {
    step.t = t;
    auto g = random_vec<double>(n, 100 + t);
    ref::adamw_update(p.data(), m.data(), v.data(), g.data(), n, scale, wd, step);
    torch_adamw_step(p_t, m_t, v_t, g, scale, step.lr, step.beta1, step.beta2, step.eps, wd, t);
  }
  EXPECT_TRUE(all_close(p, p_t, 1e-12, 1e-15));
  EXPECT_TRUE(all_close(m, m_t, 1e-12, 1e-15));
  EXPECT_TRUE(all_close(v, v_t, 1e-12, 1e-15));

  // The fp32 kernel follows the same trajectory to fp32 accuracy.
  auto pf = cast_vec<float>(p_t), mf = cast_vec<float>(m_t), vf = cast_vec<float>(v_t);
  auto g = random_vec<double>(n, 200);
  auto gf = cast_vec<float>(g);
  step.t = 6;
  cpu::adamw_update(pf.data(), mf.data(), vf.data(), gf.data(), n, float(scale), float(wd), step);
  torch_adamw_step(p_t, m_t, v_t, cast_vec<double>(gf), float(scale), step.lr, step.beta1, step.beta2, step.eps,
                   float(wd), 6);
  EXPECT_TRUE(all_close(pf, p_t, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(mf, m_t, 1e-5, 1e-8));
}

}  // namespace
}  // namespace loom

// Mixed precision: the update that also writes the 16-bit compute weights
// changes params and moments bit for bit as the plain update does, and the
// copy is those parameters rounded once (as the bulk casts round them).
TEST(AdamWTest, UpdateWithCopyIsThePlainUpdateThenTheRounding) {
  const size_t n = 10007;  // several blocks and a partial one
  std::vector<float> p(n), m(n), v(n), g(n);
  for (size_t i = 0; i < n; i++)
    p[i] = std::sin(float(i)), m[i] = 1e-3f * std::cos(float(i)), v[i] = 1e-6f * float(i % 7), g[i] = std::cos(3.f * float(i));
  const loom::cpu::AdamWStep step{1e-3f, 0.9f, 0.95f, 1e-8f, 3};
  auto p1 = p, m1 = m, v1 = v;
  loom::cpu::adamw_update(p1.data(), m1.data(), v1.data(), g.data(), n, 0.5f, 0.1f, step);
  {
    auto p2 = p, m2 = m, v2 = v;
    std::vector<loom::bf16> copy(n);
    loom::cpu::adamw_update(p2.data(), copy.data(), m2.data(), v2.data(), g.data(), n, 0.5f, 0.1f, step);
    for (size_t i = 0; i < n; i++) {
      ASSERT_EQ(loom::float_bits(p2[i]), loom::float_bits(p1[i])) << i;
      ASSERT_EQ(loom::float_bits(m2[i]), loom::float_bits(m1[i])) << i;
      ASSERT_EQ(loom::float_bits(v2[i]), loom::float_bits(v1[i])) << i;
      ASSERT_EQ(copy[i].bits, loom::float_to_bf16(p1[i]).bits) << i;
    }
  }
  auto p3 = p, m3 = m, v3 = v;
  std::vector<loom::f16> copy(n);
  loom::cpu::adamw_update(p3.data(), copy.data(), m3.data(), v3.data(), g.data(), n, 0.5f, 0.1f, step);
  for (size_t i = 0; i < n; i++) {
    ASSERT_EQ(loom::float_bits(p3[i]), loom::float_bits(p1[i])) << i;
    ASSERT_EQ(copy[i].bits, loom::float_to_f16(p1[i]).bits) << i;
  }
}
