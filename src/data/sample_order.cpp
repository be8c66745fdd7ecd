#include "data/sample_order.h"

#include "core/check.h"
#include "core/rng.h"

namespace loom {

SampleOrder::SampleOrder(uint64_t windows) : n_(windows) {
  LOOM_CHECK(windows > 0, "no windows to order");
  while (half_bits_ < 32 && (uint64_t(1) << (2 * half_bits_)) < n_) half_bits_++;
}

uint64_t SampleOrder::permute(uint64_t seed, uint64_t epoch, uint64_t x) const {
  const uint64_t mask = (uint64_t(1) << half_bits_) - 1;
  const uint32_t stream = uint32_t(stable_hash("data.order"));
  uint64_t left = x >> half_bits_, right = x & mask;
  for (uint32_t round = 0; round < 4; round++) {
    auto r = Philox::block({uint32_t(right), uint32_t(right >> 32), uint32_t(epoch), round ^ stream},
                           {uint32_t(seed), uint32_t(seed >> 32) ^ uint32_t(epoch >> 32)});
    uint64_t f = (uint64_t(r[0]) | (uint64_t(r[1]) << 32)) & mask;
    uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

uint64_t SampleOrder::window(uint64_t seed, uint64_t sample) const {
  uint64_t epoch = sample / n_, x = sample % n_;
  do x = permute(seed, epoch, x);  // a bijection on [0, 4^k) walked back into [0, n)
  while (x >= n_);
  return x;
}

}  // namespace loom
