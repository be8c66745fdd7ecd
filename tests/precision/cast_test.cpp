// The vectorized casts against core/dtype.h's scalar conversions, bit for
// bit: every 16-bit pattern, every rounding boundary of the 16-bit formats
// (each value, the midpoint to its neighbour, and one fp32 ulp either side),
// random fp32 bit patterns (NaN payloads included), large arrays split over
// threads, odd lengths (vector tails), and with MXCSR's DAZ/FTZ set.
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cast.h"
#include "kernels/test_util.h"

namespace {

using namespace loom;

std::vector<uint16_t> every_pattern() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; i++) v[i] = uint16_t(i);
  return v;
}

// Floats on and around every rounding decision of a 16-bit format whose
// values are to_float(pattern): each finite value, the exact midpoint to the
// next one (a tie), and the floats just below and above that midpoint.
template <class ToFloat>
std::vector<float> rounding_boundaries(ToFloat to_float) {
  std::vector<float> v;
  for (uint32_t h = 0; h < 65536; h++) {
    const float x = to_float(uint16_t(h));
    if (!std::isfinite(x)) continue;
    v.push_back(x);
    const float next = to_float(uint16_t(h + 1));  // one step away from zero
    if ((h & 0x7fffu) == 0x7fffu || !std::isfinite(next)) continue;
    const float mid = float((double(x) + double(next)) / 2);  // exact: one more bit
    v.push_back(mid);
    v.push_back(std::nextafter(mid, 0.0f));
    v.push_back(std::nextafter(mid, 2.0f * mid));
  }
  // Past the largest finite value: overflow to inf, fp32 limits, specials.
  for (float x : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 3.4028235e38f, INFINITY, NAN, 1e-45f, 1.17549421e-38f,
                  1.17549435e-38f})
    v.push_back(x), v.push_back(-x);
  return v;
}

std::vector<float> random_bit_patterns(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = bits_float(gen());
  return v;
}

// gtest's AssertionResult drops stream manipulators between <<, so format here.
std::string hex(uint32_t bits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", bits);
  return buf;
}

::testing::AssertionResult same_bits(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                                     const std::vector<float>& in) {
  for (size_t i = 0; i < got.size(); i++)
    if (got[i] != want[i])
      return ::testing::AssertionFailure() << "input " << in[i] << " (bits " << hex(float_bits(in[i])) << "): got "
                                           << hex(got[i]) << ", dtype.h gives " << hex(want[i]);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want,
                                     const std::vector<uint16_t>& in) {
  for (size_t i = 0; i < got.size(); i++)
    if (float_bits(got[i]) != float_bits(want[i]))
      return ::testing::AssertionFailure() << "pattern " << hex(in[i]) << ": got " << hex(float_bits(got[i]))
                                           << ", dtype.h gives " << hex(float_bits(want[i]));
  return ::testing::AssertionSuccess();
}

// Each check runs the four casts on its inputs and compares with the scalars.
::testing::AssertionResult narrow_matches_scalar(const std::vector<float>& in) {
  std::vector<uint16_t> got_b(in.size()), got_h(in.size()), want_b(in.size()), want_h(in.size());
  cpu::cast_f32_to_bf16(reinterpret_cast<bf16*>(got_b.data()), in.data(), in.size());
  cpu::cast_f32_to_f16(reinterpret_cast<f16*>(got_h.data()), in.data(), in.size());
  for (size_t i = 0; i < in.size(); i++) want_b[i] = float_to_bf16(in[i]).bits, want_h[i] = float_to_f16(in[i]).bits;
  auto r = same_bits(got_b, want_b, in);
  if (!r) return r << " (f32 -> bf16)";
  r = same_bits(got_h, want_h, in);
  if (!r) return r << " (f32 -> f16)";
  return r;
}

::testing::AssertionResult widen_matches_scalar(const std::vector<uint16_t>& in) {
  std::vector<float> got_b(in.size()), got_h(in.size()), want_b(in.size()), want_h(in.size());
  cpu::cast_bf16_to_f32(got_b.data(), reinterpret_cast<const bf16*>(in.data()), in.size());
  cpu::cast_f16_to_f32(got_h.data(), reinterpret_cast<const f16*>(in.data()), in.size());
  for (size_t i = 0; i < in.size(); i++)
    want_b[i] = bf16_to_float(bf16{in[i]}), want_h[i] = f16_to_float(f16{in[i]});
  auto r = same_bits(got_b, want_b, in);
  if (!r) return r << " (bf16 -> f32)";
  r = same_bits(got_h, want_h, in);
  if (!r) return r << " (f16 -> f32)";
  return r;
}

std::vector<float> all_boundaries() {
  auto v = rounding_boundaries([](uint16_t h) { return f16_to_float(f16{h}); });
  auto b = rounding_boundaries([](uint16_t h) { return bf16_to_float(bf16{h}); });
  v.insert(v.end(), b.begin(), b.end());
  return v;
}

// Sets DAZ and FTZ on this thread for a scope (oneDNN or a trainer may).
class ScopedDenormalsAreZero {
 public:
  ScopedDenormalsAreZero() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~ScopedDenormalsAreZero() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
};

TEST(Cast, WideningMatchesScalarOnEvery16BitPattern) { EXPECT_TRUE(widen_matches_scalar(every_pattern())); }

TEST(Cast, NarrowingMatchesScalarOnEveryRoundingBoundary) { EXPECT_TRUE(narrow_matches_scalar(all_boundaries())); }

TEST(Cast, NarrowingMatchesScalarOnRandomBitPatterns) {
  EXPECT_TRUE(narrow_matches_scalar(random_bit_patterns(1 << 20, 7)));
}

TEST(Cast, RoundTripOfEvery16BitValueIsExact) {
  // Widen then narrow gives back each pattern (NaNs: dtype.h's quiet form).
  auto in = every_pattern();
  std::vector<float> wide(in.size());
  std::vector<uint16_t> back(in.size());
  cpu::cast_f16_to_f32(wide.data(), reinterpret_cast<const f16*>(in.data()), in.size());
  cpu::cast_f32_to_f16(reinterpret_cast<f16*>(back.data()), wide.data(), in.size());
  for (uint32_t h = 0; h < 65536; h++)
    if ((h & 0x7fffu) <= 0x7c00u) {
      ASSERT_EQ(back[h], h) << "f16 pattern " << h;
    }
  cpu::cast_bf16_to_f32(wide.data(), reinterpret_cast<const bf16*>(in.data()), in.size());
  cpu::cast_f32_to_bf16(reinterpret_cast<bf16*>(back.data()), wide.data(), in.size());
  for (uint32_t h = 0; h < 65536; h++)
    if ((h & 0x7fffu) <= 0x7f80u) {
      ASSERT_EQ(back[h], h) << "bf16 pattern " << h;
    }
}

TEST(Cast, MatchesScalarWithDenormalsAreZeroSet) {
  ScopedDenormalsAreZero daz;
  loom::test::ScopedThreads one(1);  // MXCSR is per thread: keep the work on this one
  EXPECT_TRUE(widen_matches_scalar(every_pattern()));
  EXPECT_TRUE(narrow_matches_scalar(all_boundaries()));
}

TEST(Cast, LargeArraysSplitOverThreadsMatchScalar) {
  loom::test::ScopedThreads two(2);
  // Odd length: every thread's range and the vector tail are exercised.
  auto in = random_bit_patterns((1 << 20) + 13, 11);
  EXPECT_TRUE(narrow_matches_scalar(in));
  std::vector<uint16_t> patterns(in.size());
  for (size_t i = 0; i < in.size(); i++) patterns[i] = uint16_t(float_bits(in[i]));
  EXPECT_TRUE(widen_matches_scalar(patterns));
}

TEST(Cast, EveryShortLengthMatchesScalar) {
  auto in = random_bit_patterns(40, 3);
  for (size_t n = 0; n <= in.size(); n++) {
    std::vector<float> part(in.begin(), in.begin() + n);
    ASSERT_TRUE(narrow_matches_scalar(part)) << "n = " << n;
  }
}

}  // namespace
