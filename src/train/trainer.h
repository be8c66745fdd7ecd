// The single-process training loop: data -> forward/backward -> clip ->
// AdamW with warmup + cosine LR, validation every N steps, one log line per
// logged step.
#pragma once

#include <cstdio>
#include <vector>

#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"

namespace loom {

struct TrainResult {
  std::vector<float> train_losses;  // one per step
  std::vector<float> val_losses;    // one per evaluation
  double tokens_per_s = 0;          // over all steps after the first
  double gflops = 0;                // achieved, same window
  double peak_gflops = 0;           // measured machine peak for the thread count
};

// Runs the job described by cfg on this rank of ctx's layout; rank 0 logs
// to `log` (nullptr: silent). Data parallel: each replica takes its rows of
// the global batch and gradients are averaged over the dp group.
// Throws UserError for problems the user can fix (missing data file, ...).
TrainResult train(const RunConfig& cfg, const ParallelContext& ctx, FILE* log);

// Throws UserError if the config cannot run on this grid (batch not divisible
// by dp; tp or pp > 1, which later issues add).
void check_layout(const RunConfig& cfg, const ParallelGrid& grid);

// Applies runtime.threads (0 = all cores) and returns the thread count used.
int set_threads(int requested);

}  // namespace loom
