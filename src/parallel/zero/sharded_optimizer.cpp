#include "parallel/zero/sharded_optimizer.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/rank_sum.h"
#include "core/check.h"
#include "kernels/backend.h"

namespace loom {

namespace {

std::vector<FlatRange> owned_ranges(const FlatLayout& layout, const BucketPlan& plan, int rank, bool sharded) {
  if (!sharded) return {{0, layout.total}};
  return plan.shard_ranges(rank);
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(Backend& ops, const FlatLayout& layout, const BucketPlan& plan, Communicator& dp, bool sharded,
                                   const AdamWConfig& cfg, Communicator* model_parallel, bool sharded_masters,
                                   bool publish)
    : ops_(ops),
      plan_(plan),
      dp_(dp),
      model_parallel_(model_parallel && model_parallel->size() > 1 ? model_parallel : nullptr),
      sharded_(sharded),
      sharded_masters_(sharded_masters),
      publish_(publish),
      owned_(owned_ranges(layout, plan, dp.rank(), sharded)),
      adamw_(ops, layout, owned_, cfg) {
  LOOM_CHECK(!sharded || plan.shards() == dp.size(), "ZeRO plan of %d shards for %d ranks", plan.shards(),
             dp.size());
  LOOM_CHECK(sharded || !sharded_masters, "sharded master weights need a sharded optimizer");
  if (!sharded_masters) return;
  master_.reserve(size_t(plan.shard_total()) * sizeof(float));
  master_.allocate(ops_.memory());
  for (const auto& b : plan.buckets()) {
    std::vector<FlatRange> keep;
    for (const FlatPiece& p : pieces_of(layout, {b.range}))
      if (!layout.tensors[size_t(p.tensor)].products_only) keep.push_back({p.offset, p.offset + p.numel});
    fp32_read_.push_back(std::move(keep));
  }
}

void ShardedOptimizer::publish(float* params, const WeightCopy& copy) {
  // Two staging buffers: bucket b+1 travels while bucket b is written out.
  const auto& buckets = plan_.buckets();
  int64_t largest = 0;
  for (const auto& b : buckets) largest = std::max(largest, b.range.size());
  std::vector<float> stage[2] = {std::vector<float>(size_t(largest)), std::vector<float>(size_t(largest))};
  auto start = [&](size_t b) {
    return dp_.all_gather_async(master_.at<float>(0) + plan_.shard_offset(int(b)), stage[b % 2].data(),
                                size_t(plan_.shard_size(int(b))), DType::f32);
  };
  std::unique_ptr<Work> next = buckets.empty() ? nullptr : start(0);
  for (size_t b = 0; b < buckets.size(); b++) {
    next->wait();
    next = b + 1 < buckets.size() ? start(b + 1) : nullptr;
    const float* values = stage[b % 2].data();
    const FlatRange r = buckets[b].range;
    if (copy.dtype == DType::bf16)
      ops_.narrow(static_cast<bf16*>(copy.data) + r.begin, values, size_t(r.size()));
    else
      ops_.narrow(static_cast<f16*>(copy.data) + r.begin, values, size_t(r.size()));
    for (const FlatRange& k : fp32_read_[b])
      std::copy(values + (k.begin - r.begin), values + (k.end - r.begin), params + k.begin);
  }
}

void ShardedOptimizer::gather_masters(float* full) {
  const auto& buckets = plan_.buckets();
  std::vector<std::unique_ptr<Work>> gathers;
  for (size_t b = 0; b < buckets.size(); b++)
    gathers.push_back(dp_.all_gather_async(master_.at<float>(0) + plan_.shard_offset(int(b)),
                                           full + buckets[b].range.begin, size_t(plan_.shard_size(int(b))),
                                           DType::f32));
  for (auto& g : gathers) g->wait();
}

double ShardedOptimizer::grad_sum_of_squares(const float* reduced) {
  double sum = adamw_.grad_sum_of_squares(reduced);
  if (sharded_ && dp_.size() > 1) sum = sum_over_ranks(dp_, sum);
  return sum;
}

double ShardedOptimizer::over_model_ranks(double sum_of_squares) {
  return model_parallel_ ? sum_over_ranks(*model_parallel_, sum_of_squares) : sum_of_squares;
}

void ShardedOptimizer::step(float* params, const float* reduced, float lr, float grad_scale, const WeightCopy& copy) {
  if (sharded_masters_) {
    adamw_.step(master_.at<float>(0), reduced, lr, grad_scale, {}, true);
    if (publish_ && copy.data) publish(params, copy);
    return;
  }
  adamw_.step(params, reduced, lr, grad_scale, copy);
  if (!sharded_ || dp_.size() == 1) return;
  const auto& buckets = plan_.buckets();
  std::vector<std::unique_ptr<Work>> gathers;
  gathers.reserve(buckets.size());
  for (size_t b = 0; b < buckets.size(); b++) {
    const int64_t n = plan_.shard_size(int(b));
    float* bucket = params + buckets[b].range.begin;
    gathers.push_back(dp_.all_gather_async(bucket + dp_.rank() * n, bucket, size_t(n), DType::f32));
  }
  for (auto& g : gathers) g->wait();
  if (!copy.data) return;
  // The elements other ranks updated: rounded here, between the owned ranges.
  int64_t at = 0;
  auto round_range = [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    if (copy.dtype == DType::bf16)
      ops_.narrow(static_cast<bf16*>(copy.data) + begin, params + begin, size_t(end - begin));
    else
      ops_.narrow(static_cast<f16*>(copy.data) + begin, params + begin, size_t(end - begin));
  };
  for (const FlatRange& r : owned_) round_range(at, r.begin), at = r.end;
  round_range(at, plan_.padded_total());
}

}  // namespace loom
