#include "parallel/zero/sharded_optimizer.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cast.h"

namespace loom {

namespace {

std::vector<FlatRange> owned_ranges(const FlatLayout& layout, const BucketPlan& plan, int rank, bool sharded) {
  if (!sharded) return {{0, layout.total}};
  return plan.shard_ranges(rank);
}

// The sum over ranks of one double per rank, exact and the same on every
// rank: the doubles travel bit for bit (as four 16-bit words: all_gather
// moves 16-bit data untouched) and are added in rank order.
double sum_over_ranks(Communicator& comm, double local) {
  std::vector<uint16_t> all(size_t(comm.size()) * 4);
  std::memcpy(all.data() + size_t(comm.rank()) * 4, &local, sizeof local);
  comm.all_gather(all.data() + size_t(comm.rank()) * 4, all.data(), 4, DType::bf16);
  double sum = 0;
  for (int r = 0; r < comm.size(); r++) {
    double x;
    std::memcpy(&x, all.data() + size_t(r) * 4, sizeof x);
    sum += x;
  }
  return sum;
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(const FlatLayout& layout, const BucketPlan& plan, Communicator& dp, bool sharded,
                                   const AdamWConfig& cfg, Communicator* model_parallel)
    : plan_(plan),
      dp_(dp),
      model_parallel_(model_parallel && model_parallel->size() > 1 ? model_parallel : nullptr),
      sharded_(sharded),
      owned_(owned_ranges(layout, plan, dp.rank(), sharded)),
      adamw_(layout, owned_, cfg) {
  LOOM_CHECK(!sharded || plan.shards() == dp.size(), "ZeRO plan of %d shards for %d ranks", plan.shards(),
             dp.size());
}

double ShardedOptimizer::grad_norm(const float* reduced) {
  double sum = adamw_.grad_sum_of_squares(reduced);
  if (sharded_ && dp_.size() > 1) sum = sum_over_ranks(dp_, sum);
  if (model_parallel_) sum = sum_over_ranks(*model_parallel_, sum);
  return std::sqrt(sum);
}

void ShardedOptimizer::step(float* params, const float* reduced, float lr, float grad_scale, const WeightCopy& copy) {
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
      cpu::cast_f32_to_bf16(static_cast<bf16*>(copy.data) + begin, params + begin, size_t(end - begin));
    else
      cpu::cast_f32_to_f16(static_cast<f16*>(copy.data) + begin, params + begin, size_t(end - begin));
  };
  for (const FlatRange& r : owned_) round_range(at, r.begin), at = r.end;
  round_range(at, plan_.padded_total());
}

}  // namespace loom
