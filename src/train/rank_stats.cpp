#include "train/rank_stats.h"

#include <sys/resource.h>

namespace loom {

namespace {
float peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return float(double(usage.ru_maxrss) / 1024.0);
}
}  // namespace

RankStats gather_rank_stats(const ParallelContext& ctx, double busy_s) {
  const size_t world = size_t(ctx.grid().world_size()), me = size_t(ctx.rank());
  std::vector<float> slots(2 * world, 0.f);
  slots[me] = peak_rss_mib();
  slots[world + me] = float(busy_s);
  ctx.world().all_reduce(slots.data(), slots.size(), DType::f32, ReduceOp::Sum);
  RankStats stats;
  for (size_t r = 0; r < world; r++) {
    stats.peak_mem_bytes.push_back(int64_t(double(slots[r]) * (1 << 20)));
    stats.busy_s.push_back(double(slots[world + r]));
  }
  return stats;
}

double max_peak_rss_bytes(const ParallelContext& ctx) {
  float peak_mib = peak_rss_mib();
  ctx.world().all_reduce(&peak_mib, 1, DType::f32, ReduceOp::Max);
  return double(peak_mib) * (1 << 20);
}

}  // namespace loom
