#include "parallel/dp/bucket_plan.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace loom {

BucketPlan::BucketPlan(const FlatLayout& layout, double bucket_bytes, int shards, const std::vector<int64_t>& breaks)
    : shards_(shards) {
  LOOM_CHECK(shards >= 1 && bucket_bytes > 0, "bucket plan: %d shards, %.0f bytes", shards, bucket_bytes);
  const int64_t unit = kAlignFloats * shards;
  const int64_t size = std::max<int64_t>(1, std::llround(bucket_bytes / sizeof(float) / double(unit))) * unit;
  padded_total_ = std::max<int64_t>(1, (layout.total + unit - 1) / unit) * unit;
  std::vector<int64_t> cuts;
  for (int64_t x : breaks) cuts.push_back(x / unit * unit), cuts.push_back((x + unit - 1) / unit * unit);
  std::sort(cuts.begin(), cuts.end());
  size_t t = 0, next_cut = 0;
  for (int64_t begin = 0, end; begin < padded_total_; begin = end) {
    while (next_cut < cuts.size() && cuts[next_cut] <= begin) next_cut++;
    end = std::min(begin + size, padded_total_);
    if (next_cut < cuts.size()) end = std::min(end, cuts[next_cut]);
    Bucket b;
    b.range = {begin, end};
    while (t < layout.tensors.size() && layout.tensors[t].offset + layout.tensors[t].numel <= begin) t++;
    b.first_tensor = b.end_tensor = int(t);
    while (size_t(b.end_tensor) < layout.tensors.size() && layout.tensors[b.end_tensor].offset < b.range.end)
      b.end_tensor++;
    buckets_.push_back(b);
  }
}

std::vector<FlatRange> BucketPlan::shard_ranges(int rank) const {
  LOOM_CHECK(rank >= 0 && rank < shards_, "shard %d of %d", rank, shards_);
  std::vector<FlatRange> out;
  for (size_t b = 0; b < buckets_.size(); b++) {
    int64_t n = shard_size(int(b)), begin = buckets_[b].range.begin + rank * n;
    out.push_back({begin, begin + n});
  }
  return out;
}

}  // namespace loom
