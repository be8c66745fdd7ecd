// The memo for the chosen layout: why it fits, where and why it
// communicates and what that costs, what micro-batching buys over a naive
// layer split, what stays in fp32 and why, and the likely bottleneck with the
// first mitigation to try. Every number comes from the memory and time models.
#pragma once

#include <string>

#include "planner/cluster.h"
#include "planner/search.h"

namespace loom::planner {

std::string write_memo(const Workload& w, const ClusterSpec& c, const Candidate& best);

// The largest cost besides compute, named ("pipeline bubble", "tensor-parallel
// communication", ...) with the first mitigation to try.
struct Bottleneck {
  std::string what, mitigation;
  double seconds = 0;
};
Bottleneck likely_bottleneck(const Candidate& best, const ClusterSpec& c);

}  // namespace loom::planner
