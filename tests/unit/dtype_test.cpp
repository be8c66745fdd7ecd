#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"

using namespace loom;

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  // Just above the halfway point rounds up.
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)).bits, 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  // The largest float rounds to inf in bf16 (it is above bf16's max + half an ulp).
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
}

TEST(DType, Bf16RoundTripsEveryBf16Value) {
  for (uint32_t b = 0; b < 0x10000; b++) {
    float f = bf16_to_float(bf16{uint16_t(b)});
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f).bits, b) << b;
  }
}

TEST(DType, F16RoundTripsEveryF16Value) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = f16_to_float(f16{uint16_t(h)});
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(f16_to_float(float_to_f16(f))));
      continue;
    }
    ASSERT_EQ(float_to_f16(f).bits, h) << h;
  }
}

TEST(DType, F16RoundsToNearestEvenIncludingSubnormals) {
  // Between every pair of adjacent f16 values, the midpoint rounds to the even one,
  // and points just off the midpoint round to the nearer one.
  for (uint32_t h = 0; h < 0x7bff; h++) {
    double lo = f16_to_float(f16{uint16_t(h)}), hi = f16_to_float(f16{uint16_t(h + 1)});
    float mid = float((lo + hi) / 2);  // exact in float
    uint16_t even = (h & 1) ? uint16_t(h + 1) : uint16_t(h);
    ASSERT_EQ(float_to_f16(mid).bits, even) << h;
    ASSERT_EQ(float_to_f16(std::nextafter(mid, 0.f)).bits, h) << h;
    ASSERT_EQ(float_to_f16(std::nextafter(mid, 1e9f)).bits, h + 1) << h;
  }
  EXPECT_EQ(float_to_f16(65504.f).bits, 0x7bff);
  EXPECT_EQ(float_to_f16(65520.f).bits, 0x7c00);  // halfway to 2^16 rounds to inf
  EXPECT_EQ(float_to_f16(-1e-9f).bits, 0x8000);   // underflow keeps the sign
}

TEST(DType, BulkConversionsMatchScalar) {
  float in[5] = {0.1f, -3.75f, 1e-6f, 65504.f, -0.f};
  bf16 b[5];
  f16 h[5];
  float back[5];
  convert_f32_to_bf16(b, in, 5);
  convert_bf16_to_f32(back, b, 5);
  for (int i = 0; i < 5; i++) EXPECT_EQ(back[i], bf16_to_float(float_to_bf16(in[i])));
  convert_f32_to_f16(h, in, 5);
  convert_f16_to_f32(back, h, 5);
  for (int i = 0; i < 5; i++) EXPECT_EQ(back[i], f16_to_float(float_to_f16(in[i])));
}
