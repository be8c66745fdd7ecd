// 16-bit (bf16, fp16) layernorm and GELU: each output must be bit for bit the
// fp32 kernel's output on the same (widened) input, rounded once.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "test_util.h"

namespace loom {
namespace {

using test::random_vec;

using test::bits_of_rounded;
using test::round_to;
using test::round_vec;
using test::widen;
using test::widen_vec;

template <class A>
void check_layernorm() {
  struct Shape {
    int B, T, C;
  };
  for (const Shape s : {Shape{1, 1, 1}, Shape{2, 3, 7}, Shape{3, 7, 33}, Shape{2, 16, 768}, Shape{1, 3, 1000}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C);
    const size_t N = size_t(s.B) * s.T, NC = N * s.C;
    auto inp = random_vec<float>(NC, 1, -1.5, 2.5), w = random_vec<float>(s.C, 2, 0.5, 1.5);
    auto b = random_vec<float>(s.C, 3);
    b[0] = 7e4f;  // past fp16's largest finite value: round() gives inf, and so must the kernel
    std::vector<float> out32(NC), mean32(N), rstd32(N);
    cpu::layernorm_forward(out32.data(), mean32.data(), rstd32.data(), inp.data(), w.data(), b.data(), s.B, s.T, s.C);
    for (int threads : {1, 2, 3}) {
      test::ScopedThreads scoped(threads);
      std::vector<A> out(NC, A{0x7fff});
      std::vector<float> mean(N), rstd(N);
      cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), s.B, s.T, s.C);
      EXPECT_TRUE(bits_of_rounded(out, out32)) << threads << " threads";
      EXPECT_TRUE(test::bitwise_equal(mean, mean32)) << threads << " threads";
      EXPECT_TRUE(test::bitwise_equal(rstd, rstd32)) << threads << " threads";
    }
  }
}

TEST(LowpLayernormTest, Bf16IsRoundedFp32) { check_layernorm<bf16>(); }
TEST(LowpLayernormTest, F16IsRoundedFp32) { check_layernorm<f16>(); }

template <class A>
void check_gelu() {
  for (size_t N : {size_t(1), size_t(17), size_t(1000), size_t(4099), size_t(3 * 4096 + 123)}) {
    SCOPED_TRACE(testing::Message() << "N=" << N);
    // 16-bit inputs over GELU's whole interesting range (and its tails).
    const auto inp = round_vec<A>(random_vec<float>(N, 7, -8, 8));
    const auto dout = random_vec<float>(N, 8, -2, 2);
    const auto x = widen_vec(inp);
    std::vector<float> out32(N), din32(N);
    cpu::gelu_forward(out32.data(), x.data(), N);
    cpu::gelu_backward(din32.data(), x.data(), dout.data(), N);
    for (int threads : {1, 2, 3}) {
      test::ScopedThreads scoped(threads);
      std::vector<A> out(N, A{0x7fff}), din(N, A{0x7fff});
      cpu::gelu_forward(out.data(), inp.data(), N);
      cpu::gelu_backward(din.data(), inp.data(), dout.data(), N);
      EXPECT_TRUE(bits_of_rounded(out, out32)) << threads << " threads";
      EXPECT_TRUE(bits_of_rounded(din, din32)) << threads << " threads";
    }
  }
}

TEST(LowpGeluTest, Bf16IsRoundedFp32) { check_gelu<bf16>(); }
TEST(LowpGeluTest, F16IsRoundedFp32) { check_gelu<f16>(); }

}  // namespace
}  // namespace loom
