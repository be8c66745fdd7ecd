// The order in which training windows are read, as a pure function.
//
// Sample i (= step * batch_size + row) falls in epoch i / n and takes
// window perm_epoch(i % n), where perm_epoch is a pseudo-random permutation
// of [0, n) keyed by (seed, epoch): every window once per epoch, a fresh
// order each epoch, and no state, so any rank can compute any sample and a
// resumed run continues exactly. The permutation is a Feistel network on
// the next power of four >= n, walked until it lands below n.
#pragma once

#include <cstdint>

namespace loom {

class SampleOrder {
 public:
  explicit SampleOrder(uint64_t windows);
  uint64_t window(uint64_t seed, uint64_t sample) const;
  uint64_t windows() const { return n_; }

 private:
  uint64_t permute(uint64_t seed, uint64_t epoch, uint64_t x) const;
  uint64_t n_;
  int half_bits_ = 1;
};

}  // namespace loom
