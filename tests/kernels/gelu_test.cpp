// GELU (tanh form): fast kernel vs reference, in-place backward, and the
// reference backward vs finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/gelu.h"
#include "kernels/ref/gelu.h"
#include "test_util.h"

namespace loom {
namespace {

using test::all_close;
using test::random_vec;

TEST(GeluTest, FastMatchesReference) {
  for (size_t N : {size_t(1), size_t(15), size_t(17), size_t(1000), size_t(4099), size_t(10000)}) {
    SCOPED_TRACE(testing::Message() << "N=" << N);
    auto inp = random_vec<float>(N, 1, -6, 6), dout = random_vec<float>(N, 2);
    std::vector<float> out(N), out_r(N);
    cpu::gelu_forward(out.data(), inp.data(), N);
    ref::gelu_forward(out_r.data(), inp.data(), N);
    // In the left tail gelu = 0.5 x (1 + tanh) loses relative accuracy to
    // cancellation in either version, hence the absolute term.
    EXPECT_TRUE(all_close(out, out_r, 1e-5, 2e-6));

    std::vector<float> dinp(N, std::numeric_limits<float>::quiet_NaN()), dinp_r(N);  // overwritten, not +=
    cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), N);
    ref::gelu_backward(dinp_r.data(), inp.data(), dout.data(), N);
    EXPECT_TRUE(all_close(dinp, dinp_r, 1e-5, 2e-6));

    auto inplace = dout;  // dinp aliasing dout
    cpu::gelu_backward(inplace.data(), inp.data(), inplace.data(), N);
    EXPECT_TRUE(test::bitwise_equal(inplace, dinp));
  }
}

TEST(GeluTest, IsIndependentOfThreadCount) {
  const size_t N = 3 * 4096 + 123;  // several blocks and a ragged tail
  auto inp = random_vec<float>(N, 5, -5, 5), dout = random_vec<float>(N, 6);
  std::vector<float> out1(N), din1(N);
  {
    test::ScopedThreads scoped(1);
    cpu::gelu_forward(out1.data(), inp.data(), N);
    cpu::gelu_backward(din1.data(), inp.data(), dout.data(), N);
  }
  for (int threads : {2, 3, 5}) {
    test::ScopedThreads scoped(threads);
    std::vector<float> out(N), din(N);
    cpu::gelu_forward(out.data(), inp.data(), N);
    cpu::gelu_backward(din.data(), inp.data(), dout.data(), N);
    EXPECT_TRUE(test::bitwise_equal(out, out1)) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(din, din1)) << threads << " threads";
  }
}

TEST(GeluTest, KnownValues) {
  const std::vector<float> x = {0.f, 1.f, -1.f, 10.f, -10.f};
  std::vector<float> y(x.size()), dy(x.size()), ones(x.size(), 1.f);
  cpu::gelu_forward(y.data(), x.data(), x.size());
  cpu::gelu_backward(dy.data(), x.data(), ones.data(), x.size());
  // gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411919906...
  EXPECT_TRUE(all_close(y, std::vector<double>{0.0, 0.8411919906082768, -0.15880800939172324, 10.0, 0.0}, 1e-6, 1e-7));
  EXPECT_NEAR(dy[0], 0.5f, 1e-7);
  EXPECT_NEAR(dy[3], 1.0f, 1e-6);
  EXPECT_NEAR(dy[4], 0.0f, 1e-6);
}

TEST(GeluTest, ReferenceBackwardMatchesFiniteDifferences) {
  const size_t N = 40;
  auto inp = random_vec<double>(N, 3, -4, 4), g = random_vec<double>(N, 4);
  auto loss = [&] {
    std::vector<double> out(N);
    ref::gelu_forward(out.data(), inp.data(), N);
    return test::weighted_sum(out, g);
  };
  std::vector<double> dinp(N);
  ref::gelu_backward(dinp.data(), inp.data(), g.data(), N);
  EXPECT_TRUE(test::check_fd(inp, dinp, loss));
}

}  // namespace
}  // namespace loom
