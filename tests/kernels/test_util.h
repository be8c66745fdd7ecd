// Shared helpers for the kernel tests (header only): seeded random fills,
// elementwise closeness with a useful failure message, finite differences,
// 16-bit rounding and widening, and a scoped OpenMP thread count.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"

namespace loom::test {

// n values uniform in [lo, hi), from std::mt19937(seed).
template <class F>
std::vector<F> random_vec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<F> v(n);
  for (auto& x : v) x = F(dist(gen));
  return v;
}

// n integers uniform in [lo, hi].
inline std::vector<int32_t> random_ints(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

template <class To, class From>
std::vector<To> cast_vec(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// Every |a[i] - b[i]| <= atol + rtol * |b[i]|; b is the expected value.
template <class A, class B>
::testing::AssertionResult all_close(const std::vector<A>& a, const std::vector<B>& b, double rtol, double atol) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  size_t bad = 0, worst = 0;
  double worst_excess = 0;  // error / allowed, largest seen
  for (size_t i = 0; i < a.size(); i++) {
    const double x = double(a[i]), y = double(b[i]);
    const double err = std::abs(x - y), allowed = atol + rtol * std::abs(y);
    if (!(err <= allowed)) {  // also catches NaN
      const double excess = std::isnan(err) ? INFINITY : err / allowed;
      if (bad++ == 0 || excess > worst_excess) worst_excess = excess, worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ; worst at " << worst << ": "
                                       << double(a[worst]) << " vs expected " << double(b[worst])
                                       << " (rtol " << rtol << ", atol " << atol << ")";
}

// Bitwise equality of two float/double vectors (NaN-safe, -0 != +0).
template <class F>
::testing::AssertionResult bitwise_equal(const std::vector<F>& a, const std::vector<F>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < a.size(); i++)
    if (std::memcmp(&a[i], &b[i], sizeof(F)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

// Compares grad[i] with the central difference (loss(x+h) - loss(x-h)) / 2h
// for every i, perturbing x in place (restored afterwards).
template <class Loss>
::testing::AssertionResult check_fd(std::vector<double>& x, const std::vector<double>& grad, Loss loss,
                                    double rtol = 1e-6, double h = 1e-5) {
  for (size_t i = 0; i < x.size(); i++) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double fd = (up - down) / (2 * h);
    if (!(std::abs(fd - grad[i]) <= rtol * (1.0 + std::abs(fd))))
      return ::testing::AssertionFailure() << "element " << i << ": analytic " << grad[i] << " vs finite difference "
                                           << fd;
  }
  return ::testing::AssertionSuccess();
}

// sum_i out[i] * w[i]: a scalar loss whose gradient w.r.t. out is w.
inline double weighted_sum(const std::vector<double>& out, const std::vector<double>& w) {
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += out[i] * w[i];
  return s;
}

// 16-bit storage (A = bf16 or f16): x rounded to A, and A widened (exactly).
template <class A>
A round_to(float x) {
  if constexpr (std::is_same_v<A, bf16>) return float_to_bf16(x);
  else return float_to_f16(x);
}
inline float widen(bf16 x) { return bf16_to_float(x); }
inline float widen(f16 x) { return f16_to_float(x); }

template <class A>
std::vector<A> round_vec(const std::vector<float>& v) {
  std::vector<A> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = round_to<A>(v[i]);
  return r;
}
template <class A>
std::vector<float> widen_vec(const std::vector<A>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = widen(v[i]);
  return r;
}

// got[i] has the bits of want[i] rounded to A, for every i: a 16-bit kernel
// is the fp32 kernel (on the widened inputs), rounded once.
template <class A>
::testing::AssertionResult bits_of_rounded(const std::vector<A>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); i++) {
    const A r = round_to<A>(want[i]);
    if (got[i].bits != r.bits)
      return ::testing::AssertionFailure() << "element " << i << ": " << widen(got[i]) << " vs " << want[i]
                                           << " rounded, " << widen(r);
  }
  return ::testing::AssertionSuccess();
}

// Sets the OpenMP thread count for a scope.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

}  // namespace loom::test
