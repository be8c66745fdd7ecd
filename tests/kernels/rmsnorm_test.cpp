// RMSNorm: fast kernel vs reference (float, and double for accuracy), the
// 16-bit outputs vs the fp32 ones rounded, thread-count independence, and the
// reference backward vs finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/ref/rmsnorm.h"
#include "test_util.h"

namespace loom {
namespace {

using test::all_close;
using test::cast_vec;
using test::random_vec;

struct Shape {
  int N, C;
};
const Shape kShapes[] = {{1, 1}, {6, 7}, {5, 16}, {21, 33}, {32, 768}, {3, 1000}};
constexpr float kEps = 1e-5f;

TEST(RmsnormTest, FastMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
    const size_t N = s.N, NC = N * s.C;
    auto inp = random_vec<float>(NC, 1, -1.5, 2.5), w = random_vec<float>(s.C, 2, 0.5, 1.5);
    auto dout = random_vec<float>(NC, 4);
    std::vector<float> out(NC), rstd(N), out_r(NC), rstd_r(N);
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), s.N, s.C, kEps);
    ref::rmsnorm_forward(out_r.data(), rstd_r.data(), inp.data(), w.data(), s.N, s.C, kEps);
    EXPECT_TRUE(all_close(out, out_r, 1e-5, 1e-6));
    EXPECT_TRUE(all_close(rstd, rstd_r, 1e-5, 0));

    // Against the double reference the fast kernel (double row sums) is tighter.
    auto inp_d = cast_vec<double>(inp), w_d = cast_vec<double>(w);
    std::vector<double> out_d(NC), rstd_d(N);
    ref::rmsnorm_forward(out_d.data(), rstd_d.data(), inp_d.data(), w_d.data(), s.N, s.C, double(kEps));
    EXPECT_TRUE(all_close(out, out_d, 1e-6, 1e-7));
    EXPECT_TRUE(all_close(rstd, rstd_d, 1e-6, 0));

    // Grads start non-zero: both accumulate.
    auto dinp = random_vec<float>(NC, 5), dw = random_vec<float>(s.C, 6);
    auto dinp_r = dinp, dw_r = dw;
    cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), s.N, s.C);
    ref::rmsnorm_backward(dinp_r.data(), dw_r.data(), dout.data(), inp.data(), w.data(), rstd.data(), s.N, s.C);
    EXPECT_TRUE(all_close(dinp, dinp_r, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(dw, dw_r, 1e-5, 1e-5));
  }
}

// Hugging Face's LlamaRMSNorm in fp32: variance = x.pow(2).mean(-1),
// weight * (x * rsqrt(variance + eps)), all in float.
TEST(RmsnormTest, MatchesHuggingFaceFormula) {
  const int N = 4, C = 512;
  auto inp = random_vec<float>(size_t(N) * C, 7, -3, 3), w = random_vec<float>(C, 8, -2, 2);
  std::vector<float> out(size_t(N) * C), rstd(N), hf(size_t(N) * C);
  cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6f);
  for (int n = 0; n < N; n++) {
    const float* x = &inp[size_t(n) * C];
    float var = 0;
    for (int c = 0; c < C; c++) var += x[c] * x[c];
    var /= C;
    const float r = 1.0f / std::sqrt(var + 1e-6f);
    for (int c = 0; c < C; c++) hf[size_t(n) * C + c] = w[c] * (x[c] * r);
  }
  EXPECT_TRUE(all_close(out, hf, 1e-6, 1e-7));
}

// The 16-bit outputs are the fp32 kernel's, rounded once; rstd is the same.
template <class A>
void check_lowp_forward() {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
    const size_t NC = size_t(s.N) * s.C;
    auto inp = random_vec<float>(NC, 9, -2, 3), w = random_vec<float>(s.C, 10, 0.5, 1.5);
    std::vector<float> out(NC), rstd(s.N), rstd16(s.N);
    std::vector<A> out16(NC);
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), s.N, s.C, kEps);
    cpu::rmsnorm_forward(out16.data(), rstd16.data(), inp.data(), w.data(), s.N, s.C, kEps);
    EXPECT_TRUE(test::bitwise_equal(rstd16, rstd));
    EXPECT_TRUE(test::bits_of_rounded(out16, out));
  }
}
TEST(RmsnormTest, Bf16ForwardIsFp32Rounded) { check_lowp_forward<bf16>(); }
TEST(RmsnormTest, F16ForwardIsFp32Rounded) { check_lowp_forward<f16>(); }

TEST(RmsnormTest, IsIndependentOfThreadCount) {
  const int N = 63, C = 100;
  const size_t NC = size_t(N) * C;
  auto inp = random_vec<float>(NC, 11), w = random_vec<float>(C, 12), dout = random_vec<float>(NC, 14);
  std::vector<float> first[4];
  for (int threads : {1, 2, 3, 4}) {
    test::ScopedThreads scoped(threads);
    std::vector<float> out(NC), rstd(N), dinp(NC, 0.f), dw(C, 0.f);
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, kEps);
    cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
    if (first[0].empty()) {
      first[0] = out, first[1] = rstd, first[2] = dinp, first[3] = dw;
      continue;
    }
    EXPECT_TRUE(test::bitwise_equal(out, first[0])) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(rstd, first[1])) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(dinp, first[2])) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(dw, first[3])) << threads << " threads";
  }
}

TEST(RmsnormTest, ReferenceBackwardMatchesFiniteDifferences) {
  const int N = 6, C = 5;
  const size_t NC = size_t(N) * C;
  auto inp = random_vec<double>(NC, 21, -1, 2), w = random_vec<double>(C, 22), g = random_vec<double>(NC, 24);
  std::vector<double> out(NC), rstd(N);
  const double eps = 1e-3;  // large enough to matter
  auto loss = [&] {
    ref::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, eps);
    return test::weighted_sum(out, g);
  };
  loss();  // fills rstd at the unperturbed point
  const auto rstd0 = rstd;
  std::vector<double> dinp(NC, 0.0), dw(C, 0.0);
  ref::rmsnorm_backward(dinp.data(), dw.data(), g.data(), inp.data(), w.data(), rstd0.data(), N, C);
  EXPECT_TRUE(test::check_fd(inp, dinp, loss));
  EXPECT_TRUE(test::check_fd(w, dw, loss));
}

}  // namespace
}  // namespace loom
