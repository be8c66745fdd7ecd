// The single-process training loop: data -> forward/backward -> clip ->
// AdamW with warmup + cosine LR, validation every N steps, one log line per
// logged step.
#pragma once

#include <cstdio>
#include <vector>

#include "config/run_config.h"

namespace loom {

struct TrainResult {
  std::vector<float> train_losses;  // one per step
  std::vector<float> val_losses;    // one per evaluation
  double tokens_per_s = 0;          // over all steps after the first
  double gflops = 0;                // achieved, same window
  double peak_gflops = 0;           // measured machine peak for the thread count
};

// Runs the job described by cfg, logging to `log` (nullptr: silent).
// Throws UserError for problems the user can fix (missing data file, ...).
TrainResult train(const RunConfig& cfg, FILE* log);

// Applies runtime.threads (0 = all cores) and returns the thread count used.
int set_threads(int requested);

}  // namespace loom
