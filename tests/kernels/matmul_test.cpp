#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/ref/matmul.h"

namespace {

std::vector<float> random_vec(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Relative Frobenius error of a against a reference b.
double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); i++) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / (norm + 1e-30));
}

struct Shape {
  int N, C, OC;
};

class MatmulTest : public ::testing::TestWithParam<Shape> {};

TEST_P(MatmulTest, ForwardAndBackwardMatchReference) {
  auto [N, C, OC] = GetParam();
  // fp32 rounding grows with the length of each sum (C terms forward, OC for
  // dinp, N for dweight and dbias): 1e-6 up to 512 terms.
  auto bound = [](int terms) { return 1e-6 * std::max(1.0, std::sqrt(terms / 512.0)); };
  auto inp = random_vec(size_t(N) * C, 1), weight = random_vec(size_t(OC) * C, 2), bias = random_vec(OC, 3);
  auto dout = random_vec(size_t(N) * OC, 4);
  std::vector<float> out(size_t(N) * OC), out_ref(out.size());
  loom::cpu::MatmulEngine eng;
  loom::cpu::matmul_forward(eng, out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  loom::ref::matmul_forward(out_ref.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  EXPECT_LT(max_rel_err(out, out_ref), bound(C));

  // Start the accumulated grads from non-zero values to check +=.
  auto dw = random_vec(size_t(OC) * C, 5), db = random_vec(OC, 6);
  auto dw_ref = dw, db_ref = db;
  std::vector<float> dinp(size_t(N) * C, 7.f), dinp_ref(dinp.size());
  loom::cpu::matmul_backward(eng, dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), weight.data(), N, C,
                             OC);
  loom::ref::matmul_backward(dinp_ref.data(), dw_ref.data(), db_ref.data(), dout.data(), inp.data(), weight.data(),
                             N, C, OC);
  EXPECT_LT(max_rel_err(dinp, dinp_ref), bound(OC));
  EXPECT_LT(max_rel_err(dw, dw_ref), bound(N));
  EXPECT_LT(max_rel_err(db, db_ref), bound(N));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTest,
                         ::testing::Values(Shape{1, 1, 1}, Shape{7, 13, 5}, Shape{64, 32, 96}, Shape{37, 129, 67},
                                           Shape{128, 64, 256},
                                           // Wide inputs: the backward's products run in column blocks.
                                           Shape{33, 3072, 40}, Shape{16, 2000, 24}));

// A wide untransposed B is multiplied in column blocks (kernels/cpu/matmul.cpp):
// with bias and accumulation, every block's columns land where they belong.
TEST(Matmul, WideProductsInColumnBlocksMatchTheReference) {
  const int M = 9, K = 21;
  for (int N : {1535, 1536, 1537, 2048, 3100}) {
    auto a = random_vec(size_t(M) * K, 11), b = random_vec(size_t(K) * N, 12), bias = random_vec(N, 13);
    auto c = random_vec(size_t(M) * N, 14);
    std::vector<float> want = c;
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double s = bias[j];
        for (int k = 0; k < K; k++) s += double(a[size_t(i) * K + k]) * b[size_t(k) * N + j];
        want[size_t(i) * N + j] += float(s);
      }
    loom::cpu::MatmulEngine eng;
    eng.gemm(c.data(), a.data(), b.data(), bias.data(), M, N, K, false, false, /*accumulate=*/true);
    EXPECT_LT(max_rel_err(c, want), 1e-6) << "N " << N;
  }
}

TEST(Matmul, ReferenceBackwardMatchesFiniteDifferences) {
  const int N = 3, C = 4, OC = 5;
  std::mt19937 gen(9);
  std::normal_distribution<double> dist;
  std::vector<double> inp(N * C), w(OC * C), b(OC), g(N * OC);
  for (auto* v : {&inp, &w, &b, &g})
    for (auto& x : *v) x = dist(gen);
  auto loss = [&]() {
    std::vector<double> out(N * OC);
    loom::ref::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    double s = 0;
    for (int i = 0; i < N * OC; i++) s += out[i] * g[i];
    return s;
  };
  std::vector<double> dinp(N * C), dw(OC * C, 0.0), db(OC, 0.0);
  loom::ref::matmul_backward(dinp.data(), dw.data(), db.data(), g.data(), inp.data(), w.data(), N, C, OC);
  auto check = [&](std::vector<double>& x, const std::vector<double>& grad) {
    for (size_t i = 0; i < x.size(); i++) {
      double keep = x[i], h = 1e-6;
      x[i] = keep + h;
      double up = loss();
      x[i] = keep - h;
      double down = loss();
      x[i] = keep;
      EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-7 * (1 + std::abs(grad[i])));
    }
  };
  check(inp, dinp);
  check(w, dw);
  check(b, db);
}

}  // namespace
