// Residual add: fast kernel vs reference, including in-place use.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/residual.h"
#include "kernels/ref/residual.h"
#include "test_util.h"

namespace loom {
namespace {

TEST(ResidualTest, FastMatchesReference) {
  for (size_t N : {size_t(1), size_t(15), size_t(16), size_t(17), size_t(1000), size_t(12345)}) {
    SCOPED_TRACE(testing::Message() << "N=" << N);
    auto a = test::random_vec<float>(N, 1), b = test::random_vec<float>(N, 2);
    std::vector<float> out(N, -1.f), out_ref(N);
    cpu::residual_forward(out.data(), a.data(), b.data(), N);
    ref::residual_forward(out_ref.data(), a.data(), b.data(), N);
    EXPECT_TRUE(test::bitwise_equal(out, out_ref));
    EXPECT_EQ(out_ref[N - 1], a[N - 1] + b[N - 1]);

    auto a2 = a, b2 = b;  // out aliasing either input
    cpu::residual_forward(a2.data(), a2.data(), b.data(), N);
    cpu::residual_forward(b2.data(), a.data(), b2.data(), N);
    EXPECT_TRUE(test::bitwise_equal(a2, out_ref));
    EXPECT_TRUE(test::bitwise_equal(b2, out_ref));
  }
}

}  // namespace
}  // namespace loom
