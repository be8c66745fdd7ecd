// The lines rank 0 prints before the first step: the layout, the model, the
// data, each parallelism in use, memory per rank, precision and the machine.
#pragma once

#include <cstdio>
#include <string>

#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"
#include "train/replica.h"
#include "train/run_shape.h"

namespace loom {

struct BannerFacts {
  std::string data;      // TokenSource::describe()
  std::string dispatch;  // the kernels' dispatch line (cpu::Dispatch::line)
  double peak_gflops = 0;
};

void print_run_banner(const RunConfig& cfg, const ParallelContext& ctx, const Replica& replica, const RunShape& shape,
                      const BannerFacts& facts, FILE* log);

}  // namespace loom
