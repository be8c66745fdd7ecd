// Global-norm clipping pieces: sum_of_squares vs a double loop (and its
// thread-count independence), and clip_scale's behaviour.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/grad_norm.h"
#include "optim/grad_clip.h"
#include "kernels/ref/grad_norm.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(GradNormTest, SumOfSquaresMatchesDoubleLoop) {
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(1000), size_t(1 << 20) + 3}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    auto x = test::random_vec<float>(n, 1, -3, 3);
    long double acc = 0;  // x87 extended: ~11 more bits than the kernels' double
    for (float f : x) acc += (long double)f * f;
    const double expect = double(acc);
    EXPECT_NEAR(cpu::sum_of_squares(x.data(), n), expect, 1e-13 * expect);
    // The reference adds a million terms in sequence: error up to ~n ulp.
    EXPECT_NEAR(ref::sum_of_squares(x.data(), n), expect, 1e-10 * expect);
  }
  // Tiny and huge magnitudes that would under/overflow a float accumulator.
  std::vector<float> x = {1e-30f, 3e30f, -2e-25f, 4e25f};
  const double expect = 1e-60 + 9e60 + 4e-50 + 16e50;
  EXPECT_NEAR(cpu::sum_of_squares(x.data(), x.size()) / expect, 1.0, 1e-6);
}

TEST(GradNormTest, SumOfSquaresIsIndependentOfThreadCount) {
  auto x = test::random_vec<float>(100003, 2, -1, 1);
  double first = -1;
  for (int threads : {1, 2, 3, 7}) {
    test::ScopedThreads scoped(threads);
    const double s = cpu::sum_of_squares(x.data(), x.size());
    if (first < 0) first = s;
    EXPECT_EQ(s, first) << threads << " threads";
  }
}

TEST(GradNormTest, ClipScale) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(clip_scale(5.0, 0.f), 1.f);   // clipping off
  EXPECT_EQ(clip_scale(5.0, -1.f), 1.f);
  EXPECT_EQ(clip_scale(0.5, 1.f), 1.f);   // under the limit
  EXPECT_EQ(clip_scale(0.0, 1.f), 1.f);
  EXPECT_FLOAT_EQ(clip_scale(4.0, 1.f), float(1.0 / (4.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_scale(1.0, 1.f), float(1.0 / (1.0 + 1e-6)));  // just over: the 1e-6 makes it < 1
  EXPECT_LT(clip_scale(1.0, 1.f), 1.f);
  EXPECT_EQ(clip_scale(inf, 1.f), 0.f);
  EXPECT_TRUE(std::isnan(clip_scale(nan, 1.f)));  // propagated, as torch's clamp does
  for (double norm : {0.0, 0.3, 1.0, 2.5, 1e6, inf})
    for (float max_norm : {-1.f, 0.f, 0.5f, 1.f, 3.f})
      EXPECT_EQ(clip_scale(norm, max_norm), ref::clip_scale(norm, max_norm)) << norm << " " << max_norm;
  EXPECT_TRUE(std::isnan(ref::clip_scale(nan, 1.f)));
}

}  // namespace
}  // namespace loom
