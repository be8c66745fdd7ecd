// The layout rules: whether a run's model, batch and schedule fit a layout
// of ranks. One function, asked by the engine before it starts (loom train,
// loom elastic), by the planner's prediction of a run and by --layout auto;
// the model's half lives in model/split_rules.h (also asked by the stage
// module) and the world's in parallel/grid (ParallelGrid::for_world).
#pragma once

#include <string>

#include "config/run_config.h"
#include "parallel/grid/parallel_grid.h"

namespace loom {

struct LayoutSizes {
  int world = 1;
  int dp = 0;  // 0: world / (tp x pp x cp)
  int tp = 1, pp = 1, cp = 1;
  int ep = 1;  // expert parallelism: divides dp x cp (and the experts)
};

// Throws UserError naming the first rule `sizes` breaks for cfg: world =
// dp x tp x pp x cp; tp divides the heads, key/value heads and MLP width; cp
// splits the sequence; ep divides dp x cp and the experts; dp x micro-batch divides the batch; sequence
// parallelism divides the micro-batch's tokens; the pipeline has blocks
// for its chunks and micro-batches for its schedule.
void check_layout(const RunConfig& cfg, const LayoutSizes& sizes);
void check_layout(const RunConfig& cfg, const ParallelGrid& grid);
// The same rule as a sentence, "" when the layout fits (for searches).
std::string layout_problem(const RunConfig& cfg, const LayoutSizes& sizes);

}  // namespace loom
