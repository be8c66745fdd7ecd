// LayerNorm: fast kernel vs reference (float, and double for accuracy),
// thread-count independence, and the reference backward vs finite differences.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/layernorm.h"
#include "kernels/ref/layernorm.h"
#include "test_util.h"

namespace loom {
namespace {

using test::all_close;
using test::cast_vec;
using test::random_vec;

struct Shape {
  int B, T, C;
};
const Shape kShapes[] = {{1, 1, 1}, {2, 3, 7}, {1, 5, 16}, {3, 7, 33}, {2, 16, 768}, {1, 3, 1000}};

TEST(LayernormTest, FastMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C);
    const size_t N = size_t(s.B) * s.T, NC = N * s.C;
    // An offset mean makes the variance computation matter.
    auto inp = random_vec<float>(NC, 1, -1.5, 2.5), w = random_vec<float>(s.C, 2, 0.5, 1.5);
    auto b = random_vec<float>(s.C, 3), dout = random_vec<float>(NC, 4);
    std::vector<float> out(NC), mean(N), rstd(N), out_r(NC), mean_r(N), rstd_r(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), s.B, s.T, s.C);
    ref::layernorm_forward(out_r.data(), mean_r.data(), rstd_r.data(), inp.data(), w.data(), b.data(), s.B, s.T, s.C);
    EXPECT_TRUE(all_close(out, out_r, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(mean, mean_r, 1e-5, 1e-6));
    EXPECT_TRUE(all_close(rstd, rstd_r, 1e-5, 0));

    // Against the double reference the fast kernel (double row sums) is tighter.
    auto inp_d = cast_vec<double>(inp), w_d = cast_vec<double>(w), b_d = cast_vec<double>(b);
    std::vector<double> out_d(NC), mean_d(N), rstd_d(N);
    ref::layernorm_forward(out_d.data(), mean_d.data(), rstd_d.data(), inp_d.data(), w_d.data(), b_d.data(), s.B, s.T,
                           s.C);
    EXPECT_TRUE(all_close(out, out_d, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(rstd, rstd_d, 1e-6, 0));

    // Grads start non-zero: all three accumulate.
    auto dinp = random_vec<float>(NC, 5), dw = random_vec<float>(s.C, 6), db = random_vec<float>(s.C, 7);
    auto dinp_r = dinp, dw_r = dw, db_r = db;
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                            rstd.data(), s.B, s.T, s.C);
    ref::layernorm_backward(dinp_r.data(), dw_r.data(), db_r.data(), dout.data(), inp.data(), w.data(), mean.data(),
                            rstd.data(), s.B, s.T, s.C);
    EXPECT_TRUE(all_close(dinp, dinp_r, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(dw, dw_r, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(db, db_r, 1e-5, 1e-5));
  }
}

TEST(LayernormTest, BackwardIsIndependentOfThreadCount) {
  const int B = 3, T = 21, C = 100;
  const size_t NC = size_t(B) * T * C;
  auto inp = random_vec<float>(NC, 11), w = random_vec<float>(C, 12), b = random_vec<float>(C, 13);
  auto dout = random_vec<float>(NC, 14);
  std::vector<float> out(NC), mean(B * T), rstd(B * T);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), B, T, C);
  std::vector<float> first[3];
  for (int threads : {1, 2, 3, 4}) {
    test::ScopedThreads scoped(threads);
    std::vector<float> dinp(NC, 0.f), dw(C, 0.f), db(C, 0.f);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                            rstd.data(), B, T, C);
    if (first[0].empty()) {
      first[0] = dinp, first[1] = dw, first[2] = db;
      continue;
    }
    EXPECT_TRUE(test::bitwise_equal(dinp, first[0])) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(dw, first[1])) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(db, first[2])) << threads << " threads";
  }
}

TEST(LayernormTest, ReferenceBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 3, C = 5;
  const size_t N = size_t(B) * T, NC = N * C;
  auto inp = random_vec<double>(NC, 21, -1, 2), w = random_vec<double>(C, 22), b = random_vec<double>(C, 23);
  auto g = random_vec<double>(NC, 24);
  std::vector<double> out(NC), mean(N), rstd(N);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), B, T, C);
    return test::weighted_sum(out, g);
  };
  loss();  // fills mean and rstd at the unperturbed point
  const auto mean0 = mean, rstd0 = rstd;
  std::vector<double> dinp(NC, 0.0), dw(C, 0.0), db(C, 0.0);
  ref::layernorm_backward(dinp.data(), dw.data(), db.data(), g.data(), inp.data(), w.data(), mean0.data(),
                          rstd0.data(), B, T, C);
  EXPECT_TRUE(test::check_fd(inp, dinp, loss));
  EXPECT_TRUE(test::check_fd(w, dw, loss));
  EXPECT_TRUE(test::check_fd(b, db, loss));
}

}  // namespace
}  // namespace loom
