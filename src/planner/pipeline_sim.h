// Times a pipeline schedule: the same action lists the executor runs
// (parallel/pp/schedule.h), each Forward and Backward (or its input and
// weight parts) given a duration.
//
// Stages run their lists in order. A send is posted without blocking and its
// message arrives p2p_seconds later; a receive waits for its message (one
// FIFO channel per direction and receiving stage, as in the checker).
// ReduceGrads and OptimizerStep take no time here: the time model adds them.
#pragma once

#include <vector>

#include "parallel/pp/schedule.h"

namespace loom::planner {

struct StageDurations {
  // Indexed by virtual stage (ChunkMap; interleaved: chunk * pp + stage). A schedule that splits its
  // backward (BackwardInput, BackwardWeight) needs backward_input and
  // backward_weight (which add up to backward).
  std::vector<double> forward, backward;
  std::vector<double> backward_input, backward_weight;
  double p2p_seconds = 0;  // one activation or gradient message
};

struct PipelineTiming {
  double makespan = 0;                 // until the last stage finishes its last compute
  std::vector<double> stage_finish;    // per stage: when its last compute action ends
  std::vector<double> stage_busy;      // per stage: sum of its compute durations
  // Share of the makespan the busiest stage sits idle: the pipeline bubble.
  double bubble_fraction() const;
};

// Throws Error if the schedule deadlocks (it never does for the builders'
// schedules; the checker proves that).
PipelineTiming simulate_pipeline(const pp::Schedule& schedule, int pp, int v, const StageDurations& d);
// Any chunk map (the one above: interleaved). Durations by virtual stage.
PipelineTiming simulate_pipeline(const pp::Schedule& schedule, const pp::ChunkMap& map, const StageDurations& d);

}  // namespace loom::planner
