// How the flat gradient buffer is cut into buckets, and each bucket into
// equal shards, one per data-parallel rank.
//
// Buckets are consecutive ranges of the buffer in buffer order, which is the
// order backward finishes gradients in, so the first bucket is complete
// first. Cuts fall at fixed sizes and may fall inside a tensor (tensor
// offsets stay those of the model's layout); a bucket is complete when every
// tensor overlapping it is. Every bucket size is a multiple of
// shards x kAlignFloats: shards come out equal and 64-byte aligned. The
// buffer is padded at its end to a whole number of those units.
#pragma once

#include <cstdint>
#include <vector>

#include "core/flat_layout.h"

namespace loom {

class BucketPlan {
 public:
  static constexpr int64_t kAlignFloats = 16;  // 64 bytes

  struct Bucket {
    FlatRange range;                 // in the padded buffer
    int first_tensor = 0, end_tensor = 0;  // the tensors [first, end) overlapping it
  };

  // bucket_bytes: the wanted size, rounded to a whole number of units (at least one).
  // breaks: offsets where a new bucket must begin (ZeRO-3's gathered
  // segments); each becomes a cut at the unit below and the unit above it,
  // so only a one-unit bucket straddles two segments.
  BucketPlan(const FlatLayout& layout, double bucket_bytes, int shards, const std::vector<int64_t>& breaks = {});

  const std::vector<Bucket>& buckets() const { return buckets_; }
  int shards() const { return shards_; }
  int64_t padded_total() const { return padded_total_; }
  int64_t shard_size(int bucket) const { return buckets_[bucket].range.size() / shards_; }
  // Floats each rank owns: padded_total / shards.
  int64_t shard_total() const { return padded_total_ / shards_; }
  // Shard `rank` of every bucket, in bucket order: the elements a ZeRO rank owns.
  std::vector<FlatRange> shard_ranges(int rank) const;
  // Where bucket b's shard starts within a rank's packed shard buffer.
  int64_t shard_offset(int bucket) const { return buckets_[bucket].range.begin / shards_; }

 private:
  std::vector<Bucket> buckets_;
  int shards_;
  int64_t padded_total_ = 0;
};

}  // namespace loom
