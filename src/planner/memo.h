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

// "llama family: 80 layers, d_model 8192, 64 heads (8 key/value), MLP 28672, vocab 32000, untied head"
std::string model_summary(const ModelConfig& m);

// When no layout fits: what the model states alone need against what the
// devices hold, the fewest such devices that could hold them, and the
// closest layout's breakdown.
std::string write_no_fit_memo(const Workload& w, const ClusterSpec& c, const SearchResult& r);

// The largest cost besides compute, named ("pipeline bubble", "tensor-parallel
// communication", ...) with the first mitigation to try.
struct Bottleneck {
  std::string what, mitigation;
  double seconds = 0;
};
Bottleneck likely_bottleneck(const Candidate& best, const ClusterSpec& c);

}  // namespace loom::planner
