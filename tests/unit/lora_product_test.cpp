// The LoRA adapter's low-rank term (model/lora/lora_product.h) against the
// formulas written out in double: y += s (x A^T) B^T on a block of a wider
// product's columns, and dx += du A, dA += du^T x, dB += s dy^T u with
// du = s dy B, u = x A^T; fp32 within 1e-5, 16-bit within its rounding;
// B = 0 leaves the product bit for bit as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "model/lora/lora_product.h"

namespace loom {
namespace {

struct Case {
  int N = 12, in = 24, out = 10, rank = 4, cols = 30, col0 = 7;  // the adapter's block: columns [7, 17) of 30
  float scale = 2.0f;                                              // alpha 8 / rank 4
};

std::vector<float> randoms(size_t n, uint64_t seed, float amp = 1.f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = amp * float(rng_uniform(seed, 1, i) - 0.5);
  return v;
}

template <class A>
std::vector<A> as(const std::vector<float>& v) {
  std::vector<A> out(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    if constexpr (std::is_same_v<A, float>) out[i] = v[i];
    else if constexpr (std::is_same_v<A, bf16>) out[i] = float_to_bf16(v[i]);
    else out[i] = float_to_f16(v[i]);
  }
  return out;
}
float f(float v) { return v; }
float f(bf16 v) { return bf16_to_float(v); }
float f(f16 v) { return f16_to_float(v); }

template <class A>
void check(double tol) {
  const Case c;
  const lora::Shape s{c.N, c.in, c.out, c.rank, c.scale};
  const std::vector<A> x = as<A>(randoms(size_t(c.N) * c.in, 1)), a = as<A>(randoms(size_t(c.rank) * c.in, 2)),
                       b = as<A>(randoms(size_t(c.out) * c.rank, 3)), dy = as<A>(randoms(size_t(c.N) * c.cols, 4));
  std::vector<float> work(lora::work_floats(s));
  CpuBackend eng;
  // u = x a^T in double, from the values the kernel sees.
  std::vector<double> u(size_t(c.N) * c.rank, 0.0);
  for (int n = 0; n < c.N; n++)
    for (int k = 0; k < c.rank; k++)
      for (int i = 0; i < c.in; i++) u[size_t(n) * c.rank + k] += double(f(x[size_t(n) * c.in + i])) * f(a[size_t(k) * c.in + i]);

  // Forward into an fp32 product of 30 columns: only the block moves.
  std::vector<float> y = randoms(size_t(c.N) * c.cols, 5), y0 = y;
  lora::forward<A, float>(eng, y.data() + c.col0, c.cols, x.data(), a.data(), b.data(), s, work.data());
  for (int n = 0; n < c.N; n++)
    for (int j = 0; j < c.cols; j++) {
      double want = y0[size_t(n) * c.cols + j];
      if (j >= c.col0 && j < c.col0 + c.out)
        for (int k = 0; k < c.rank; k++) want += c.scale * u[size_t(n) * c.rank + k] * f(b[size_t(j - c.col0) * c.rank + k]);
      ASSERT_NEAR(y[size_t(n) * c.cols + j], want, tol * (1 + std::fabs(want))) << n << "," << j;
    }

  // Backward from dy's block.
  std::vector<float> dx = randoms(size_t(c.N) * c.in, 6), da(size_t(c.rank) * c.in, 0.5f), db(size_t(c.out) * c.rank, -0.25f);
  const std::vector<float> dx0 = dx, da0 = da, db0 = db;
  lora::backward<A>(eng, dx.data(), da.data(), db.data(), dy.data() + c.col0, c.cols, x.data(), a.data(), b.data(), s,
                    work.data());
  std::vector<double> du(size_t(c.N) * c.rank, 0.0);
  for (int n = 0; n < c.N; n++)
    for (int k = 0; k < c.rank; k++)
      for (int j = 0; j < c.out; j++)
        du[size_t(n) * c.rank + k] += c.scale * double(f(dy[size_t(n) * c.cols + c.col0 + j])) * f(b[size_t(j) * c.rank + k]);
  for (int n = 0; n < c.N; n++)
    for (int i = 0; i < c.in; i++) {
      double want = dx0[size_t(n) * c.in + i];
      for (int k = 0; k < c.rank; k++) want += du[size_t(n) * c.rank + k] * f(a[size_t(k) * c.in + i]);
      ASSERT_NEAR(dx[size_t(n) * c.in + i], want, tol * (1 + std::fabs(want))) << "dx " << n << "," << i;
    }
  for (int k = 0; k < c.rank; k++)
    for (int i = 0; i < c.in; i++) {
      double want = da0[size_t(k) * c.in + i];
      for (int n = 0; n < c.N; n++) want += du[size_t(n) * c.rank + k] * f(x[size_t(n) * c.in + i]);
      ASSERT_NEAR(da[size_t(k) * c.in + i], want, tol * (1 + std::fabs(want))) << "da " << k << "," << i;
    }
  for (int j = 0; j < c.out; j++)
    for (int k = 0; k < c.rank; k++) {
      double want = db0[size_t(j) * c.rank + k];
      for (int n = 0; n < c.N; n++)
        want += c.scale * double(f(dy[size_t(n) * c.cols + c.col0 + j])) * u[size_t(n) * c.rank + k];
      ASSERT_NEAR(db[size_t(j) * c.rank + k], want, tol * (1 + std::fabs(want))) << "db " << j << "," << k;
    }
}

TEST(LoraProduct, Fp32MatchesTheFormulas) { check<float>(1e-5); }
// 16-bit: u and du are rounded once to the compute type before the products
// that read them (as PEFT's 16-bit modules round lora_A's output).
TEST(LoraProduct, Bf16WithinItsRounding) { check<bf16>(2e-2); }
TEST(LoraProduct, Fp16WithinItsRounding) { check<f16>(4e-3); }

// PEFT starts B at zero: the adapted product is the base product, bit for
// bit, into a 16-bit output too; A's gradient is then zero, B's is not.
TEST(LoraProduct, ZeroBLeavesTheProductUnchanged) {
  const lora::Shape s{8, 16, 16, 2, 8.f};
  const std::vector<bf16> x = as<bf16>(randoms(8 * 16, 7)), a = as<bf16>(randoms(2 * 16, 8));
  const std::vector<bf16> b(16 * 2, float_to_bf16(0.f));
  std::vector<bf16> y = as<bf16>(randoms(8 * 16, 9));
  const std::vector<bf16> y0 = y;
  std::vector<float> work(lora::work_floats(s));
  CpuBackend eng;
  lora::forward<bf16, bf16>(eng, y.data(), 16, x.data(), a.data(), b.data(), s, work.data());
  for (size_t i = 0; i < y.size(); i++) ASSERT_EQ(y[i].bits, y0[i].bits) << i;
  std::vector<float> da(2 * 16, 0.f), db(16 * 2, 0.f);
  lora::backward<bf16>(eng, nullptr, da.data(), db.data(), y.data(), 16, x.data(), a.data(), b.data(), s, work.data());
  for (float v : da) EXPECT_EQ(v, 0.f);
  double db_norm = 0;
  for (float v : db) db_norm += std::fabs(v);
  EXPECT_GT(db_norm, 0);
}

}  // namespace
}  // namespace loom
