// The search: every layout of the devices (dp, tp, pp, chunks v, micro-batch
// size and count, ZeRO stage, recomputation, sequence parallelism,
// precision) that fits in memory, ranked by predicted step time.
//
// Memory is cheap and checked for every layout; the time model simulates the
// pipeline schedule, so layouts are timed in the order of a lower bound on
// their step time and the search stops once that bound is slower than the
// k-th best found (branch and bound: the top k are exact).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/cluster.h"
#include "planner/layout.h"
#include "planner/memory_model.h"
#include "planner/time_model.h"

namespace loom::planner {

// Constraints: an empty list leaves that dimension free.
struct SearchSpace {
  std::vector<int> dp, tp, pp, v, micro_batch, zero;
  std::vector<int> cp;  // context parallelism; default: every cp with seq_len % 2 cp == 0
  std::vector<int> ep;  // expert parallelism; default: every ep dividing dp x cp and the experts (1 without)
  std::vector<ComputePrecision> precision;  // default: bf16 (else fp16) and fp32
  std::vector<Recompute> recompute;
  std::vector<int> seq_parallel;     // 0 and/or 1
  std::vector<int> zero_bubble;      // 0 (1F1B, interleaved) and/or 1 (ZB-H1 at v 1, ZB-V at v 2), where they run
  int max_v = 8;
  int max_micro_batch = 64;
  int max_zero = 3;
  // Time the layouts that do not fit too (each marked: Candidate::fits), to
  // see what a layout would cost on larger devices (loom plan --ignore-memory).
  bool ignore_memory = false;
  // Layers per virtual stage (loom plan --pp-layers): only layouts with
  // pp x v of them, split so; empty: balanced, layers dividing pp x v.
  std::vector<int> pp_layers;
  bool fp32_grads = false;  // Layout::fp32_grads for every layout (loom plan --grads fp32)
};

struct Candidate {
  Layout layout;
  MemoryBreakdown memory;
  StepTime time;
  bool fits = true;  // in the devices' memory (false only with SearchSpace::ignore_memory)
};

struct SearchResult {
  std::vector<Candidate> top;  // fastest first, at most top_k
  int64_t considered = 0;      // layouts whose memory was modelled
  int64_t fitting = 0;         // (with ignore_memory, the others are timed too)
  int64_t timed = 0;           // layouts whose step was simulated
  // When nothing fits: the layout that misses by the least memory.
  bool have_closest = false;
  Candidate closest;
};

SearchResult search_layouts(const Workload& w, const ClusterSpec& c, const SearchSpace& space, int top_k);

// When nothing fits: the fewest devices of c's kind, more than `more_than`
// (any count up to one of c's nodes, whole nodes beyond), on which a layout
// in `space` fits, counting up from what the model states alone need (16 B
// per parameter over every device) to at most max_devices (and at most 16
// searches); 0 if none does. *found gets that search.
int smallest_fitting_devices(const Workload& w, const ClusterSpec& c, const SearchSpace& space, int top_k,
                             int more_than, int max_devices, SearchResult* found);

}  // namespace loom::planner
