// Softmax + cross-entropy: fast kernels vs reference (float, and double for
// the long-row sums), ignored targets, stability, and the reference fused
// gradient vs finite differences of the summed loss.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/softmax_xent.h"
#include "kernels/ref/softmax_xent.h"
#include "test_util.h"

namespace loom {
namespace {

using test::all_close;
using test::cast_vec;
using test::random_vec;

struct Shape {
  int N, V;
};
const Shape kShapes[] = {{1, 1}, {3, 7}, {5, 37}, {4, 1000}, {6, 50304}};

TEST(SoftmaxXentTest, FastMatchesReference) {
  const float dloss = 0.3f;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " V=" << s.V);
    const size_t NV = size_t(s.N) * s.V;
    auto logits = random_vec<float>(NV, 1, -8, 8);
    auto targets = test::random_ints(s.N, 2, 0, s.V - 1);
    if (s.N > 2) targets[1] = -1;  // ignored row
    auto logits_d = cast_vec<double>(logits);

    std::vector<float> loss(s.N, -1.f), loss_r(s.N);
    std::vector<double> loss_d(s.N);
    cpu::softmax_xent_forward(loss.data(), logits.data(), targets.data(), s.N, s.V);
    ref::softmax_xent_forward(loss_r.data(), logits.data(), targets.data(), s.N, s.V);
    ref::softmax_xent_forward(loss_d.data(), logits_d.data(), targets.data(), s.N, s.V);
    // ref<float> sums 50k terms in float; the double reference is the tight check.
    EXPECT_TRUE(all_close(loss, loss_r, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(loss, loss_d, 1e-6, 1e-6));
    if (s.N > 2) {
      EXPECT_EQ(loss[1], 0.f);
    }

    auto grad = logits, grad_r = logits;
    std::vector<float> floss(s.N, -1.f), floss_r(s.N);
    cpu::softmax_xent_fused(floss.data(), grad.data(), targets.data(), dloss, s.N, s.V);
    ref::softmax_xent_fused(floss_r.data(), grad_r.data(), targets.data(), dloss, s.N, s.V);
    ref::softmax_xent_fused(loss_d.data(), logits_d.data(), targets.data(), double(dloss), s.N, s.V);
    EXPECT_TRUE(all_close(floss, loss, 1e-7, 0));
    EXPECT_TRUE(all_close(grad, grad_r, 1e-4, 1e-9));
    EXPECT_TRUE(all_close(grad, logits_d, 1e-5, 1e-10));
    for (int n = 0; n < s.N; n++) {
      double row = 0;
      for (int v = 0; v < s.V; v++) row += grad[size_t(n) * s.V + v];
      EXPECT_NEAR(row, 0.0, 1e-6) << "gradient row " << n << " should sum to zero";
      if (targets[n] < 0) {
        for (int v = 0; v < s.V; v++) ASSERT_EQ(grad[size_t(n) * s.V + v], 0.f);
      }
    }
  }
}

TEST(SoftmaxXentTest, LargeLogitsAreStable) {
  // One row dominated by a huge logit, one with all logits equal and huge.
  const int N = 2, V = 5;
  std::vector<float> logits = {1000.f, 0.f, -1000.f, 999.f, 3.f, 500.f, 500.f, 500.f, 500.f, 500.f};
  std::vector<int32_t> targets = {3, 2};
  std::vector<float> loss(N);
  cpu::softmax_xent_forward(loss.data(), logits.data(), targets.data(), N, V);
  EXPECT_NEAR(loss[0], std::log1p(std::exp(-1.0)) + 1.0, 1e-6);  // -log(e^-1 / (1 + e^-1))
  EXPECT_NEAR(loss[1], std::log(5.0), 1e-6);
  cpu::softmax_xent_fused(loss.data(), logits.data(), targets.data(), 1.f, N, V);
  EXPECT_NEAR(logits[5], 0.2f, 1e-7);
  EXPECT_NEAR(logits[7], -0.8f, 1e-7);
  EXPECT_NEAR(logits[3], 1.0 / (1.0 + std::exp(1.0)) - 1.0, 1e-6);
}

TEST(SoftmaxXentTest, TargetOutsideVocabularyThrows) {
  std::vector<float> logits(6), loss(2);
  std::vector<int32_t> targets = {0, 3};
  EXPECT_THROW(cpu::softmax_xent_forward(loss.data(), logits.data(), targets.data(), 2, 3), Error);
  EXPECT_THROW(cpu::softmax_xent_fused(loss.data(), logits.data(), targets.data(), 1.f, 2, 3), Error);
}

TEST(SoftmaxXentTest, ReferenceFusedGradientMatchesFiniteDifferences) {
  const int N = 4, V = 7;
  const double dloss = 0.7;
  auto logits = random_vec<double>(size_t(N) * V, 3, -3, 3);
  std::vector<int32_t> targets = {2, -1, 6, 0};
  auto loss = [&] {
    std::vector<double> losses(N);
    ref::softmax_xent_forward(losses.data(), logits.data(), targets.data(), N, V);
    double s = 0;
    for (double l : losses) s += dloss * l;
    return s;
  };
  auto grad = logits;
  std::vector<double> losses(N);
  ref::softmax_xent_fused(losses.data(), grad.data(), targets.data(), dloss, N, V);
  EXPECT_TRUE(test::check_fd(logits, grad, loss));
}

}  // namespace
}  // namespace loom
