// The end of a run: the result's figures from the loop's totals, the lines
// rank 0 prints (pipeline bubble, plan vs measured, communication, speed) and
// summary.json.
#pragma once

#include <cstdio>
#include <optional>

#include "config/run_config.h"
#include "kernels/backend.h"
#include "parallel/grid/parallel_context.h"
#include "planner/predict.h"
#include "train/replica.h"
#include "train/run_recorder.h"
#include "train/run_shape.h"
#include "train/step_loop.h"
#include "train/train_result.h"

namespace loom {

// Collective (the bubble over pp, the peak memory over the world).
void fill_result(TrainResult& result, const StepLoop& loop, const RunShape& shape, double flops_per_step,
                 Replica& replica, const ParallelContext& ctx);

// What the run measured beside what the planner predicted, to `log` and to
// the run directory (collective when the recorder is active).
struct RunEnd {
  const std::optional<planner::RunPrediction>& prediction;
  const DeviceInfo& device;  // what the backend runs on (summary.json's "cpu")
  double wall_s = 0;
  int micro_batches = 0;  // per step (the pipeline's m)
};
void report_run_end(const RunConfig& cfg, const ParallelContext& ctx, const Replica& replica, const TrainResult& result,
                    const StepLoop& loop, RunRecorder& recorder, const RunEnd& end, FILE* log);

}  // namespace loom
