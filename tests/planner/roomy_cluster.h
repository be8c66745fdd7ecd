// A cluster for tests of the models themselves: memory that never runs out,
// round peaks and bandwidths.
#pragma once

#include "planner/cluster.h"

namespace loom::planner {

inline ClusterSpec roomy_cluster(int devices) {
  ClusterSpec c;
  c.name = "test";
  c.nodes = 1, c.devices_per_node = devices;
  c.memory_bytes = 1e15, c.peak_flops_fp32 = 1e13, c.peak_flops_bf16 = 1e14, c.memory_bandwidth = 1e12;
  c.intra_bandwidth = 1e11, c.inter_bandwidth = 1e10;
  return c;
}

}  // namespace loom::planner
