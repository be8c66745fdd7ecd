// Each rank's peak resident memory and busy seconds, to every rank: what the
// straggler monitor compares and metrics.jsonl records.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/grid/parallel_context.h"

namespace loom {

struct RankStats {
  std::vector<int64_t> peak_mem_bytes;
  std::vector<double> busy_s;
};

// Collective over the world, in one small all-reduce (one slot per rank;
// MiB travel as fp32, exact far beyond any machine).
RankStats gather_rank_stats(const ParallelContext& ctx, double busy_s);

// Collective: the largest peak resident set of any rank, in bytes.
double max_peak_rss_bytes(const ParallelContext& ctx);

}  // namespace loom
