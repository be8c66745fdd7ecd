// The layout a restarted job runs on the ranks that are left: the user's
// (tp and pp kept, fewer replicas) when it still divides the global batch
// and fits memory, else the planner's fastest for that world; if no layout
// of the survivors works, one rank fewer, down to the minimum. The global
// batch never changes: fewer replicas take more micro-batches each, so the
// loss curve goes on as if nothing had happened.
#pragma once

#include <string>
#include <vector>

#include "config/run_config.h"
#include "planner/cluster.h"
#include "planner/layout.h"

namespace loom::elastic {

struct Relayout {
  int world = 0;
  planner::Layout layout;
  bool users = false;                  // the user's tp x pp kept (else the planner's choice)
  std::vector<std::string> overrides;  // --set key=value for loom train
  // "2 ranks: dp 2 tp 1 pp 1 v 1, micro-batch 4 x 1, zero 0, fp32, recompute none (the planner's choice)"
  std::string describe() const;
};

// "4 ranks: dp 4 tp 1 pp 1 v 1, micro-batch 2 x 1, zero 0, fp32, recompute none"
std::string describe_layout(int world, const planner::Layout& l);
// The --set options that make loom train run layout l of cfg.
std::vector<std::string> layout_overrides(const RunConfig& cfg, const planner::Layout& l);

// cfg: the user's config (its parallel.dp is ignored). planner_only (the run
// was started with --layout auto): skip the user's shape. Throws UserError
// with every world size's reason when no world in [min_world, survivors] works.
Relayout relayout(const RunConfig& cfg, int survivors, int min_world, const planner::ClusterSpec& cluster,
                  bool planner_only = false);

}  // namespace loom::elastic
