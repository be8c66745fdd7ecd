// The training loop: data -> forward/backward -> clip -> AdamW with warmup
// + cosine LR, validation every N steps, one log line per logged step.
// train() composes the parts: set-up (the replica, its parameters, the
// banner and the planner's prediction), the step loop (train/step_loop.h)
// and the end (train/run_summary.h).
#pragma once

#include <cstdio>

#include "config/layout_rules.h"
#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"
#include "train/train_options.h"
#include "train/train_result.h"

namespace loom {

// Runs the job described by cfg on this rank of ctx's layout; rank 0 logs
// to `log` (nullptr: silent). Data parallel: each replica takes its rows of
// the global batch, in micro-batches whose gradients accumulate; gradients
// are averaged over the dp group bucket by bucket while backward runs, and
// with parallel.zero >= 1 the optimizer state (and gradients) are sharded.
// Throws UserError for problems the user can fix (missing data file, ...).
TrainResult train(const RunConfig& cfg, const ParallelContext& ctx, FILE* log, const TrainOptions& options = {});

// Applies runtime.threads (0 = all cores) and returns the thread count used.
int set_threads(int requested);

}  // namespace loom
