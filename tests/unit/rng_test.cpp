#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"

TEST(Rng, SliceOfATensorEqualsTheSameRangeOfTheWhole) {
  // What a tensor-parallel rank does: fill only its slice, by global index.
  std::vector<float> whole(1000), slice(300);
  loom::rng_fill_normal(whole.data(), 1000, 42, 7, 0, 0.f, 0.02f);
  loom::rng_fill_normal(slice.data(), 300, 42, 7, 500, 0.f, 0.02f);
  for (int i = 0; i < 300; i++) EXPECT_EQ(slice[i], whole[500 + i]);
}

TEST(Rng, StreamsAndSeedsDiffer) {
  EXPECT_NE(loom::rng_normal(1, 1, 0), loom::rng_normal(1, 2, 0));
  EXPECT_NE(loom::rng_normal(1, 1, 0), loom::rng_normal(2, 1, 0));
  EXPECT_NE(loom::rng_normal(1, 1, 0), loom::rng_normal(1, 1, 1));
  EXPECT_EQ(loom::rng_normal(1, 1, 5), loom::rng_normal(1, 1, 5));
}

TEST(Rng, NormalMomentsAndUniformRange) {
  const int n = 200000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; i++) {
    double x = loom::rng_normal(3, 9, uint64_t(i));
    sum += x, sq += x * x;
    double u = loom::rng_uniform(3, 9, uint64_t(i));
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
}

TEST(Rng, PhiloxKnownAnswer) {
  // Random123's published known-answer test for philox4x32-10.
  auto r = loom::Philox::block({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(r[0], 0xd16cfe09u);
  EXPECT_EQ(r[1], 0x94fdccebu);
  EXPECT_EQ(r[2], 0x5001e420u);
  EXPECT_EQ(r[3], 0x24126ea1u);
}
