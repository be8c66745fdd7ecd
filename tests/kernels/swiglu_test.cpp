// SwiGLU: fast kernel vs the double reference (PyTorch's F.silu(g) * u is
// within a few ulp of it too), the 16-bit kernels vs the fp32 one on the
// widened inputs, thread-count independence, and the reference backward vs
// finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/ref/swiglu.h"
#include "test_util.h"

namespace loom {
namespace {

using test::all_close;
using test::cast_vec;
using test::random_vec;

struct Shape {
  int N, F;
};
// F = 1, a ragged 37 (vector loop plus a scalar remainder), LLaMA-like sizes,
// and 2100 (16-bit rows go in column blocks of 1024: a ragged last block).
const Shape kShapes[] = {{1, 1}, {3, 37}, {8, 256}, {5, 1003}, {2, 2816}, {3, 2100}};

TEST(SwigluTest, FastMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " F=" << s.F);
    const size_t NF = size_t(s.N) * s.F;
    // Gates over [-12, 12]: both tails of the sigmoid.
    auto gu = random_vec<float>(2 * NF, 1, -12, 12), dout = random_vec<float>(NF, 2);
    std::vector<float> out(NF);
    std::vector<float> dgu(2 * NF, std::numeric_limits<float>::quiet_NaN());  // overwritten, not +=
    cpu::swiglu_forward(out.data(), gu.data(), s.N, s.F);
    cpu::swiglu_backward(dgu.data(), gu.data(), dout.data(), s.N, s.F);

    auto gu_d = cast_vec<double>(gu), dout_d = cast_vec<double>(dout);
    std::vector<double> out_d(NF), dgu_d(2 * NF);
    ref::swiglu_forward(out_d.data(), gu_d.data(), s.N, s.F);
    ref::swiglu_backward(dgu_d.data(), gu_d.data(), dout_d.data(), s.N, s.F);
    // exp (libmvec or libm) and the few roundings after it: well within 1e-6
    // relative, the agreement asked of PyTorch's fp32 silu.
    EXPECT_TRUE(all_close(out, out_d, 5e-7, 1e-30));
    // dgate loses relative accuracy near its zero (1 + g (1 - s) = 0 at
    // g ~ -1.28) to cancellation, hence the small absolute term.
    EXPECT_TRUE(all_close(dgu, dgu_d, 1e-6, 1e-7));
  }
}

TEST(SwigluTest, ExtremeGates) {
  // exp(-g) overflows for g < -88 and vanishes for g > 104: silu tends to 0
  // and g, its derivative to 0 and 1, with no NaN.
  const std::vector<float> gu = {-1000.f, -100.f, -88.f, 0.f, 88.f, 1000.f, 2.f, 2.f, 2.f, 2.f, 2.f, 2.f};
  const std::vector<float> ones(6, 1.0f);
  std::vector<float> out(6), dgu(12);
  cpu::swiglu_forward(out.data(), gu.data(), 1, 6);
  cpu::swiglu_backward(dgu.data(), gu.data(), ones.data(), 1, 6);
  EXPECT_TRUE(all_close(out, std::vector<double>{0, 0, -2 * 88 * std::exp(-88.0), 0, 176, 2000}, 1e-6, 0));
  // dgate = up * dsilu = 2 dsilu; dup = silu.
  EXPECT_TRUE(all_close(dgu, std::vector<double>{0, 0, 0, 1, 2, 2, 0, 0, -88 * std::exp(-88.0), 0, 88, 1000}, 1e-6,
                        1e-30));
}

// 16-bit storage: the fp32 kernel on the widened input, rounded once.
template <class A>
void check_lowp() {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " F=" << s.F);
    const size_t NF = size_t(s.N) * s.F;
    const auto gu = test::round_vec<A>(random_vec<float>(2 * NF, 3, -8, 8)), dout = random_vec<float>(NF, 4);
    const auto guw = test::widen_vec(gu);

    std::vector<float> out32(NF), dgu32(2 * NF);
    cpu::swiglu_forward(out32.data(), guw.data(), s.N, s.F);
    cpu::swiglu_backward(dgu32.data(), guw.data(), dout.data(), s.N, s.F);
    std::vector<A> out(NF), dgu(2 * NF);
    cpu::swiglu_forward(out.data(), gu.data(), s.N, s.F);
    cpu::swiglu_backward(dgu.data(), gu.data(), dout.data(), s.N, s.F);
    EXPECT_TRUE(test::bits_of_rounded(out, out32));
    EXPECT_TRUE(test::bits_of_rounded(dgu, dgu32));
  }
}
TEST(SwigluTest, Bf16IsFp32OnWidenedInputRounded) { check_lowp<bf16>(); }
TEST(SwigluTest, F16IsFp32OnWidenedInputRounded) { check_lowp<f16>(); }

TEST(SwigluTest, IsIndependentOfThreadCount) {
  const int N = 37, F = 101;  // rows for 1..5 threads, a ragged vector loop
  const size_t NF = size_t(N) * F;
  auto gu = random_vec<float>(2 * NF, 5, -6, 6), dout = random_vec<float>(NF, 6);
  std::vector<float> out1(NF), dgu1(2 * NF);
  {
    test::ScopedThreads scoped(1);
    cpu::swiglu_forward(out1.data(), gu.data(), N, F);
    cpu::swiglu_backward(dgu1.data(), gu.data(), dout.data(), N, F);
  }
  for (int threads : {2, 3, 5}) {
    test::ScopedThreads scoped(threads);
    std::vector<float> out(NF), dgu(2 * NF);
    cpu::swiglu_forward(out.data(), gu.data(), N, F);
    cpu::swiglu_backward(dgu.data(), gu.data(), dout.data(), N, F);
    EXPECT_TRUE(test::bitwise_equal(out, out1)) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(dgu, dgu1)) << threads << " threads";
  }
}

TEST(SwigluTest, ReferenceBackwardMatchesFiniteDifferences) {
  const int N = 3, F = 7;
  auto gu = random_vec<double>(2 * size_t(N) * F, 7, -5, 5), w = random_vec<double>(size_t(N) * F, 8);
  auto loss = [&] {
    std::vector<double> out(size_t(N) * F);
    ref::swiglu_forward(out.data(), gu.data(), N, F);
    return test::weighted_sum(out, w);
  };
  std::vector<double> dgu(gu.size());
  ref::swiglu_backward(dgu.data(), gu.data(), w.data(), N, F);
  EXPECT_TRUE(test::check_fd(gu, dgu, loss));
}

}  // namespace
}  // namespace loom
