// Rotary position embedding: the table and the fast kernel vs the reference
// and vs an independent formula (a complex rotation), the backward as the
// adjoint of the forward, the reference backward vs finite differences, and
// the 16-bit kernels vs the fp32 one on the widened inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/rope.h"
#include "kernels/ref/rope.h"
#include "test_util.h"

namespace loom {
namespace {

using test::all_close;
using test::random_vec;

struct Shape {
  int B, T, NH, NKV, hd;
  double theta;
  int N() const { return B * T; }
  int row() const { return (NH + 2 * NKV) * hd; }
  size_t nqkv() const { return size_t(N()) * row(); }
  size_t ntab() const { return size_t(T) * (hd / 2); }
};

testing::Message describe(const Shape& s) {
  return testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV << " hd=" << s.hd
                            << " theta=" << s.theta;
}

// Multi-head, grouped-query and multi-query; hd = 2 (one pair) to 128;
// LLaMA 2's theta 1e4 and LLaMA 3's 5e5.
const Shape kShapes[] = {{2, 7, 2, 2, 2, 10000.0},
                         {3, 37, 4, 2, 16, 10000.0},
                         {1, 300, 8, 1, 64, 500000.0},
                         {2, 33, 6, 3, 128, 10000.0}};

struct Tables {
  std::vector<float> cos, sin;
};
Tables tables(const Shape& s) {
  Tables t{std::vector<float>(s.ntab()), std::vector<float>(s.ntab())};
  cpu::rope_table(t.cos.data(), t.sin.data(), s.T, s.hd, s.theta);
  return t;
}

TEST(RopeTest, TableMatchesReferenceAndDirectFormula) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const Tables t = tables(s);
    std::vector<float> c_r(s.ntab()), s_r(s.ntab());
    ref::rope_table(c_r.data(), s_r.data(), s.T, s.hd, s.theta);
    EXPECT_TRUE(test::bitwise_equal(t.cos, c_r));
    EXPECT_TRUE(test::bitwise_equal(t.sin, s_r));
    // The angle in long double, the inverse frequency as 1 / theta^(2i/hd):
    // the double table rounded to float is within a float rounding.
    const int half = s.hd / 2;
    std::vector<double> c_x(s.ntab()), s_x(s.ntab());
    for (int p = 0; p < s.T; p++)
      for (int i = 0; i < half; i++) {
        const long double angle = p / std::pow((long double)s.theta, 2.0L * i / s.hd);
        c_x[size_t(p) * half + i] = double(std::cos(angle));
        s_x[size_t(p) * half + i] = double(std::sin(angle));
      }
    EXPECT_TRUE(all_close(t.cos, c_x, 6e-8, 1e-12));
    EXPECT_TRUE(all_close(t.sin, s_x, 6e-8, 1e-12));
  }
}

// The value heads of a row: [2 NKV hd] after the query and key heads.
void expect_values_untouched(const std::vector<float>& a, const std::vector<float>& b, const Shape& s) {
  const size_t v0 = size_t(s.NH + s.NKV) * s.hd;
  for (size_t n = 0; n < size_t(s.N()); n++)
    for (size_t c = v0; c < size_t(s.row()); c++)
      ASSERT_EQ(a[n * s.row() + c], b[n * s.row() + c]) << "row " << n << " value feature " << c - v0;
}

TEST(RopeTest, FastMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const Tables t = tables(s);
    const auto x = random_vec<float>(s.nqkv(), 1, -2, 2);
    auto y = x, y_r = x;
    cpu::rope_forward(y.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    ref::rope_forward(y_r.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    EXPECT_TRUE(all_close(y, y_r, 1e-6, 1e-7));  // the same formula; only FMA contraction may differ
    expect_values_untouched(y, x, s);
    auto dx = x, dx_r = x;
    cpu::rope_backward(dx.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    ref::rope_backward(dx_r.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    EXPECT_TRUE(all_close(dx, dx_r, 1e-6, 1e-7));
    expect_values_untouched(dx, x, s);
    // Backward undoes forward (rotations are orthogonal).
    cpu::rope_backward(y.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    EXPECT_TRUE(all_close(y, x, 1e-6, 1e-6));
  }
}

// Pair i of a head as the complex number x[i] + i x[i + hd/2], multiplied by
// e^(i angle), angle = pos * theta^(-2i/hd): computed in double, with no table.
TEST(RopeTest, MatchesComplexRotation) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const Tables t = tables(s);
    const auto x = random_vec<float>(s.nqkv(), 2, -2, 2);
    auto y = x;
    cpu::rope_forward(y.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    std::vector<double> want(x.begin(), x.end());
    const int half = s.hd / 2;
    for (int n = 0; n < s.N(); n++)
      for (int h = 0; h < s.NH + s.NKV; h++)
        for (int i = 0; i < half; i++) {
          const size_t lo = size_t(n) * s.row() + size_t(h) * s.hd + i, hi = lo + half;
          const double angle = (n % s.T) * std::pow(s.theta, -2.0 * i / s.hd);
          const std::complex<double> z = std::complex<double>(x[lo], x[hi]) * std::polar(1.0, angle);
          want[lo] = z.real();
          want[hi] = z.imag();
        }
    // |x| <= 2 sqrt(2); the table's and the products' roundings: a few 1e-7.
    EXPECT_TRUE(all_close(y, want, 0, 1e-6));
  }
}

// <y, R x> = <R^T y, x>: in double for the reference (to rounding), in fp32
// for the fast kernel.
TEST(RopeTest, BackwardIsAdjointOfForward) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const auto x = random_vec<double>(s.nqkv(), 3), y = random_vec<double>(s.nqkv(), 4);
    std::vector<double> c(s.ntab()), sn(s.ntab());
    ref::rope_table(c.data(), sn.data(), s.T, s.hd, s.theta);
    auto rx = x, rty = y;
    ref::rope_forward(rx.data(), c.data(), sn.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    ref::rope_backward(rty.data(), c.data(), sn.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    const double lhs = test::weighted_sum(rx, y), rhs = test::weighted_sum(rty, x);
    EXPECT_NEAR(lhs, rhs, 1e-12 * std::sqrt(double(s.nqkv())));

    const Tables t = tables(s);
    auto rx32 = test::cast_vec<float>(x), rty32 = test::cast_vec<float>(y);
    cpu::rope_forward(rx32.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    cpu::rope_backward(rty32.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    const double lhs32 = test::weighted_sum(test::cast_vec<double>(rx32), y);
    const double rhs32 = test::weighted_sum(test::cast_vec<double>(rty32), x);
    EXPECT_NEAR(lhs32, rhs32, 1e-6 * std::sqrt(double(s.nqkv())));
    EXPECT_NEAR(lhs32, lhs, 1e-6 * std::sqrt(double(s.nqkv())));
  }
}

TEST(RopeTest, ReferenceBackwardMatchesFiniteDifferences) {
  const Shape s{2, 3, 2, 1, 4, 100.0};
  std::vector<double> c(s.ntab()), sn(s.ntab());
  ref::rope_table(c.data(), sn.data(), s.T, s.hd, s.theta);
  auto x = random_vec<double>(s.nqkv(), 5), w = random_vec<double>(s.nqkv(), 6);
  auto loss = [&] {
    auto y = x;
    ref::rope_forward(y.data(), c.data(), sn.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    return test::weighted_sum(y, w);
  };
  auto dx = w;  // dout = w, rotated back in place
  ref::rope_backward(dx.data(), c.data(), sn.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
  EXPECT_TRUE(test::check_fd(x, dx, loss));
}

// 16-bit storage: the fp32 kernel on the widened input, rounded once; the
// value heads keep their bits.
template <class A>
void check_lowp() {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const Tables t = tables(s);
    const auto x = test::round_vec<A>(random_vec<float>(s.nqkv(), 7, -3, 3));
    const auto xw = test::widen_vec(x);
    for (int backward = 0; backward < 2; backward++) {
      auto y = x;
      auto yw = xw;
      if (backward) {
        cpu::rope_backward(y.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
        cpu::rope_backward(yw.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
      } else {
        cpu::rope_forward(y.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
        cpu::rope_forward(yw.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
      }
      // yw's value heads are xw's, so this also checks they are untouched.
      EXPECT_TRUE(test::bits_of_rounded(y, yw)) << (backward ? "backward" : "forward");
    }
  }
}
TEST(RopeTest, Bf16IsFp32OnWidenedInputRounded) { check_lowp<bf16>(); }
TEST(RopeTest, F16IsFp32OnWidenedInputRounded) { check_lowp<f16>(); }

TEST(RopeTest, IsIndependentOfThreadCount) {
  const Shape& s = kShapes[1];
  const Tables t = tables(s);
  const auto x = random_vec<float>(s.nqkv(), 8);
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    test::ScopedThreads scoped(threads);
    auto y = x;
    cpu::rope_forward(y.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    cpu::rope_backward(y.data(), t.cos.data(), t.sin.data(), s.N(), s.T, s.NH, s.NKV, s.hd);
    if (first.empty()) first = y;
    EXPECT_TRUE(test::bitwise_equal(y, first)) << threads << " threads";
  }
}

}  // namespace
}  // namespace loom
