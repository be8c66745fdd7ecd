// The backend's op profile (loom bench step --profile): off by default; on,
// each call outside a parallel region lands in its op's row with its FLOPs.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/backend.h"
#include "kernels/kernel_profile.h"

namespace {

TEST(KernelProfile, RowsByOpAndShapeWithTheirWork) {
  loom::Backend ops;
  const int N = 8, C = 16, OC = 24;
  std::vector<float> x(N * C, 0.5f), w(OC * C, 0.25f), y(N * OC), dx(N * C), dw(OC * C, 0.f);
  ops.matmul_forward(y.data(), x.data(), w.data(), nullptr, N, C, OC);  // not profiled: off
  loom::KernelProfile profile;
  ops.set_profile(&profile);
  for (int i = 0; i < 3; i++) ops.matmul_forward(y.data(), x.data(), w.data(), nullptr, N, C, OC);
  ops.matmul_backward(dx.data(), dw.data(), nullptr, y.data(), x.data(), w.data(), N, C, OC);
  ops.gelu_forward(dx.data(), x.data(), x.size());
  ops.set_profile(nullptr);
  ops.gelu_forward(dx.data(), x.data(), x.size());  // off again

  const auto& rows = profile.rows();
  ASSERT_EQ(rows.size(), 3u);
  const loom::OpTotals& fwd = rows.at("matmul fwd fp32 8x16 -> 24");
  EXPECT_EQ(fwd.calls, 3);
  EXPECT_EQ(fwd.flops, 3 * 2.0 * N * C * OC);
  EXPECT_EQ(fwd.limit, loom::OpLimit::fp32_flops);
  EXPECT_GT(fwd.seconds, 0);
  const loom::OpTotals& bwd = rows.at("matmul bwd fp32 8x16 -> 24");
  EXPECT_EQ(bwd.flops, 2 * 2.0 * N * C * OC);  // the input and weight gradients
  const loom::OpTotals& gelu = rows.at("gelu fwd fp32 128");
  EXPECT_EQ(gelu.calls, 1);
  EXPECT_EQ(gelu.limit, loom::OpLimit::memory);
  EXPECT_EQ(gelu.bytes, 2.0 * 4 * 128);
}

}  // namespace
