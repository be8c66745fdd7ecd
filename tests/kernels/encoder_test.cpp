// Token + position embedding: fast kernel vs reference (exact: both add in
// the same order), thread-count independence, and the reference backward vs
// finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/encoder.h"
#include "kernels/ref/encoder.h"
#include "test_util.h"

namespace loom {
namespace {

using test::random_ints;
using test::random_vec;

struct Shape {
  int B, T, C, V, maxT;
};
// Small V so tokens repeat (the scatter must add, not overwrite); maxT > T
// checks that rows of wpe past T are neither read nor written.
const Shape kShapes[] = {{1, 1, 1, 1, 1},    {2, 7, 13, 5, 9}, {3, 17, 48, 11, 20},
                         {4, 64, 77, 50, 64}, {2, 5, 100, 3, 8}};

TEST(EncoderTest, FastMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V);
    const size_t BT = size_t(s.B) * s.T;
    auto tokens = random_ints(BT, 1, 0, s.V - 1);
    auto wte = random_vec<float>(size_t(s.V) * s.C, 2), wpe = random_vec<float>(size_t(s.maxT) * s.C, 3);
    for (size_t i = size_t(s.T) * s.C; i < wpe.size(); i++) wpe[i] = NAN;  // must not be read
    std::vector<float> out(BT * s.C, -1.f), out_ref(BT * s.C);
    cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);
    ref::encoder_forward(out_ref.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);
    EXPECT_TRUE(test::bitwise_equal(out, out_ref));
    for (float x : out) ASSERT_FALSE(std::isnan(x));

    auto dout = random_vec<float>(BT * s.C, 4);
    auto dwte = random_vec<float>(wte.size(), 5), dwpe = random_vec<float>(wpe.size(), 6);  // += onto these
    auto dwte_ref = dwte, dwpe_ref = dwpe, dwpe_before = dwpe;
    cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C);
    ref::encoder_backward(dwte_ref.data(), dwpe_ref.data(), dout.data(), tokens.data(), s.B, s.T, s.C);
    EXPECT_TRUE(test::bitwise_equal(dwte, dwte_ref));
    EXPECT_TRUE(test::bitwise_equal(dwpe, dwpe_ref));
    for (size_t i = size_t(s.T) * s.C; i < dwpe.size(); i++) ASSERT_EQ(dwpe[i], dwpe_before[i]) << "row past T";
  }
}

TEST(EncoderTest, BackwardIsIndependentOfThreadCount) {
  const int B = 4, T = 33, C = 200, V = 7;
  auto tokens = random_ints(size_t(B) * T, 7, 0, V - 1);
  auto dout = random_vec<float>(size_t(B) * T * C, 8, -10, 10);
  std::vector<float> first_wte, first_wpe;
  for (int threads : {1, 2, 3, 5}) {
    test::ScopedThreads scoped(threads);
    std::vector<float> dwte(size_t(V) * C, 0.5f), dwpe(size_t(T) * C, 0.25f);
    cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    if (first_wte.empty()) {
      first_wte = dwte, first_wpe = dwpe;
      continue;
    }
    EXPECT_TRUE(test::bitwise_equal(dwte, first_wte)) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(dwpe, first_wpe)) << threads << " threads";
  }
}

TEST(EncoderTest, ReferenceBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 3, C = 4, V = 3, maxT = 4;
  auto tokens = random_ints(size_t(B) * T, 9, 0, V - 1);
  auto wte = random_vec<double>(size_t(V) * C, 10), wpe = random_vec<double>(size_t(maxT) * C, 11);
  auto w = random_vec<double>(size_t(B) * T * C, 12);
  auto loss = [&] {
    std::vector<double> out(w.size());
    ref::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return test::weighted_sum(out, w);
  };
  std::vector<double> dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  ref::encoder_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
  EXPECT_TRUE(test::check_fd(wte, dwte, loss));
  EXPECT_TRUE(test::check_fd(wpe, dwpe, loss));
}

}  // namespace
}  // namespace loom
